"""The grading wave's plan: the graders file, the stratified sample and the balanced incomplete design.

Expected values come from the design's own declarations (K graders per
package, each of the package's occupation; arms within grader differ by at
most one; N per scenario x arm), from counts worked out by hand, and from the
dry run's study as ``pilot grading create`` sees it.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import stat
from collections import Counter
from pathlib import Path

import pytest

from pilot.grading import tokens
from pilot.grading.assignment import AssignmentError, Package, arm_spread, assign, draw_sample
from pilot.grading.graders import GraderFileError, read_graders
from pilot.grading.plan import create_wave, eligible_packages
from pilot.grading.store import GradingError

ARMS = ("A0", "A1", "A2", "A3", "A4")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _packages(scenarios: int = 10, repeats: int = 3) -> list[Package]:
    # occupation o0..o9, one per scenario, as in the design's ten
    return [
        Package(f"S{s:02d}.{arm}.r{r}", f"S{s:02d}", arm, "m", f"o{s}")
        for s in range(scenarios)
        for arm in ARMS
        for r in range(1, repeats + 1)
    ]


def _graders(tmp_path: Path, per_occupation: int = 3, occupations: int = 10, extra: str = "") -> list:
    lines = ["name,contact,occupations"]
    n = 0
    for o in range(occupations):
        for _ in range(per_occupation):
            n += 1
            lines.append(f"Grader {n},g{n}@example.org,o{o}")
    return read_graders(_write(tmp_path / "graders.csv", "\n".join(lines) + "\n" + extra))


# ------------------------------------------------------------------ graders file


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        ("", 1, "header", "empty"),
        ("name,email,occupations\nA,a@x.org,legal\n", 1, "header", "expected name,contact,occupations"),
        ("name,contact,occupations\nA,a@x.org\n", 2, "row", "has 2 fields"),
        ("name,contact,occupations\n,a@x.org,legal\n", 2, "name", "is empty"),
        ("name,contact,occupations\nA,not an address,legal\n", 2, "contact", "neither an e-mail address nor a handle"),
        ("name,contact,occupations\nA,a@x.org,legal\nB,A@X.org,legal\n", 3, "contact", "already the contact of line 2"),
        ("name,contact,occupations\nA,a@x.org, ; \n", 2, "occupations", "is empty"),
        (
            "name,contact,occupations\nA,a@x.org,legal\nB,@bee,astrology;tarot\n",
            3,
            "occupations",
            "matches no occupation",
        ),
    ],
)
def test_a_bad_graders_file_names_file_line_field_and_reason(tmp_path, text, line, field, reason):
    path = _write(tmp_path / "graders.csv", text)
    with pytest.raises(GraderFileError) as err:
        read_graders(path, ["legal", "accounting"])
    msg = str(err.value)
    assert "graders.csv" in msg and f"line {line}," in msg and f"field '{field}'" in msg and reason in msg


def test_graders_keep_only_the_occupations_graded_and_get_ids_in_file_order(tmp_path):
    path = _write(tmp_path / "g.csv", "name,contact,occupations\nA,a@x.org,Legal;astrology\n\nB,@bee,accounting\n")
    a, b = read_graders(path, ["legal", "accounting"])
    assert (a.grader_id, a.occupations, a.line) == ("G01", ("legal",), 2)
    assert (b.grader_id, b.contact, b.occupations, b.line) == ("G02", "@bee", ("accounting",), 4)


# ------------------------------------------------------------------ sample


def test_the_stratified_sample_takes_n_per_scenario_and_arm_and_follows_the_seed_only():
    pk = _packages(scenarios=2, repeats=3) + [Package("S00.A0.r4", "S00", "A0", "m", "o0")]
    drawn = draw_sample(pk, 2, seed=1)
    assert Counter(p.stratum for p in drawn) == {(f"S0{s}", a): 2 for s in range(2) for a in ARMS}
    assert draw_sample(list(reversed(pk)), 2, seed=1) == drawn  # listing order does not matter
    assert {tuple(p.run_id for p in draw_sample(pk, 2, seed=s)) for s in range(8)} != {tuple(p.run_id for p in drawn)}
    assert draw_sample(pk, 5, seed=1) == sorted(pk, key=lambda p: (p.stratum, p.run_id))  # small strata give all
    with pytest.raises(AssignmentError, match="at least one package per stratum"):
        draw_sample(pk, 0, seed=1)


# ------------------------------------------------------------------ assignment


def test_every_package_gets_k_distinct_graders_of_its_occupation_with_arms_balanced_within_grader(tmp_path):
    graders = _graders(tmp_path)
    occ = {g.grader_id: set(g.occupations) for g in graders}
    pk = _packages()
    plan = assign(pk, graders, 2, seed=20260415)
    by_package: dict[str, list] = {}
    for a in plan:
        by_package.setdefault(a.package.run_id, []).append(a)
    assert set(by_package) == {p.run_id for p in pk}
    for assigned in by_package.values():
        assert sorted(a.slot for a in assigned) == [1, 2]
        assert len({a.grader_id for a in assigned}) == 2  # no grader sees a run twice
        assert all(assigned[0].package.occupation in occ[a.grader_id] for a in assigned)
    # 15 packages x 2 graders per occupation over 3 graders: 10 each, 2 per arm each
    assert Counter(a.grader_id for a in plan) == {g.grader_id: 10 for g in graders}
    assert set(arm_spread(plan).values()) == {0}
    # each grader's queue is a permutation of 1..n, not in arm order
    for g in graders:
        mine = sorted((a for a in plan if a.grader_id == g.grader_id), key=lambda a: a.position)
        assert [a.position for a in mine] == list(range(1, 11))
    sequences = [
        tuple(a.package.arm for a in sorted((a for a in plan if a.grader_id == g.grader_id), key=lambda a: a.position))
        for g in graders
    ]
    assert any(seq != tuple(sorted(seq)) for seq in sequences)
    assert assign(pk, graders, 2, seed=20260415) == plan
    assert assign(pk, graders, 2, seed=1) != plan


def test_balance_holds_when_loads_do_not_divide_and_graders_span_occupations(tmp_path):
    # 4 graders for o0 (one also grades o1), 2 for o1; 2 scenarios x 5 arms x 3 repeats, K = 3
    path = _write(
        tmp_path / "g.csv",
        "name,contact,occupations\nA,a@x.org,o0\nB,b@x.org,o0\nC,c@x.org,o0\n"
        "D,d@x.org,o0;o1\nE,e@x.org,o1\nF,f@x.org,o1\n",
    )
    graders = read_graders(path)
    plan = assign(_packages(scenarios=2), graders, 3, seed=3)
    assert len(plan) == 30 * 3
    assert max(arm_spread(plan).values()) <= 1
    # o1 has exactly three graders (D, E, F): each grades every o1 package; A, B, C and D share o0's 45 slots
    o1 = [a for a in plan if a.package.occupation == "o1"]
    assert Counter(a.grader_id for a in o1) == {"G04": 15, "G05": 15, "G06": 15}
    o0 = Counter(a.grader_id for a in plan if a.package.occupation == "o0")
    assert sum(o0.values()) == 45 and set(o0) <= {"G01", "G02", "G03", "G04"}


def test_too_few_graders_for_k_is_refused_naming_the_occupation(tmp_path):
    graders = _graders(tmp_path, per_occupation=2)
    with pytest.raises(AssignmentError, match=r"occupation 'o0' has 2 grader\(s\).*--per-package 3 needs at least 3"):
        assign(_packages(), graders, 3, seed=1)
    with pytest.raises(AssignmentError, match="at least two graders per package"):
        assign(_packages(), graders, 1, seed=1)


# ------------------------------------------------------------------ pilot grading create on the dry run's study


@pytest.fixture(scope="module")
def study(tmp_path_factory, soffice) -> Path:
    from view_support import copy_study, simulated_study

    return copy_study(simulated_study(), tmp_path_factory.mktemp("grading-plan") / "viewsim")


def test_pilot_grading_create_on_the_dry_run_gives_a_balanced_plan_and_hashed_tokens(study, tmp_path):
    graders = _write(
        tmp_path / "graders.csv",
        "name,contact,occupations\nAda,ada@example.org,accounting\n"
        "Ben,@ben,accounting\nCy,cy@example.org,accounting;legal\n",
    )
    made = create_wave(study, "experts-1", graders, per_package=2)
    with sqlite3.connect(study / "study.sqlite") as conn:
        judged = conn.execute(
            "SELECT COUNT(*) FROM runs WHERE json_extract(record_json, '$.status') IN ('completed', 'capped')"
        ).fetchone()[0]
        arms = conn.execute(
            "SELECT a.grader_id, p.arm, COUNT(*) FROM grading_assignments a JOIN grading_packages p "
            "USING (wave, package_id) WHERE a.wave = 'experts-1' GROUP BY 1, 2"
        ).fetchall()
        hashes = {r[0] for r in conn.execute("SELECT token_hash FROM graders WHERE wave = 'experts-1'")}
        judge_rows = conn.execute("SELECT COUNT(*) FROM judge_scores").fetchone()[0]
    assert len(made.packages) == made.offered <= judged and len(made.assignments) == 2 * len(made.packages)
    per_grader: dict[str, list[int]] = {}
    for g, _, n in arms:
        per_grader.setdefault(g, []).append(n)
    arms_in_plan = {p.arm for p in made.packages}
    assert all(len(v) == len(arms_in_plan) and max(v) - min(v) <= 1 for v in per_grader.values())
    # the store holds hashes alone; the links file (owner-only) the tokens
    assert hashes == {tokens.token_hash(t) for t in made.grader_tokens.values()}
    assert not any(t in (study / "study.sqlite").read_bytes().decode("latin-1") for t in made.grader_tokens.values())
    assert stat.S_IMODE(os.stat(made.links_file).st_mode) == 0o600
    rows = list(csv.DictReader(made.links_file.open()))
    assert rows[0]["path"] == f"/coordinator/signin/{made.coordinator_token}"
    assert {r["path"] for r in rows[1:]} == {f"/signin/{t}" for t in made.grader_tokens.values()}
    # the judges' records are untouched
    with sqlite3.connect(study / "study.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM judge_scores").fetchone()[0] == judge_rows
    with pytest.raises(GradingError, match="exists already"):
        create_wave(study, "experts-1", graders)


def test_the_cli_refuses_a_grader_of_no_matching_occupation_naming_the_line_and_writes_nothing(study, tmp_path):
    from view_support import copy_study, pilot

    root = tmp_path / "root"
    (root / "analysis" / "data").mkdir(parents=True)
    for name in ("protocol",):
        os.symlink(Path(__file__).resolve().parent.parent / name, root / name)
    os.symlink(Path(__file__).resolve().parent.parent / "analysis" / "config", root / "analysis" / "config")
    copy_study(study, root / "analysis" / "data" / "viewsim")
    bad = _write(
        tmp_path / "graders.csv",
        "name,contact,occupations\nAda,ada@example.org,accounting\nLex,lex@example.org,legal\n",
    )
    proc = pilot(root, "grading", "create", "viewsim", "w2", "--graders", str(bad), check=False)
    assert proc.returncode == 2
    assert (
        proc.stderr.startswith("pilot grading: ")
        and "graders.csv: line 3, field 'occupations': legal matches no occupation" in proc.stderr
    )
    good = _write(
        tmp_path / "ok.csv", "name,contact,occupations\nAda,ada@example.org,accounting\nBo,bo@example.org,accounting\n"
    )
    for sample, reason in (("0", "a positive number"), ("some", "a positive number")):
        proc = pilot(
            root, "grading", "create", "viewsim", "w2", "--graders", str(good), "--sample", sample, check=False
        )
        assert proc.returncode == 2 and reason in proc.stderr
    assert pilot(root, "grading", "list", "viewsim").stdout.count("w2") == 0
    made = json.loads(pilot(root, "grading", "create", "viewsim", "w2", "--graders", str(good), "--sample", "1").stdout)
    with sqlite3.connect(study / "study.sqlite") as conn:
        strata = conn.execute(
            "SELECT COUNT(DISTINCT c.arm) FROM cells c JOIN runs r USING (run_id) "
            "WHERE json_extract(r.record_json, '$.status') IN ('completed', 'capped')"
        ).fetchone()[0]
    assert made["packages"] == strata  # one per scenario x arm (one scenario here)
    assert made["largest_arm_imbalance_within_a_grader"] <= 1 and made["per_grader"] == {
        "G01": made["packages"],
        "G02": made["packages"],
    }


def test_eligible_packages_are_every_judged_finished_run_agent_errors_included():
    # protocol/human/evaluation.md: every judged run of the primary waves, whatever ended its session. Of six runs,
    # the completed, capped and agent-error ones the panel scored are drawn; not one the panel never scored, not a
    # run of the model-sensitivity wave, and not an infrastructure failure (rerun, never analysed).
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE cells (run_id TEXT, scenario TEXT, arm TEXT, model TEXT, wave TEXT)")
    conn.execute("CREATE TABLE runs (run_id TEXT, record_json TEXT)")
    judged = [{"score_0_100": 60, "error": None}]
    rows = [
        ("r1", "pilot", "completed", judged),
        ("r2", "pilot", "capped", judged),
        ("r3", "repeat3", "agent_error", judged),
        ("r4", "pilot", "agent_error", [{"score_0_100": None, "error": "no reply"}]),
        ("r5", "sensitivity", "completed", judged),
        ("r6", "pilot", "infra_error", judged),
    ]
    for run_id, wave, status, judges in rows:
        conn.execute("INSERT INTO cells VALUES (?, 'HR-01', 'A1', 'm', ?)", (run_id, wave))
        conn.execute("INSERT INTO runs VALUES (?, ?)", (run_id, json.dumps({"status": status, "judges": judges})))
    assert [p.run_id for p in eligible_packages(conn)] == ["r1", "r2", "r3"]
