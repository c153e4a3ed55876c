"""A human wave's plan: the participants file, the randomisation, the stored plan and where contacts may be.

The participants file is refused row by row (every bad line named, with the
field and the reason). The randomisation is checked against the protocol's
text (``protocol/human/protocol.md``, "Randomisation") written out again
here as a reference, and against its promises: conditions balanced within
scenario whatever the number recruited, each scenario's quota reached once
the places are filled, a plan that is a function of its seed. A created wave
keeps contacts in the owner-only links file alone: not in the store, not in
the assignment, not in any export.
"""

from __future__ import annotations

import json
import random
import stat
import subprocess

import pytest
from human_support import (
    CONTACTS,
    PARTICIPANTS,
    SCENARIO,
    WAVE,
    build_study,
    copy_study,
    every_text,
    write_participants,
)
from schedule_support import make_root
from view_support import pilot

from pilot.human import assignment, store
from pilot.human.participants import Participant, ParticipantFileError, read_participants
from pilot.human.wave import create_wave

OCCUPATIONS = ("operations", "accounting")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = make_root(tmp_path_factory.mktemp("human-plan"))
    return root, build_study(root)


@pytest.fixture
def study(built, tmp_path):
    root, folder = built
    return root, copy_study(folder, root / "analysis" / "data" / f"hw-{tmp_path.name[-12:]}")


def test_every_bad_row_is_refused_with_its_line_field_and_reason(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(
        "participant_id,contact,occupation,eligibility\n"
        "P01,ana@example.org,operations,practice\n"
        "P 02,ben@example.org,operations,practice\n"
        "P03,not an address,operations,practice\n"
        "P04,dee@example.org,astronomy,practice\n"
        "P05,eve@example.org,operations,three months\n"
        "P01,fay@example.org,operations,practice\n"
        "P07,ana@example.org,operations,practice\n"
        "P08,gus@example.org,operations\n",
        encoding="utf-8",
    )
    with pytest.raises(ParticipantFileError) as info:
        read_participants(path, OCCUPATIONS)
    found = {(p.line, p.field) for p in info.value.problems}
    assert found == {
        (3, "participant_id"),
        (4, "contact"),
        (5, "occupation"),
        (6, "eligibility"),
        (7, "participant_id"),
        (8, "contact"),
        (9, "row"),
    }
    text = str(info.value)
    assert "7 rows refused" in text and "line 6, field 'eligibility': 'three months': not eligible" in text
    assert "line 7, field 'participant_id': 'P01' is already the id of line 2" in text
    # The refusal never repeats a contact (the message may go to a log).
    assert "ana@example.org" not in text and "not an address" not in text


def test_a_wrong_header_and_an_empty_file_are_refused(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,contact,occupation,eligibility\nP01,a@b.org,operations,practice\n", encoding="utf-8")
    with pytest.raises(ParticipantFileError, match=r"line 1, field 'header': expected participant_id,contact"):
        read_participants(path, OCCUPATIONS)
    path.write_text("participant_id,contact,occupation,eligibility\n\n", encoding="utf-8")
    with pytest.raises(ParticipantFileError, match="the file lists no participant"):
        read_participants(path, OCCUPATIONS)


def _people(n: int, occupation: str = "operations") -> list[Participant]:
    return [Participant(f"P{i:02d}", f"p{i}@example.org", occupation, "practice", i + 1) for i in range(n)]


def _reference_plan(people, scenarios, conditions, per, study, wave, seed):
    """The protocol's randomisation written out from its text (one occupation)."""
    rng = random.Random(f"human-wave:{study}:{wave}:{seed}:{people[0].occupation}")
    order = list(scenarios)
    rng.shuffle(order)
    places = []
    for _ in range(per):
        for s in order:
            conds = list(conditions)
            rng.shuffle(conds)
            places += [(s, c) for c in conds]
    permuted = list(people)
    rng.shuffle(permuted)
    return {p.participant_id: place for p, place in zip(permuted, places, strict=False)}


@pytest.mark.parametrize("n", [1, 3, 5, 8, 12])
def test_the_plan_is_the_protocols_and_keeps_conditions_balanced_within_scenario(n):
    scenarios = ["ENG-01", "OPS-01"]
    people = _people(n)
    plan = assignment.assign(people, {"operations": scenarios}, ["H0", "H1"], 3, study="s", wave="w", seed=7)
    got = {p.participant.participant_id: (p.scenario, p.condition) for p in plan}
    assert got == _reference_plan(people, scenarios, ["H0", "H1"], 3, "s", "w", 7)
    for s in scenarios:
        counts = [sum(1 for p in plan if (p.scenario, p.condition) == (s, c)) for c in ("H0", "H1")]
        assert abs(counts[0] - counts[1]) <= 1, (n, s, counts)
    per_scenario = [sum(1 for p in plan if p.scenario == s) for s in scenarios]
    assert max(per_scenario) - min(per_scenario) <= 2
    # Repeats number each (scenario, condition)'s participants 1, 2, ...
    for s in scenarios:
        for c in ("H0", "H1"):
            assert sorted(p.repeat for p in plan if (p.scenario, p.condition) == (s, c)) == list(
                range(1, sum(1 for p in plan if (p.scenario, p.condition) == (s, c)) + 1)
            )


def test_filled_places_reach_each_scenarios_quota_and_more_people_than_places_are_refused():
    people = _people(12)
    plan = assignment.assign(people, {"operations": ["ENG-01", "OPS-01"]}, ["H0", "H1"], 3, study="s", wave="w", seed=1)
    for s in ("ENG-01", "OPS-01"):
        for c in ("H0", "H1"):
            assert sum(1 for p in plan if (p.scenario, p.condition) == (s, c)) == 3
    with pytest.raises(assignment.AssignmentError, match=r"'operations' has 13 eligible participants for 12 places"):
        assignment.assign(
            _people(13), {"operations": ["ENG-01", "OPS-01"]}, ["H0", "H1"], 3, study="s", wave="w", seed=1
        )


def test_the_plan_follows_from_the_seed_alone():
    people = _people(8)
    one = assignment.assign(people, {"operations": ["OPS-01"]}, ["H0", "H1"], 4, study="s", wave="w", seed=5)
    again = assignment.assign(people, {"operations": ["OPS-01"]}, ["H0", "H1"], 4, study="s", wave="w", seed=5)
    other = assignment.assign(people, {"operations": ["OPS-01"]}, ["H0", "H1"], 4, study="s", wave="w", seed=6)
    key = [(p.participant.participant_id, p.condition) for p in one]
    assert key == [(p.participant.participant_id, p.condition) for p in again]
    assert key != [(p.participant.participant_id, p.condition) for p in other]


def test_a_created_wave_keeps_contacts_in_the_owner_only_links_file_alone(study, tmp_path):
    root, folder = study
    made = create_wave(folder, WAVE, write_participants(tmp_path), per_condition=2)
    assert len(made.placements) == 3
    links = made.links_file.read_text(encoding="utf-8")
    assert stat.S_IMODE(made.links_file.stat().st_mode) == 0o600
    assert all(c in links for c in CONTACTS)
    for token in made.participant_tokens.values():
        assert f"/signin/{token}" in links
    # Nowhere else: not in the store (every table), not in the assignment, not in any other file of the study.
    text = every_text(folder)
    assert not any(c in text for c in CONTACTS)
    assert not any(t in text for t in made.participant_tokens.values()) and made.experimenter_token not in text
    assignment_rows = made.assignment_file.read_text(encoding="utf-8").splitlines()
    assert assignment_rows[0] == "position,participant_id,occupation,condition,scenario,repeat,run_id"
    with store.open_store(folder) as st:
        cells = st.conn.execute("SELECT * FROM cells WHERE wave = 'human' ORDER BY order_index").fetchall()
        rows = store.participants(st.conn, WAVE)
    assert [c["arm"] for c in cells] == [r["condition"] for r in rows]
    assert {c["scenario"] for c in cells} == {SCENARIO} and {c["model"] for c in cells} == {"human"}
    assert [c["run_id"] for c in cells] == [f"{SCENARIO}.{r['condition']}.{WAVE}.r{r['run_id'][-1]}" for r in rows]
    # H1's cap is the assistant's budget of study.yml; H0 reserves only the judges' reserve (0.30).
    for c in cells:
        assert (c["cap_usd"], c["reserve_micro"]) == ((4.0, 4_300_000) if c["arm"] == "H1" else (0.0, 300_000))


def test_a_second_wave_continues_the_repeats_and_the_order(study, tmp_path):
    _, folder = study
    create_wave(folder, WAVE, write_participants(tmp_path), per_condition=2)
    other = tmp_path / "more.csv"
    other.write_text(PARTICIPANTS.replace("P0", "Q0").replace("@example.org", "@example.net").replace("@cy_", "@dy_"))
    create_wave(folder, "w2", other, per_condition=2)
    with store.open_store(folder) as st:
        cells = st.conn.execute("SELECT run_id, arm, repeat, order_index FROM cells WHERE wave = 'human'").fetchall()
    assert len({(c["arm"], c["repeat"]) for c in cells}) == 6 and len({c["order_index"] for c in cells}) == 6
    with pytest.raises(store.HumanWaveError, match="exists already"):
        create_wave(folder, "w2", other, per_condition=2)


def test_simulated_participants_never_join_people_nor_people_a_simulated_wave(study, tmp_path):
    _, folder = study
    drawn = [Participant("SIM-0001", "sim-1@participants.invalid", "operations", "practice", 2)]
    create_wave(folder, "sim", None, per_condition=1, source="simulated", participants=drawn)
    with pytest.raises(store.HumanWaveError, match="holds a wave of SIMULATED participants"):
        create_wave(folder, WAVE, write_participants(tmp_path), per_condition=2)


def test_simulated_participants_are_refused_where_agent_runs_are_findings(study):
    _, folder = study
    with store.open_store(folder) as st, st.transaction() as c:
        c.execute("UPDATE attempts SET backend = 'claude-code'")
    drawn = [Participant("SIM-0001", "sim-1@participants.invalid", "operations", "practice", 2)]
    with pytest.raises(store.HumanWaveError, match="which are findings; SIMULATED participants belong to a dry run"):
        create_wave(folder, "sim", None, per_condition=1, source="simulated", participants=drawn)


def test_the_command_names_the_file_line_field_and_reason_and_creates_nothing(study, tmp_path):
    root, folder = study
    bad = tmp_path / "bad.csv"
    bad.write_text(PARTICIPANTS + "P09,zed@example.org,operations,intern\n", encoding="utf-8")
    proc = pilot(root, "human", "create", folder.name, WAVE, "--participants", str(bad), check=False)
    assert proc.returncode == 2
    assert (
        proc.stderr.startswith("pilot human: ") and "line 5, field 'eligibility': 'intern': not eligible" in proc.stderr
    )
    with store.open_store(folder) as st:
        assert store.waves(st.conn) == []
    good = write_participants(tmp_path)
    proc = pilot(root, "human", "create", folder.name, WAVE, "--participants", str(good), "--per-condition", "2")
    out = json.loads(proc.stdout)
    assert out["participants"] == 3 and sum(out["per_scenario_and_condition"].values()) == 3
    assert not any(c in proc.stdout + proc.stderr for c in CONTACTS)
    assert (
        subprocess.run(
            ["stat", "-c", "%a", str(folder / "human" / WAVE / "links.csv")], capture_output=True, text=True
        ).stdout.strip()
        == "600"
    )
