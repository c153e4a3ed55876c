"""The kit tested as a newcomer uses it: a scenario added exactly as docs/adding-a-scenario.md says passes the suite.

In a temporary checkout (the repository's ``protocol/``, ``src/``, ``tests/`` and
``pyproject.toml``; the repository itself is never written) a customs-brokerage
scenario, CUS-01, is started with ``pilot scenarios new``, filled in from the
author's files in ``tests/fixtures/cus_01/`` (brief, scenario, oracle, rubric,
the generator/solver module and its own mutation tests), its inputs generated,
and joined to a new scenario set with ``pilot protocol amend``. Then, as the
docs say: ``pilot scenarios check CUS-01`` passes, ``pilot protocol validate``
passes, and the scenario's own tests pass beside the suite's census of added
scenarios and the amendment convention.

Each deliberate weakening of a passing scenario (the table below, one copy of
CUS-01 each, checked in one batch) makes the check fail naming the criterion
or the trap. The figures the failures must name are the fixture's declared
truths (the header of its oracle.yml, worked out by hand): 1.0791, the invoice
date's rate; 6,117.77, the total duty at that rate; 0, the additional duty of
the origin ignored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kit_support
import pytest

from pilot import paths

pytestmark = [
    # The weakenings are checked in one batch, set up by the first test that asks for them: more than the suite's
    # default 600 s on a loaded machine.
    pytest.mark.timeout(2400),
    pytest.mark.usefixtures("soffice"),
]

FIXTURE = Path(__file__).parent / "fixtures" / "cus_01"
SID = "CUS-01"
TITLE = "Customs entry for the March lamp shipment"
SET = "customs"
# The bundle files the author writes over the skeleton's (docs/adding-a-scenario.md, section 2).
BUNDLE_FILES = ("brief.md", "scenario.yml", "oracle.yml", "rubric.yml")


def _ignore(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", ".pytest_cache") or n.endswith((".pyc", ".egg-info"))}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checkout")
    for part in ("protocol", "src", "tests"):
        shutil.copytree(paths.ROOT / part, root / part, ignore=_ignore)
    shutil.copyfile(paths.ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PILOT_ROOT": str(root), "PYTHONPATH": str(root / "src")}


def run(root: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=root, env=_env(root), capture_output=True, text=True, timeout=timeout)


def pilot(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run(root, sys.executable, "-m", "pilot", *args)


@pytest.fixture(scope="module")
def added(checkout: Path) -> dict[str, subprocess.CompletedProcess]:
    """CUS-01 added step by step as the docs say; each step's output."""
    steps = {"new": pilot(checkout, "scenarios", "new", SID, "--occupation", "customs brokerage", "--title", TITLE)}
    bundle = checkout / "protocol" / "scenarios" / SID
    for name in BUNDLE_FILES:
        shutil.copyfile(FIXTURE / name, bundle / name)
    shutil.copyfile(FIXTURE / "cus_01.py", checkout / "src" / "pilot" / "scenarios" / "library" / "cus_01.py")
    # Kept as .txt in the fixture, so that the repository's own suite does not collect it.
    shutil.copyfile(FIXTURE / "test_mutations_cus_01.py.txt", checkout / "tests" / "test_mutations_cus_01.py")
    steps["generate"] = pilot(checkout, "scenarios", "generate", SID)
    steps["amend"] = pilot(
        checkout,
        "protocol",
        "amend",
        "--scenario",
        SID,
        "--set",
        SET,
        "--content",
        "Made before any run of the customs set, and identical for every arm. It adds CUS-01, customs brokerage.",
    )
    return steps


def test_new_writes_the_skeleton_the_docs_list(added: dict, checkout: Path):
    new = added["new"]
    assert new.returncode == 0, new.stderr
    written = [Path(line).relative_to(checkout).as_posix() for line in new.stdout.splitlines()[:-1]]
    assert written == kit_support.skeleton_files(SID)
    assert new.stdout.splitlines()[-1].startswith(
        f"next: fill in every TODO(author), then `pilot scenarios check {SID}`"
    )


def test_generate_and_amend_write_inputs_and_the_amendment(added: dict, checkout: Path):
    assert added["generate"].returncode == 0, added["generate"].stderr
    inputs = sorted(p.name for p in (checkout / "protocol" / "scenarios" / SID / "inputs").iterdir())
    assert inputs == [
        "commercial_invoice.csv",
        "entry_instructions.txt",
        "exchange_rates.csv",
        "shipment_documents.txt",
        "tariff_schedule.csv",
    ]
    amend = added["amend"]
    assert amend.returncode == 0, amend.stderr
    assert f": Extension scenario {SID}" in amend.stdout and f"scenario_sets.{SET} holds 11 scenarios" in amend.stdout
    last = (checkout / "protocol" / "amendments.csv").read_bytes().splitlines(keepends=True)[-1]
    assert last.startswith(b"A-026,") and b",Extension scenario CUS-01," in last and last.endswith(b'."\n')


@pytest.fixture(scope="module")
def checked(added: dict, checkout: Path) -> dict[str, dict]:
    proc = pilot(checkout, "scenarios", "check", SID, "--json")
    assert proc.stdout, proc.stderr
    return {"returncode": proc.returncode, "rows": {r["check"]: r for r in json.loads(proc.stdout.splitlines()[0])}}


def test_the_check_passes(checked: dict):
    failed = {c: r["reason"] for c, r in checked["rows"].items() if r["verdict"] != "pass"}
    assert failed == {} and checked["returncode"] == 0


def test_each_trap_is_proved_by_its_fallen_package(checked: dict):
    rows = checked["rows"]
    # caught_by as the fixture's oracle.yml declares it: what each careless reading changes, worked out by hand.
    assert (
        "fails exactly book_additional_duty, book_total_duty, memo_states_total_duty, memo_names_origin"
        in (rows["trap:origin_ignored"]["reason"])
    )
    assert "solve_fallen('invoice_date_rate')" in rows["trap:invoice_date_rate"]["reason"]
    assert {c for c in rows if c.startswith("probe:")} == {
        "probe:book_exchange_rate",
        "probe:book_customs_value",
        "probe:book_mfn_duty",
        "probe:book_additional_duty",
        "probe:book_total_duty",
        "probe:memo_states_total_duty",
        "probe:memo_names_rate_date",
        "probe:memo_names_origin",
    }
    # The exchange rate's mutation lands one place outside its tolerance of 0, in the cell the formulas read.
    assert "1.0824 (just outside 1.0823 ± 0)" in rows["mutation:book_exchange_rate"]["reason"]


def test_the_protocol_validates(added: dict, checkout: Path):
    proc = pilot(checkout, "protocol", "validate")
    assert proc.returncode == 0, proc.stderr
    assert "21 scenario bundles" in proc.stdout


def test_the_scenarios_own_tests_and_the_suites_census_pass(added: dict, checkout: Path):
    proc = run(
        checkout,
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "tests/test_mutations_cus_01.py",
        "tests/test_protocol.py::test_repository_protocol_is_valid",
        "tests/test_protocol.py::test_every_bundle_is_validated_and_belongs_to_a_set",
        "tests/test_oracle_mutations.py::test_every_gold_decision_table_has_its_flattened_variants",
        "tests/test_scenario_consistency.py::test_every_bundle_of_every_set_is_checked",
        "tests/test_scenario_consistency.py::test_brief_oracle_rubric_passes_on_every_bundle",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout and "failed" not in proc.stdout


# ----------------------------------------------------------------------------- the weakenings

#: name -> (file of the bundle, text, replacement) edits applied to a copy of CUS-01, and the (check, words) rows of
#: the check that must fail. The weakenings of a passing scenario that the check once let through, and two it caught.
WEAKENINGS: dict[str, tuple[list[tuple[str, str, str]], list[tuple[str, tuple[str, ...]]]]] = {
    "trap criterion made optional": (
        [
            (
                "oracle.yml",
                "{id: book_total_duty, kind: labelled_value, required: true,",
                "{id: book_total_duty, kind: labelled_value, required: false,",
            )
        ],
        [("trap:invoice_date_rate", ("book_total_duty is not required",))],
    ),
    "expected value set to the trap's wrong value": (
        [("oracle.yml", "label: 'additional duty', expected: 4799.22", "label: 'additional duty', expected: 0")],
        [("gold", ("book_additional_duty",))],
    ),
    "tolerance wide enough to accept the wrong exchange rate": (
        [("oracle.yml", "expected: 1.0823, tolerance: 0}", "expected: 1.0823, tolerance: 0.005}")],
        [
            ("probe:book_exchange_rate", ("admits 1.0791", "invoice_date_rate")),
            ("trap:invoice_date_rate", ("passes book_exchange_rate",)),
        ],
    ),
    "any value accepted for the additional duty": (
        [("oracle.yml", "expected: 4799.22, tolerance: 0.01}", "expected: 4799.22, tolerance: 1000000}")],
        [
            ("probe:book_additional_duty", ("admits 0,", "origin_ignored")),
            ("trap:origin_ignored", ("passes book_additional_duty",)),
        ],
    ),
    "memo pattern weakened to a generic word": (
        [("oracle.yml", "patterns: ['Chin(a|ese)']", "patterns: ['duty']")],
        [
            ("probe:memo_names_origin", ("brief's own words satisfy", "/duty/")),
            ("trap:origin_ignored", ("passes memo_names_origin",)),
        ],
    ),
    "a trap declared as caught by a presence criterion": (
        [
            (
                "oracle.yml",
                "memo_states_total_duty, memo_names_origin]",
                "memo_states_total_duty, memo_names_origin, memo_present]",
            )
        ],
        [("trap:origin_ignored", ("memo_present is a present criterion",))],
    ),
    "the rate trap left to the total alone, with a loose tolerance": (
        [
            ("oracle.yml", "book_total_duty, memo_states_total_duty, memo_names_rate_date]", "]"),
            (
                "oracle.yml",
                "caught_by: [book_exchange_rate, book_customs_value, book_mfn_duty, book_additional_duty, ]",
                "caught_by: [book_total_duty]",
            ),
            ("oracle.yml", "expected: 6135.90, tolerance: 0.01}", "expected: 6135.90, tolerance: 25}"),
        ],
        [
            ("trap:invoice_date_rate", ("passes book_total_duty", "also fails book_exchange_rate")),
            ("probe:book_total_duty", ("admits 6,117.77", "invoice_date_rate")),
        ],
    ),
    "the brief no longer asks the memo for what the oracle reads": (
        [("brief.md", " and name the country of origin of\n   any goods that owe more than their MFN duty", "")],
        [
            (
                "brief/oracle/rubric",
                ("entry for entry_memo.docx does not ask for /country of origin/", "memo_names_origin"),
            )
        ],
    ),
    "the brief's Exchange rate line deleted": (
        [("brief.md", "   - Exchange rate (US dollars per euro)\n", "")],
        [
            (
                "brief/oracle/rubric",
                ("entry for entry_worksheet.xlsx does not ask for the line /exchange rate/", "book_exchange_rate"),
            )
        ],
    ),
    "a sentence in the brief that gives the traps away": (
        [
            (
                "brief.md",
                "Amounts in US dollars to the cent.",
                "Amounts in US dollars to the cent. Use the rate of 12 March, the on-board date, take the freight and "
                "insurance off each line, and remember that the floor lamps and LED strips are of Chinese origin.",
            )
        ],
        [
            ("brief/oracle/rubric", ("names the answer of trap invoice_date_rate",)),
            ("brief/oracle/rubric", ("names the answer of trap origin_ignored",)),
        ],
    ),
}


@pytest.fixture(scope="module")
def weakened(added: dict, checkout: Path) -> dict[str, list[dict]]:
    """Each weakening applied to its own copy of CUS-01 (CUS-11, CUS-12, ...), all checked in one batch."""
    scenarios = checkout / "protocol" / "scenarios"
    ids = {}
    for k, (name, (edits, _)) in enumerate(WEAKENINGS.items(), start=11):
        sid = f"CUS-{k}"
        shutil.copytree(scenarios / SID, scenarios / sid)
        edits = [("scenario.yml", f"id: {SID}", f"id: {sid}"), *edits]
        for file, old, new in edits:
            path = scenarios / sid / file
            text = path.read_text(encoding="utf-8")
            assert text.count(old) == 1, f"{name}: {old!r} is not in {file} exactly once"
            path.write_text(text.replace(old, new), encoding="utf-8")
        ids[name] = sid
    proc = pilot(checkout, "scenarios", "check", *ids.values(), "--json")
    assert proc.returncode == 1 and proc.stdout, proc.stderr
    rows = json.loads(proc.stdout.splitlines()[0])
    return {name: [r for r in rows if r["scenario"] == sid] for name, sid in ids.items()}


@pytest.mark.parametrize("name", list(WEAKENINGS))
def test_each_weakening_fails_the_check_naming_it(weakened: dict, name: str):
    rows = weakened[name]
    failed = [(r["check"], r["reason"]) for r in rows if r["verdict"] != "pass"]
    for check, words in WEAKENINGS[name][1]:
        hits = [reason for c, reason in failed if c == check and all(w in reason for w in words)]
        assert hits, f"{name}: no failing {check} row names {words}; failing rows: {failed}"
