"""What the paper says around its numbers: deviations, stand-ins, the people not involved, the authors' statements.

Each expectation is stated here from the protocol's own files (the amendments'
ids and stages, the registry of stand-ins) or by hand, never read back from the
generator under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pilot import backends, paths
from pilot.protocol import ProtocolError, load_amendments
from pilot.report import apparatus, deviations, stand_ins

# ------------------------------------------------------------------ deviations from the registered protocol


def test_every_amendment_after_the_registered_design_is_listed_with_change_and_effect():
    dev = deviations.load()
    rerun = [r["id"] for r in load_amendments() if "rerun" in r["stage"]]
    assert [d.id for d in dev.listed] == rerun
    assert rerun[0] == "A-010"  # are the recorded study's
    assert deviations.missing_entries(dev) == []
    for d in dev.listed:
        assert d.changed and d.effect and "not stated" not in d.changed, d.id


def test_the_numbering_gaps_are_found_and_explained():
    ids = sorted(int(r["id"][2:]) for r in load_amendments())
    by_hand = [f"A-{n:03d}" for n in range(1, ids[-1] + 1) if n not in ids]
    dev = deviations.load()
    assert list(dev.gaps) == by_hand == ["A-003", "A-004", "A-007", "A-008"]
    tex = deviations.subsection(dev)
    assert "The numbering skips A-003, A-004, A-007 and A-008:" in tex
    assert "\\subsection{Deviations from the registered protocol}" in tex
    assert "A-010 to A-026" in tex or f"A-010 to {dev.listed[-1].id}" in tex
    assert "Which freeze the pooling rests on" in tex and "\\FreezeSentence" in tex


def test_an_amendment_without_an_entry_is_printed_as_not_stated_and_named(tmp_path):
    src = Path(deviations.DEVIATIONS_FILE).read_text(encoding="utf-8")
    # The last amendment of the register (read from the file itself), its entry removed.
    last = (paths.ROOT / "protocol" / "amendments.csv").read_text(encoding="utf-8").splitlines()[-1].split(",")[0]
    cut = src.split(f"  {last}:")[0]
    path = tmp_path / "deviations.yml"
    path.write_text(cut, encoding="utf-8")
    dev = deviations.load(path)
    assert deviations.missing_entries(dev) == [f"{last}: no entry in protocol/deviations.yml"]
    assert "not stated" in deviations.subsection(dev)


@pytest.mark.parametrize(
    "text, field",
    [
        ("registered_through: later\ngaps: {ids: [], why: x}\namendments: {}\n", "registered_through"),
        ("registered_through: after pilot\ngaps: {ids: [A-3], why: x}\namendments: {}\n", "gaps.ids.0"),
        (
            "registered_through: after pilot\ngaps: {ids: [], why: x}\namendments: {A-999: {changed: a, effect: b}}\n",
            "amendments.A-999",
        ),
        (
            "registered_through: after pilot\ngaps: {ids: [], why: x}\namendments: {A-010: {changed: a}}\n",
            "amendments.A-010",
        ),
    ],
)
def test_a_malformed_deviations_file_is_refused_by_field(tmp_path, text, field):
    path = tmp_path / "deviations.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProtocolError) as err:
        deviations.load(path)
    assert err.value.field == field, (err.value.field, err.value.reason)


# ------------------------------------------------------------------ stand-ins, from the registry


def test_every_stand_in_sentence_names_what_it_stands_in_for_and_its_model():
    text = stand_ins.study_sentence(b for b in ["simulated"])  # any iterable, a generator too
    assert text.startswith("SIMULATED: ")
    for s in backends.STAND_INS[backends.SIMULATED]:
        assert f"standing in for {s.stands_for}" in text
        assert f"\\nolinkurl{{{s.model}}}" in text
    assert "no person took part" in text
    assert stand_ins.study_sentence(["claude-code"]).startswith(
        "The agent and the judges of this study are the real ones"
    )


def test_graders_are_named_by_what_they_are():
    assert stand_ins.grader_noun("simulated") == "simulated graders"
    assert stand_ins.grader_noun("experts") == "experts"
    sim = stand_ins.grading_sentence("simulated")
    assert (
        sim.startswith("SIMULATED: ") and "standing in for the experts of A-015" in sim and "no person took part" in sim
    )
    assert "not run" in stand_ins.grading_sentence(None)
    with pytest.raises(backends.UnknownBackend):
        stand_ins.grader_noun("crowd")


def test_the_waves_of_people_not_run_are_said():
    # A dry run: the expert wave was played by simulated graders, the human wave was not run.
    dry = stand_ins.people_waves_sentence("simulated")
    assert "none was run with people for this build" in dry
    assert "was played by simulated graders" in dry and "has not been run" in dry
    # A real wave of experts: only the human wave is left to name.
    real = stand_ins.people_waves_sentence("experts")
    assert "expert grading wave" not in real and "H0" in real and "has not been run" in real
    # A dry run whose human wave drew SIMULATED participants says so; a wave of people is not among those not run.
    both = stand_ins.people_waves_sentence("simulated", "simulated")
    assert "was played by SIMULATED participants" in both and "has not been run" not in both
    assert "none was run with people for this build" in both
    people = stand_ins.people_waves_sentence("experts", "participants")
    assert people == "Every wave of people the protocol defines was run."


# ------------------------------------------------------------------ authors, funding, competing interests


def test_an_unfilled_authors_file_prints_placeholders_and_says_so(tmp_path, capsys):
    path = tmp_path / "authors.yml"
    path.write_text("authors:\n  - {name: Not yet named, placeholder: true}\nfunding: ''\n", encoding="utf-8")
    app = apparatus.load_apparatus(path)
    assert app.missing() == ["authors", "funding", "competing interests"]
    m = apparatus.apparatus_macros(path=path)
    assert "authors not yet stated in \\texttt{manuscript/authors.yml}" in m["PaperAuthors"]
    assert "Funding not yet stated" in m["PaperFunding"]
    assert "Competing interests not yet stated" in m["PaperCompetingInterests"]
    assert m["PaperApparatusMissing"] == "authors, funding, competing interests"


def test_a_filled_authors_file_prints_its_statements(tmp_path):
    path = tmp_path / "authors.yml"
    path.write_text(
        "authors:\n  - {name: Ada Byron, affiliation: Lab}\nfunding: Funded by the Lab.\n"
        "competing_interests: The authors declare none.\n",
        encoding="utf-8",
    )
    m = apparatus.apparatus_macros(path=path)
    assert m["PaperFunding"] == "Funded by the Lab." and m["PaperCompetingInterests"] == "The authors declare none."
    assert m["PaperApparatusMissing"] == "none" and "not yet" not in m["PaperAuthors"]
