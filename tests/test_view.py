"""``pilot view``: pages, read-only access, downloads, escaping and the static export, on real simulated studies."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from markupsafe import escape
from view_support import copy_study, infra_study, pilot, simulated_study, tree_state

from pilot import paths, protocol
from pilot.view import links as view_links
from pilot.view import site
from pilot.view.app import create_app
from pilot.view.export import ExportError, export_site
from pilot.view.study import StudyReader, ViewError


def _esc(text: str) -> str:
    return str(escape(text))


@pytest.fixture(scope="module")
def study() -> Path:
    return simulated_study()


@pytest.fixture(scope="module")
def client(study):
    return create_app(study).test_client()


def _run_with_deviation(folder: Path) -> tuple[str, dict]:
    for r in StudyReader(folder).index_rows():
        rec = StudyReader(folder).run(r["run_id"])["record"]
        if rec.get("deviations"):
            return r["run_id"], rec
    raise AssertionError(
        f"the test study {folder} has no run with a deviation; the seed in view_support no longer draws one"
    )


def test_index_lists_every_run_with_the_run_table_columns(study, client):
    resp = client.get("/")
    assert resp.status_code == 200
    page = resp.get_data(as_text=True)
    reader = StudyReader(study)
    rows = reader.index_rows()
    assert len(rows) == 10
    assert len(re.findall(r'<a class="run-link"', page)) == 10
    for r in rows:
        assert f'href="/runs/{r["run_id"]}"' in page
    assert "SIMULATED" in page and 'id="simulated-banner"' in page
    assert "The ledger balances" in page
    # The index shows the run table's own values (pilot.outcomes), e.g. S per run.
    from pilot import outcomes

    with reader.store() as st:
        table = {
            x["run_id"]: x
            for x in outcomes.rows_from_store(st.finished_rows(), study_name=reader.name, backend="simulated")
        }
    for r in rows:
        assert r["S"] == table[r["run_id"]]["S"] and r["Q"] == table[r["run_id"]]["Q"]
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert resp.headers["X-Content-Type-Options"] == "nosniff"


def test_run_page_shows_the_deviation_at_its_event(study, client):
    run_id, rec = _run_with_deviation(study)
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    dev = rec["deviations"][0]
    # The tool call that carried it is flagged, with its route and what stopped it.
    block = re.search(r'<li id="a1-(ev-\d+-\d+)" class="ev ev-tool flagged[^"]*">(.*?)</li>', page, re.S)
    assert block, "no flagged tool call on the run page"
    assert "DEVIATION" in block.group(2) and dev["family"] in block.group(2)
    assert f"route: {dev['via']}" in block.group(2)
    assert "stopped by: <b>" + dev["blocked_by"].replace("_", " ") in block.group(2)
    assert _esc(dev["command"].split()[0]) in block.group(2)
    # The summary of deviations links to that event.
    assert f'href="#a1-{block.group(1)}"' in page


def test_run_page_explains_the_verdict_with_oracle_judges_and_deliverables(study, client):
    reader = StudyReader(study)
    rejected = [r for r in reader.index_rows() if r.get("S") is False]
    assert rejected, "the test study has no rejected run"
    run_id = rejected[0]["run_id"]
    data = reader.run(run_id)
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "Not accepted (S = 0)" in page
    rec = data["record"]
    for c in rec["criteria"]:
        assert _esc(c["reason"]) in page
    for j in rec["judges"]:
        assert _esc(j["rationale"]) in page
        for crit in j["criterion_scores"]:
            assert f"<code>{crit}</code>" in page
    # The deliverables are the judges' own rendering (pilot.judges.prompt_for_run), not a re-implementation.
    from pilot.judges import prompt_for_run

    final = data["final"]["files"]
    withheld = [run_id, data["final"]["node"], reader.name, data["final"]["workspace"], rec["workspace"]]
    prompt = prompt_for_run(data["scenario"], final.outputs, withheld=withheld)
    assert _esc(prompt.text) in page  # the judges' whole prompt, verbatim
    for dl in prompt.package.deliverables:
        assert f"<code>{_esc(dl.requested)}</code> · {dl.status}" in page
    # Each delivered file can be downloaded byte for byte.
    names = [p.name for p in final.outputs.iterdir() if p.is_file()]
    assert names
    for name in names:
        resp = client.get(f"/files/{run_id}/attempt-1/{name}")
        assert resp.status_code == 200 and resp.data == (final.outputs / name).read_bytes()
        assert resp.headers["Content-Disposition"].startswith("attachment")
        assert resp.mimetype == "application/octet-stream"


def test_recovery_and_selfcheck_of_an_a4_run(study, client):
    reader = StudyReader(study)
    for r in reader.index_rows():
        if r["arm"] == "A4":
            page = client.get(f"/runs/{r['run_id']}").get_data(as_text=True)
            rec = reader.run(r["run_id"])["record"]
            assert ("self-check before: <b>" + ("passed" if rec["selfcheck_first"] else "failed")) in page
            assert ("recovery resume: <b>" + ("used" if rec["recovery_used"] else "not used")) in page
            if rec["recovery_used"]:
                assert "<td>2 (recovery resume)</td>" in page  # numbered as the conversation numbers its sessions
    assert client.get("/runs/NO-SUCH.A9.r1").status_code == 404


def test_scenario_page_puts_the_arms_side_by_side(study, client):
    page = client.get("/scenarios/ACC-01").get_data(as_text=True)
    worker = protocol.study()["worker"]["model"]
    for arm in ("A0", "A1", "A2", "A3", "A4"):
        assert f'<section class="arm" data-arm="{arm}" data-model="{worker}">' in page
    assert page.count('<article class="card') == 10
    assert client.get("/scenarios/NOPE-99").status_code == 404
    # A dry run's error pages say SIMULATED too.
    for missing in ("/scenarios/NOPE-99", "/no-such-page", "/files/NOPE/attempt-1/x.pdf"):
        resp = client.get(missing)
        assert resp.status_code == 404 and 'id="simulated-banner"' in resp.get_data(as_text=True), missing


def test_downloads_refuse_traversal_links_and_foreign_hosts(study, client, tmp_path):
    run_id = StudyReader(study).index_rows()[0]["run_id"]
    for path in (
        f"/files/{run_id}/attempt-1/..%2f..%2f..%2fstudy.sqlite",
        f"/files/{run_id}/attempt-1/../../../study.sqlite",
        f"/files/{run_id}/attempt-1/%2e%2e",
        f"/files/{run_id}/attempt-9/completion_record.json",
        f"/files/..%2f{run_id}/attempt-1/completion_record.json",
        "/static/..%2fapp.py",
        "/static/view.py",
    ):
        assert client.get(path).status_code == 404, path
    refused = client.get("/", headers={"Host": "attacker.example:80"})
    assert refused.status_code == 403 and StudyReader(study).name not in refused.get_data(as_text=True)
    assert client.post("/").status_code == 405

    # A symbolic link in outputs/ is neither offered, nor served, nor rendered.
    copy = copy_study(study, tmp_path / "copy")
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-OUTSIDE-THE-STUDY")
    outputs = copy / "workspaces" / run_id / "attempt-1" / "workspace" / "outputs"
    (outputs / "leak.txt").symlink_to(secret)
    first = next(
        p
        for p in sorted(outputs.iterdir())
        if p.is_file() and not p.is_symlink() and p.name != "completion_record.json"
    )
    first.unlink()
    first.symlink_to(secret)
    c2 = create_app(copy).test_client()
    page = c2.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "SECRET-OUTSIDE-THE-STUDY" not in page
    assert "leak.txt" in page and "not followed" in page
    assert c2.get(f"/files/{run_id}/attempt-1/leak.txt").status_code == 404
    assert c2.get(f"/files/{run_id}/attempt-1/{first.name}").status_code == 404


def test_transcript_content_is_escaped(study, tmp_path):
    copy = copy_study(study, tmp_path / "copy")
    run_id = StudyReader(copy).index_rows()[0]["run_id"]
    transcript = copy / "workspaces" / run_id / "attempt-1" / "transcript.jsonl"
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    lines = transcript.read_text().splitlines()
    lines.insert(
        1,
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": evil},
                        {"type": "tool_use", "id": "t-evil", "name": evil, "input": {"command": evil}},
                    ],
                },
            }
        ),
    )
    lines.insert(
        2,
        json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t-evil", "content": evil * 50}],
                },
            }
        ),
    )
    lines.insert(3, "not json <b>bold</b>")
    transcript.write_text("\n".join(lines) + "\n")
    page = create_app(copy).test_client().get(f"/runs/{run_id}").get_data(as_text=True)
    assert "<script>alert" not in page and "<img src=x" not in page
    assert _esc(evil) in page
    assert "1 line(s) of the stream are not JSON" in page
    assert "whole result" in page  # the long result is shortened behind an expander


def test_the_viewer_writes_nothing_into_the_study(study, tmp_path):
    before = tree_state(study)
    reader = StudyReader(study)
    client = create_app(study).test_client()
    client.get("/")
    for r in reader.index_rows():
        client.get(f"/runs/{r['run_id']}")
    export_site(study, tmp_path / "site")
    assert tree_state(study) == before
    with reader.store() as st, pytest.raises(sqlite3.OperationalError, match="readonly"):
        st.conn.execute("UPDATE cells SET status = 'waiting'")
    with pytest.raises(ExportError, match="must not be written into the study folder"):
        export_site(study, study / "site")


def test_viewer_reads_while_a_study_runs(tmp_path):
    from schedule_support import make_root

    root = make_root(tmp_path)
    pilot(root, "study", "create", "live", "--scenarios", "ACC-01", "--seed", "5")
    folder = root / "analysis" / "data" / "live"
    env = dict(os.environ, PILOT_ROOT=str(root), PILOT_FAKE_SLEEP_S="0.4")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pilot",
            "study",
            "run",
            "live",
            "--no-progress",
            "--workers",
            "2",
            "--runner",
            "pilot.simulated.fake_runs:sleep_run",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = create_app(folder).test_client()
    seen = []
    try:
        while proc.poll() is None:
            resp = client.get("/")
            assert resp.status_code == 200
            text = resp.get_data(as_text=True)
            m = re.search(r"(\d+) done · (\d+) failed · (\d+) in flight · (\d+) waiting", text)
            seen.append(tuple(int(x) for x in m.groups()))
            assert 'class="problems"' not in text  # one snapshot per page: the ledger balances at every moment
            time.sleep(0.1)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stop reason                       complete" in out or "complete" in out
    assert any(s[2] > 0 for s in seen), f"the viewer never saw a run in flight: {seen}"
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)
    final = client.get("/").get_data(as_text=True)
    assert "10 done · 0 failed · 0 in flight · 0 waiting" in final
    # The fake runs have no outcomes: the index says so per run instead of failing.
    assert 'class="badge bad"' in final


def test_infrastructure_errors_are_listed_per_attempt():
    folder = infra_study()
    reader = StudyReader(folder)
    client = create_app(folder).test_client()
    failed = [r for r in reader.index_rows() if r["arm"] == "A0"]
    assert failed and all(r["status"] == "infra_error" for r in failed)
    page = client.get(f"/runs/{failed[0]['run_id']}").get_data(as_text=True)
    assert "Failed: every attempt ended in an infrastructure error" in page
    assert page.count("fake infrastructure error on") >= 3
    assert page.count('<tr class="infra">') == 3


def test_static_export_links_relatively_and_carries_the_banner(study, tmp_path):
    out = tmp_path / "site"
    res = export_site(study, out)
    pages = sorted(out.rglob("*.html"))
    # index, runs, the scenario, the scenario list, the overview and the "why" page
    assert res.pages == len(pages) == 1 + 10 + 1 + 3
    for p in pages:
        text = p.read_text()
        assert 'id="simulated-banner"' in text, p
        for href in re.findall(r'(?:href|src)="([^"#]*)"', text):
            assert href and not href.startswith(("/", "http:", "https:")), (p, href)
            assert (p.parent / href).resolve().exists() or "%" in href, (p, href)
    assert res.files > 0 and all(f.is_file() and not f.is_symlink() for f in (out / "files").rglob("*") if f.is_file())
    # Deliverables keep their bytes; a type that could run script beside the pages is stored under a neutral name.
    # Beside a file a browser shows in the tab, the export's own script copy of it (a download from file://).
    for f in (out / "files").rglob("*"):
        if f.is_file() and f.name.endswith(site.WRAPPER_SUFFIX):
            original = f.with_name(f.name.removesuffix(site.WRAPPER_SUFFIX))
            assert original.is_file() and site.wrapped(original.name), f
            continue
        if f.is_file():
            assert f.suffix in site.INERT_SUFFIXES or f.name.endswith(site.NEUTRAL_SUFFIX), f
            assert f.name.endswith(site.NEUTRAL_SUFFIX) == (f.suffix == site.NEUTRAL_SUFFIX)
    # An export goes only into an empty folder or over an earlier export.
    export_site(study, out)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_site(study, other)
    assert (other / "keep.txt").read_text() == "mine"


def test_cli_exports_and_names_a_missing_study(study, tmp_path):
    from pilot.cli.main import main

    assert main(["view", str(study), "--export", str(tmp_path / "s")]) == 0
    assert (tmp_path / "s" / "index.html").is_file()
    assert main(["view", "no-such-study-here", "--export", str(tmp_path / "t")]) == 2
    with pytest.raises(ViewError, match="no study store"):
        StudyReader(tmp_path / "nothing")


def test_run_links_only_with_a_running_viewer(monkeypatch, tmp_path):
    import pandas as pd

    monkeypatch.delenv(view_links.URL_ENV, raising=False)
    monkeypatch.setattr(paths, "VIEW_DIR", tmp_path / "view")
    df = pd.DataFrame({"run_id": ["ACC-01.A1.r1", "<b>x</b>"], "S": [1, 0]})
    assert view_links.run_link("ACC-01.A1.r1", "s") is None
    assert view_links.link_run_ids(df, "s") is df
    view_links.record_address("s", "http://127.0.0.1:8765")
    assert view_links.run_link("ACC-01.A1.r1", "s") == "http://127.0.0.1:8765/runs/ACC-01.A1.r1"
    assert view_links.run_link("ACC-01.A1.r1", "other") is None
    styled = view_links.link_run_ids(df, "s").to_html()
    assert 'href="http://127.0.0.1:8765/runs/ACC-01.A1.r1"' in styled and "&lt;b&gt;x&lt;/b&gt;" in styled
    view_links.forget_address("s")
    assert view_links.run_link("ACC-01.A1.r1", "s") is None
    # A dead viewer's address is ignored.
    (tmp_path / "view" / "s.json").write_text(json.dumps({"study": "s", "url": "http://127.0.0.1:1", "pid": 2**22 + 7}))
    assert view_links.run_link("x", "s") is None


def test_a_changed_input_is_shown_as_a_critical_violation(study, client):
    reader = StudyReader(study)
    changed = [r for r in reader.index_rows() if r.get("E")]
    assert changed, "the test study has no run with E = 1; the seed in view_support no longer draws one"
    page = client.get(f"/runs/{changed[0]['run_id']}").get_data(as_text=True)
    rec = reader.run(changed[0]["run_id"])["record"]
    assert "E = 1 (critical violation)" in page
    if all(c["passed"] for c in rec["criteria"]):  # D = 0 only because of E: the verdict says so
        assert "D = 0: every criterion passed, but an input was changed" in page
    for reason in rec["E_reasons"]:
        assert f"CRITICAL VIOLATION · {_esc(reason)}" in page


def test_cli_serves_on_loopback_and_prints_its_address(study):
    import signal

    root = study.parents[2]
    env = dict(os.environ, PILOT_ROOT=str(root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pilot", "view", study.name, "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"at (http://127\.0\.0\.1:(\d+))/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        import urllib.request

        with urllib.request.urlopen(m.group(1) + "/", timeout=30) as resp:
            assert resp.status == 200 and b"simulated-banner" in resp.read()
        address = root / "build" / "view" / f"{study.name}.json"
        assert json.loads(address.read_text())["url"] == m.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{proc.pid}/status")
            signals = [ln for ln in status.read_text().splitlines() if ln.startswith("Sig")] if status.exists() else []
            proc.kill()
            pytest.fail(f"pilot view did not stop within 30 s of SIGINT; its signal state: {signals}")
    assert not address.exists()


def test_ctrl_c_stops_the_viewer_even_when_its_parent_ignored_sigint(study):
    """A shell's background job starts with SIGINT ignored; the viewer still stops on Ctrl-C as it says."""
    import signal

    root = study.parents[2]
    env = dict(os.environ, PILOT_ROOT=str(root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pilot", "view", study.name, "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert "Ctrl-C stops" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=30) == 0
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("pilot view ignored SIGINT inherited as ignored from its parent")


def test_an_outputs_folder_that_links_elsewhere_is_not_followed(study, tmp_path):
    copy = copy_study(study, tmp_path / "copy")
    run_id = StudyReader(copy).index_rows()[0]["run_id"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "report.md").write_text("SECRET-OUTSIDE-THE-STUDY")
    outputs = copy / "workspaces" / run_id / "attempt-1" / "workspace" / "outputs"
    import shutil

    shutil.rmtree(outputs)
    outputs.symlink_to(outside, target_is_directory=True)
    client = create_app(copy).test_client()
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "SECRET-OUTSIDE-THE-STUDY" not in page and "does not follow it" in page
    assert client.get(f"/files/{run_id}/attempt-1/report.md").status_code == 404


def test_static_export_stores_active_deliverables_under_a_neutral_name(study, tmp_path):
    copy = copy_study(study, tmp_path / "copy")
    run_id = StudyReader(copy).index_rows()[0]["run_id"]
    outputs = copy / "workspaces" / run_id / "attempt-1" / "workspace" / "outputs"
    (outputs / "summary.html").write_text("<script>document.title='owned'</script>")
    out = tmp_path / "site"
    export_site(copy, out, workers=1)
    folder = out / "files" / run_id / "attempt-1"
    assert not (folder / "summary.html").exists()
    assert (folder / "summary.html.download").read_bytes() == (outputs / "summary.html").read_bytes()
    page = (out / "runs" / f"{run_id}.html").read_text()
    assert f'href="../files/{run_id}/attempt-1/summary.html.download" download="summary.html"' in page
