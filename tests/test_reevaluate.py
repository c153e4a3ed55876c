"""`pilot study reevaluate`: a run whose evaluation could not run gets its real verdict, in place, once.

The study runs on the simulated backend with LibreOffice made unavailable
(``PILOT_SOFFICE`` naming no program, the mechanism of `pilot check`'s
exit-4 test), so its ACC-01 run (a workbook) ends with ``eval_error`` while
its LEGAL-01 run (no workbook) gets a verdict. A twin study with the same
seed, run with LibreOffice, gives the verdict the first evaluation should
have given. Everything is real: the SQLite store, LibreOffice, the oracle.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from schedule_support import make_root, make_store

from pilot import runtable
from pilot.reevaluate import ReevaluationError, reevaluate_study, select
from pilot.store import STORE_FILE, Store

pytestmark = pytest.mark.usefixtures("soffice")

BROKEN = "PILOT_SOFFICE"
ARGS = ("--scenarios", "ACC-01", "LEGAL-01", "--arms", "A3", "--pilot-repeats", "1")
ACC, LEGAL = "ACC-01.A3.r1", "LEGAL-01.A3.r1"
MEMO = "outputs/reconciliation_memo.docx"


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != BROKEN}
    env.update({"PILOT_ROOT": str(root), **extra})
    return env


def pilot(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pilot", "study", *args],
        env=_env(root, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _no_soffice(root: Path) -> dict[str, str]:
    return {BROKEN: str(root / "no-such-soffice")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One study with an evaluation error and its twin evaluated in full, built once; each test restores a copy in
    place."""
    base = tmp_path_factory.mktemp("reeval")
    root = make_root(base)
    studies = {"broken": _no_soffice(root), "twin": {}}
    for name in studies:
        made = pilot(root, "create", name, *ARGS)
        assert made.returncode == 0, made.stderr
    # The two studies run side by side (they share nothing but the protocol).
    running = {
        name: subprocess.Popen(
            [sys.executable, "-m", "pilot", "study", "run", name, "--no-progress"],
            env=_env(root, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, extra in studies.items()
    }
    for name, proc in running.items():
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        # The run says which runs have no verdict, and what to do.
        hint = (
            "note: 1 finished run(s) of wave pilot have no verdict: their evaluation could not run "
            f"(eval_error, e.g. {ACC}); "
        )
        assert (hint in err and f"`pilot study reevaluate {name}`" in err) == (name == "broken"), err
    snapshot = base / "snapshot"
    shutil.copytree(root / "analysis" / "data", snapshot, symlinks=True)
    return root, snapshot


@pytest.fixture
def study(built):
    """The root, restored to the state right after the runs (records hold absolute paths, so the copy goes back in
    place)."""
    root, snapshot = built
    data = root / "analysis" / "data"
    shutil.rmtree(data)
    shutil.copytree(snapshot, data, symlinks=True)
    return root


def _db(root: Path, name: str = "broken") -> Path:
    return root / "analysis" / "data" / name / STORE_FILE


def _record(root: Path, run_id: str, name: str = "broken") -> dict:
    with sqlite3.connect(_db(root, name)) as conn:
        return json.loads(conn.execute("SELECT record_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])


def _state(root: Path) -> dict[str, list]:
    """Every table the re-evaluation may touch, as it stands."""
    with sqlite3.connect(_db(root)) as conn:
        return {
            t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
            for t in (
                "runs",
                "evaluations",
                "judge_scores",
                "reevaluations",
                "events",
                "attempts",
                "ledger",
                "ledger_balance",
                "cells",
            )
        }


def _verdict(rec: dict) -> tuple:
    return rec["D"], rec["E"], rec["criteria_passed"], [(c["id"], c["passed"]) for c in rec["criteria"]]


def _exported(root: Path):
    res = pilot(root, "export", "broken")
    assert res.returncode == 0, res.stderr
    path = root / "analysis" / "data" / "broken" / "runs.csv"
    return pd.read_csv(path, keep_default_na=True), runtable.read_runtable(path)


def _no_verdict(study: Path) -> dict[str, int]:
    from pilot.report.sentences import status_sentence
    from pilot.study import status_table

    with Store.open(study / "analysis" / "data" / "broken") as st:
        table = status_table(st)
    sentence = status_sentence(table, 800.0)
    total = int(table.loc[table["arm"] == "all", "no_verdict"].iloc[0])
    assert ("1 of them without a verdict: their evaluation could not run" in sentence) is (total == 1), sentence
    return dict(zip(table["arm"], table["no_verdict"].astype(int), strict=True))


def test_an_evaluation_error_gets_the_real_verdict_once_and_the_analyses_count_it(study):
    before = _record(study, ACC)
    assert "LibreOffice could not recalculate" in before["eval_error"] and _record(study, LEGAL)["eval_error"] is None
    raw, table = _exported(study)
    assert table.attrs[runtable.EVAL_ERROR_DROPPED_ATTR] == 1 and list(table["run_id"]) == [LEGAL]
    assert raw["reevaluated_at"].isna().all()
    # `pilot study status` counts the finished run that has no verdict, and the status sentence says so.
    assert _no_verdict(study) == {"A3": 1, "all": 1}

    # --dry-run lists the run, says what it would do, and changes nothing.
    state = _state(study)
    dry = pilot(study, "reevaluate", "broken", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"SIMULATED (dry run): run {ACC} (ACC-01, A3): would be re-evaluated (--dry-run: nothing changed; "
        f"its evaluation could not run: {before['eval_error']})"
    ]
    assert _state(study) == state

    done = pilot(study, "reevaluate", "broken")
    assert done.returncode == 0, done.stderr
    twin = _record(study, ACC, "twin")
    after = _record(study, ACC)
    assert done.stdout.splitlines() == [
        f"SIMULATED (dry run): run {ACC} (ACC-01, A3): re-evaluated #1: D={int(twin['D'])} E={int(twin['E'])} "
        f"(was: {before['eval_error']})"
    ]
    # The verdict is the one an evaluation with LibreOffice gave the same run in the twin study.
    assert after["eval_error"] is None and _verdict(after) == _verdict(twin) and twin["eval_error"] is None
    assert after["reevaluation"]["count"] == 1 and after["reevaluation"]["previous_eval_error"] == before["eval_error"]
    assert not any(n.startswith("evaluation could not run in full") for n in after["notes"])
    # The judges ran when the run finished: their grades and costs are kept, and the ledger spent nothing more.
    assert (
        after["judges"] == before["judges"]
        and after["judges"]
        and all(j["score_0_100"] is not None for j in after["judges"])
    )
    new_state = _state(study)
    for table_name in ("judge_scores", "attempts", "ledger", "ledger_balance", "cells"):
        assert new_state[table_name] == state[table_name], table_name
    # The earlier record is kept as history; the evaluation row is the new one, alone.
    with Store.open(study / "analysis" / "data" / "broken") as st:
        history = st.reevaluations()
        assert [(h["run_id"], h["outcome"]) for h in history] == [(ACC, "verdict")]
        assert json.loads(history[0]["previous_record_json"]) == before
        assert st.audit() == []
        evals = st.conn.execute("SELECT run_id, D FROM evaluations ORDER BY run_id").fetchall()
        assert [tuple(e) for e in evals] == [(ACC, int(twin["D"])), (LEGAL, 1)]
    assert (Path(after["workspace"]).parent / "reevaluation-1.json").is_file()
    assert (Path(after["workspace"]).parent / "evaluation.json").is_file()  # the first evaluation's file is kept

    # Export writes the new verdict, says it comes from a re-evaluation, and the analyses count the run once.
    raw, table = _exported(study)
    assert table.attrs[runtable.EVAL_ERROR_DROPPED_ATTR] == 0
    assert sorted(table["run_id"]) == [ACC, LEGAL] and table["run_id"].is_unique
    acc = raw.set_index("run_id").loc[ACC]
    assert bool(acc["D"]) == twin["D"] and acc["reevaluated_at"] == after["reevaluation"]["at"]
    assert raw.set_index("run_id")["reevaluated_at"].isna()[LEGAL]

    assert _no_verdict(study) == {"A3": 0, "all": 0}

    # Run again: a run with its verdict is no longer selected; nothing changes.
    state = _state(study)
    again = pilot(study, "reevaluate", "broken")
    assert again.returncode == 0 and "nothing to re-evaluate" in again.stdout and again.stdout.startswith("SIMULATED")
    assert _state(study) == state


def test_named_runs_must_have_an_evaluation_error(study, tmp_path):
    state = _state(study)
    res = pilot(study, "reevaluate", "broken", "--run", LEGAL)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"run {LEGAL}: its evaluation ran (D=1, E=0); a verdict that stands is never re-evaluated" in res.stderr
    res = pilot(study, "reevaluate", "broken", "--run", ACC, "NOPE.A0.r1", "--dry-run")
    assert res.returncode == 2 and "run NOPE.A0.r1: no such run in study broken" in res.stderr
    assert _state(study) == state
    # The oracle must be the one that judged the study's other runs: a changed frozen protocol refuses everything.
    with sqlite3.connect(_db(study)) as conn:
        manifest = json.loads(conn.execute("SELECT freeze_manifest_json FROM studies").fetchone()[0])
        oracle = next(k for k in sorted(manifest) if k.endswith("ACC-01/oracle.yml"))
        conn.execute("UPDATE studies SET freeze_manifest_json = ?", (json.dumps(dict(manifest, **{oracle: "0" * 64})),))
    res = pilot(study, "reevaluate", "broken")
    assert (
        res.returncode == 2
        and "the frozen protocol changed since the pilot started" in res.stderr
        and oracle in res.stderr
    )
    assert _record(study, ACC)["eval_error"]
    # Runs not finished, or failed on infrastructure, are for `pilot study run` and `pilot study retry`.
    with make_store(tmp_path, scenarios=["ACC-01"]) as st:
        waiting, failed = [c.run_id for c in st.cells()][:2]
        st.conn.execute("UPDATE cells SET status = 'failed' WHERE run_id = ?", (failed,))
        with pytest.raises(
            ReevaluationError,
            match=rf"run {waiting}: it is waiting, not finished.*run {failed}: it failed on infrastructure.*retry",
        ):
            select(st, [waiting, failed])
        assert select(st) == []


def test_a_changed_or_missing_workspace_is_refused(study):
    workspace = Path(_record(study, ACC)["workspace"])
    memo = workspace / MEMO
    original = memo.read_bytes()
    state = _state(study)
    memo.write_bytes(original + b"\0")
    (workspace / "outputs" / "late.txt").write_text("written after the run\n")
    res = pilot(study, "reevaluate", "broken")
    assert res.returncode == 1, res.stderr
    assert res.stdout.startswith(
        f"SIMULATED (dry run): run {ACC} (ACC-01, A3): refused: its workspace {workspace} changed since the run"
    )
    assert f"entry added: outputs/late.txt, entry modified: {MEMO}" in res.stdout
    assert _state(study) == state
    # Named, the same refusal; a missing workspace is refused too.
    memo.write_bytes(original)
    (workspace / "outputs" / "late.txt").unlink()
    moved = workspace.with_name("moved")
    workspace.rename(moved)
    res = pilot(study, "reevaluate", "broken", "--run", ACC)
    assert res.returncode == 1 and f"refused: its workspace {workspace} is missing" in res.stdout
    assert _state(study) == state
    # A record written before workspace digests were kept cannot vouch for its workspace: refused.
    moved.rename(workspace)
    older = {
        k: v
        for k, v in _record(study, ACC).items()
        if k not in ("workspace_sha256", "workspace_entries", "input_hashes")
    }
    with sqlite3.connect(_db(study)) as conn:
        kept = conn.execute("SELECT record_json FROM runs WHERE run_id = ?", (ACC,)).fetchone()[0]
        conn.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (json.dumps(older), ACC))
    res = pilot(study, "reevaluate", "broken", "--dry-run")
    assert res.returncode == 1 and "refused: its record holds no digest of the workspace the run left" in res.stdout
    with sqlite3.connect(_db(study)) as conn:
        conn.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (kept, ACC))
    # The workspace as the run left it is accepted again.
    res = pilot(study, "reevaluate", "broken", "--run", ACC)
    assert res.returncode == 0 and "re-evaluated #1" in res.stdout, res.stdout + res.stderr


def test_a_kill_inside_the_store_transaction_leaves_the_old_state_and_a_rerun_gives_one_verdict(study, monkeypatch):
    state = _state(study)
    folder = study / "analysis" / "data" / "broken"
    # A real kill: the process dies by SIGKILL inside the transaction, after the run's record was replaced.
    killer = (
        "import os, signal, sys\n"
        "import pilot.store as s\n"
        "def die(self, c, kind, *a, **k):\n"
        "    assert c.in_transaction\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "s.Store.record_event = die\n"
        "from pilot.cli.main import main\n"
        "sys.exit(main(['study', 'reevaluate', 'broken']))\n"
    )
    res = subprocess.run([sys.executable, "-c", killer], env=_env(study), capture_output=True, text=True, timeout=300)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert _state(study) == state and _record(study, ACC)["eval_error"]
    # An exception inside the transaction (in this process) rolls back just the same.
    from pilot import store as store_mod

    def boom(self, c, kind, *a, **k):
        raise RuntimeError("stopped inside the transaction")

    monkeypatch.setattr(store_mod.Store, "record_event", boom)
    with pytest.raises(RuntimeError, match="stopped inside"):
        reevaluate_study(folder)
    monkeypatch.undo()
    assert _state(study) == state
    # Run again: exactly one verdict and one history row, numbered as the first.
    backend, results = reevaluate_study(folder)
    assert backend == "simulated" and [(r.run_id, r.outcome, r.reevaluation) for r in results] == [(ACC, "verdict", 1)]
    assert reevaluate_study(folder)[1] == []
    with Store.open(folder) as st:
        assert [h["run_id"] for h in st.reevaluations()] == [ACC] and len(st.events("reevaluate")) == 1
        assert st.conn.execute("SELECT COUNT(*) FROM evaluations WHERE run_id = ?", (ACC,)).fetchone()[0] == 1
    assert _verdict(_record(study, ACC)) == _verdict(_record(study, ACC, "twin"))
    raw, table = _exported(study)
    assert len(raw) == 2 and table.attrs[runtable.EVAL_ERROR_DROPPED_ATTR] == 0


def test_an_evaluation_that_fails_again_keeps_the_run_out_with_the_new_reason(study):
    broken = study / "elsewhere" / "soffice"
    res = pilot(study, "reevaluate", "broken", "--json", **{BROKEN: str(broken)})
    assert res.returncode == 1, res.stderr
    out = json.loads(res.stdout)
    assert out["label"] == "SIMULATED" and [(r["run_id"], r["outcome"]) for r in out["runs"]] == [(ACC, "eval_error")]
    rec = _record(study, ACC)
    assert str(broken) in rec["eval_error"] and rec["reevaluation"]["count"] == 1
    raw, table = _exported(study)
    assert table.attrs[runtable.EVAL_ERROR_DROPPED_ATTR] == 1 and list(table["run_id"]) == [LEGAL]
    assert raw.set_index("run_id").loc[ACC, "reevaluated_at"] == rec["reevaluation"]["at"]
    # Still selected; with LibreOffice back it gets its verdict, the second re-evaluation of the run.
    res = pilot(study, "reevaluate", "broken", "--json")
    assert res.returncode == 0 and [(r["outcome"], r["reevaluation"]) for r in json.loads(res.stdout)["runs"]] == [
        ("verdict", 2)
    ]
    with Store.open(study / "analysis" / "data" / "broken") as st:
        assert [h["outcome"] for h in st.reevaluations(ACC)] == ["eval_error", "verdict"]
    assert _verdict(_record(study, ACC)) == _verdict(_record(study, ACC, "twin"))


def test_the_evaluators_own_failure_is_an_evaluation_error_of_the_run_not_an_exception(monkeypatch, tmp_path):
    """The runner and the re-evaluation share one evaluation step; nothing raised in it reaches the runner."""
    import pilot.oracle_formats.evaluate
    from pilot import runner
    from pilot.scenarios import load_scenario

    def crash(*args, **kwargs):
        raise MemoryError("the evaluator ran out of memory")

    # The evaluation step calls the dispatcher (the core oracle, with the deck reader for a deck scenario).
    monkeypatch.setattr(pilot.oracle_formats.evaluate, "evaluate", crash)
    ev = runner.evaluate_finished(load_scenario("ACC-01"), tmp_path, {})
    assert ev.outcome == "evaluation_error" and ev.errors == [
        "the evaluation failed (MemoryError: the evaluator ran out of memory)"
    ]
    fields = runner.evaluation_fields(ev)
    assert fields["D"] is False and fields["eval_error"] == ev.errors[0]
    assert runner.evaluation_notes(ev) == [f"evaluation could not run in full: {ev.errors[0]}"]


def test_a_study_folder_reached_through_a_link_is_trusted_and_a_foreign_workspace_is_not(tmp_path):
    """The store names the attempt's folder as the scheduler did (here through a link); the record, resolved."""
    from pilot import runner
    from pilot.reevaluate import untrusted

    real = tmp_path / "real" / "run" / "attempt-1"
    (real / "workspace" / "outputs").mkdir(parents=True)
    (real / "workspace" / "outputs" / "memo.md").write_text("done\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    digest, _n = runner.record_workspace(real / "workspace", real)
    rec = {"workspace": str(real.resolve() / "workspace"), "workspace_sha256": digest, "input_hashes": {}}
    assert untrusted(rec, tmp_path / "link" / "run" / "attempt-1", Path(rec["workspace"])) is None
    elsewhere = tmp_path / "other" / "workspace"
    shutil.copytree(real / "workspace", elsewhere)
    why = untrusted(dict(rec, workspace=str(elsewhere)), real, elsewhere)
    assert why == f"its record names the workspace {elsewhere}, which is not in its attempt's folder {real}"
