"""One attempt of one run: lay out, launch under the arm's access, collect, classify, evaluate.

``run_attempt`` is the whole of it:

1. reset ``out_dir`` and lay out the workspace (``pilot.workspace``); start
   the portal for arms that have it on scenarios that use it;
2. launch the agent (backend ``claude-code``, ``rehearsal`` or ``simulated``) with the
   user prompt of ``study.yml``, the scenario's caps and the CLI's turn cap;
3. collect the event stream (``transcript.jsonl``), cost, turns, tool calls
   by tool, deviations, questions from the completion record, wall time;
4. classify (``pilot.agents.session``);
5. A4: self-check, and one resume with the remaining budget and wall time
   when the self-check fails or the session ended by a cap or an error;
6. evaluate with the oracle and the input-hash check.

Everything lands in ``out_dir``: ``workspace/``, ``transcript.jsonl`` (the
harness's own copy of the stream, ``pilot.workspace.transcript_path``),
``record/`` (launches, stderr, refused connections, the model proxy's
meter), ``agent/`` (settings, stubs, the CLI's config folder, scratch home
and TMPDIR), ``evaluation.json`` and ``run_record.json``. Only
``workspace/`` and the agent's scratch folders are mounted in the sandbox.

With the claude-code backend the attempt refuses to start when the host
cannot isolate it (:class:`IsolationRefused`), unless ``isolation`` is
``unisolated`` (development only; recorded as the run's ``enforcement``).
The model is reached through a metering proxy that holds the real API key
(``pilot.agents.model_proxy``); its metered cost is stored beside the CLI's
reported cost. The ``rehearsal`` backend is the ``claude-code`` backend
whose upstream is the project's scripted model server
(:mod:`pilot.simulated.scripted_model`, started by :func:`pilot.pipeline.run_cell`):
the proxy then labels each request with its run (``x-pilot-run-id``) so the
server knows which run it plays.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pilot import backends, confined, paths, protocol, worker_files
from pilot.agents import audit, witness
from pilot.agents.session import (
    AGENT_ERROR,
    CAPPED,
    INFRA_ERROR,
    RESUME_PROMPT,
    Classification,
    SessionOutcome,
    classify,
    combined_cost,
)
from pilot.attempt import HARNESS_FAULT_PREFIX, inference_began, mark_phase, read_phase
from pilot.protocol import Caps
from pilot.protocol.request_policy import RequestPolicy
from pilot.run_record import EVAL_ERROR_NOTE, RunRecord

BACKENDS = backends.AGENT_BACKENDS
RUN_MARKER = ".pilot-run"
TRANSCRIPT = "transcript.jsonl"
#: The oracle's verdict on the attempt, in its folder.
EVALUATION_FILE = "evaluation.json"
#: The workspace's manifest when the agent was done (every entry's hash), in the attempt's folder.
WORKSPACE_MANIFEST = "workspace_manifest.json"
#: The Messages API the model proxy forwards to when the operator names none.
DEFAULT_API_URL = "https://api.anthropic.com"
#: Environment variable holding the default isolation (``required``, or ``unisolated`` for development); the
#: confined helpers (LibreOffice on worker material) read the same one.
ISOLATION_ENV = confined.ISOLATION_ENV

#: A resume needs at least this much budget and wall time left to be worth starting.
MIN_RESUME_USD = 0.01
MIN_RESUME_WALL_S = 10.0


class RunnerError(ValueError):
    """The attempt cannot be set up (bad scenario, arm, backend or folder)."""


class IsolationRefused(RunnerError):
    """The host cannot isolate a real attempt; the message names what is missing and how to install it."""


def default_isolation() -> str:
    """``required`` unless the operator opted out for development (``PILOT_ISOLATION=unisolated``)."""
    return os.environ.get(ISOLATION_ENV) or "required"


def sweep_leftovers(out_dir: Path) -> list[int]:
    """Kill processes left by earlier attempts of this run (a killed scheduler's orphans) before it reruns.

    In the scheduler's layout (``<run id>/attempt-N``) every attempt of the
    run id is swept, not only this folder's.
    """
    from pilot.agents.claude_code import sweep_run_processes

    out_dir = Path(out_dir).resolve()
    scope = out_dir.parent if out_dir.name.startswith("attempt-") else out_dir
    return sweep_run_processes(scope)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _reset_run_dir(out_dir: Path) -> None:
    import shutil

    out_dir = out_dir.resolve()
    if out_dir.exists():
        if not out_dir.is_dir():
            raise RunnerError(f"{out_dir}: --out must be a folder")
        entries = list(out_dir.iterdir())
        if entries and not (out_dir / RUN_MARKER).exists():
            raise RunnerError(f"{out_dir}: not empty and not a run folder (no {RUN_MARKER}); refusing to reset it")
        for e in entries:
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e)
            else:
                e.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RUN_MARKER).write_text(
        "one attempt of one run; this folder is reset by the next attempt\n", encoding="utf-8"
    )


def load_completion_record(workspace: Path) -> tuple[dict | None, bool, str | None]:
    """The completion record of ``workspace``, whether it is valid against the schema, and why it was not read.

    Read beneath the workspace by the bounded reader (:mod:`pilot.worker_files`): a link (to a host file, to
    ``/proc/self/mem``), a pipe, a device or a file over the deliverable limit is refused unread, and the third
    value names the file and the reason (None when it was read, or when there is no record at all).
    """
    import jsonschema

    from pilot.oracles.safety import MAX_FILE_BYTES

    try:
        with worker_files.Folder(workspace) as folder:
            raw = folder.read_bytes("outputs/completion_record.json", max_bytes=MAX_FILE_BYTES)
    except worker_files.Refused as exc:
        if exc.kind in (worker_files.MISSING, worker_files.NOT_A_FOLDER):
            return None, False, None
        return None, False, f"outputs/completion_record.json {exc.reason}"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None, False, None
    try:
        schema = json.loads(paths.COMPLETION_SCHEMA_FILE.read_text(encoding="utf-8"))
        jsonschema.validate(data, schema)
        return data, True, None
    except jsonschema.ValidationError:
        return (data if isinstance(data, dict) else None), False, None


def read_completion_record(path: Path) -> tuple[dict | None, bool]:
    """The completion record at ``path`` (``<workspace>/outputs/completion_record.json``) and whether it is valid
    against the schema; read through :func:`load_completion_record`, so nothing it links to is ever read."""
    data, valid, _refused = load_completion_record(Path(path).parent.parent)
    return data, valid


def count_questions(record: dict | None) -> int | None:
    """Questions in the completion record; None (missing, never zero) without a readable list."""
    if not isinstance(record, dict) or not isinstance(record.get("questions"), list):
        return None
    return sum(1 for q in record["questions"] if isinstance(q, str) and q.strip())


def _selfcheck(workspace: Path, scenario: Any) -> tuple[bool, list[str]]:
    from pilot.oracle_formats.selfcheck import run_selfcheck

    # The pristine tool with the scenario's own specification: the worker's copy cannot sway it.
    rep = run_selfcheck(workspace, scenario)
    return bool(rep.passed), [str(x) for x in getattr(rep, "lines", [])]


def _start_portal(scenario_id: str, run_dir: Path, starter: Callable[..., Any] | None) -> Any:
    if starter is None:
        from pilot.portal import start_instance as starter  # the portal part's entry point
    return starter(scenario_id, run_dir / "portal")


# --------------------------------------------------------------------------
# The attempt
# --------------------------------------------------------------------------


def run_attempt(
    scenario_id: str,
    arm_id: str,
    *,
    backend: str,
    out_dir: Path,
    seed: int,
    model: str | None = None,
    claude_bin: Path | None = None,
    caps: Caps | None = None,
    max_turns: int | None = None,
    worker_env: Path | None = None,
    extra_env: dict[str, str] | None = None,
    environ: dict[str, str] | None = None,
    isolation: str | None = None,
    portal_starter: Callable[..., Any] | None = None,
    evaluate: bool = True,
    label_upstream: bool = False,
    limits: Any = None,
    record_from_proxy: bool = True,
) -> RunRecord:
    """Perform one attempt and write its record to ``out_dir/run_record.json``.

    ``caps`` and ``max_turns`` default to the protocol's (``study.caps_for``
    and ``cli.max_turns``); ``worker_env`` to ``build/worker-env``;
    ``extra_env`` adds variables to the agent process (e.g. a test double's
    script); ``portal_starter(scenario_id, dir)`` replaces
    ``pilot.portal.start_instance``. ``environ`` gives the operator's
    ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` to the model proxy
    (default: this process's environment); they never reach the agent.
    ``isolation`` is ``required`` (default, :func:`default_isolation`) or
    ``unisolated`` (development only). ``label_upstream`` has the model
    proxy name the run to its upstream (``x-pilot-run-id``), for a scripted
    model server (:mod:`pilot.simulated.scripted_model`); never for the real API.
    ``limits`` (:class:`pilot.agents.bounds.Limits`) replaces study.yml's
    ``sandbox.limits`` for this attempt (the bound tests use small ones).
    ``record_from_proxy`` False reads the run from the CLI's stream alone:
    only for a stand-in CLI that is its own model (``tests/fake_claude``),
    whose turns never pass the proxy; the record then says so.
    """
    from pilot.scenarios import load_scenario

    t_start = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    if backend not in BACKENDS:
        raise RunnerError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    study = protocol.study()
    arms = protocol.arms()
    if arm_id not in arms:
        raise RunnerError(f"arm {arm_id!r}: not in {paths.ARMS_FILE.name} (known: {', '.join(arms)})")
    arm = arms[arm_id]
    scenario = load_scenario(scenario_id)
    caps = caps or study.caps_for(scenario_id)
    max_turns = int(max_turns if max_turns is not None else study["cli"]["max_turns"])
    model = model or study["worker"]["model"]
    out_dir = Path(out_dir).resolve()
    isolation = isolation or default_isolation()
    if backend == backends.REHEARSAL and not (environ or {}).get("ANTHROPIC_BASE_URL"):
        # A rehearsal must never reach the real API: its upstream is named, never defaulted.
        raise RunnerError(
            "backend 'rehearsal' needs the scripted model server's address in environ (ANTHROPIC_BASE_URL); "
            "run it through pilot.pipeline.run_cell, which starts the server"
        )
    if backend in backends.CLI_BACKENDS:
        from pilot.agents import launch, sandbox

        if isolation not in (launch.ISOLATION_REQUIRED, launch.ISOLATION_OPT_OUT):
            raise RunnerError(f"isolation {isolation!r}: expected 'required' or 'unisolated'")
        if isolation == launch.ISOLATION_REQUIRED:
            try:
                sandbox.require_isolation()
            except sandbox.IsolationUnavailable as exc:
                raise IsolationRefused(str(exc)) from exc
        sweep_leftovers(out_dir)
    _reset_run_dir(out_dir)
    # From the first model request on the attempt is the run's own: the phase mark says where it is (pilot.attempt).
    mark_phase(out_dir, "setup")
    bytes_start = worker_files.bytes_read()
    from pilot.portal.redaction import redact_abandoned_attempts
    from pilot.workspace import harness_record_dir, transcript_path

    redact_abandoned_attempts(out_dir)  # an earlier attempt killed before it could redact its own folder
    transcript = transcript_path(out_dir)
    transcript.touch()
    harness_record_dir(out_dir).mkdir(exist_ok=True)
    ws_root = out_dir / "workspace"
    notes: list[str] = []

    base = dict(
        scenario=scenario_id,
        arm=arm_id,
        model=model,
        backend=backend,
        seed=int(seed),
        caps_usd=caps.usd,
        caps_wall_s=caps.wall_s,
        max_turns=max_turns,
        workspace=str(ws_root),
        transcript=str(transcript),
        started_at=started_at,
    )

    def infra(reason: str, **extra: Any) -> RunRecord:
        rec = _empty_record(base, reason, notes, **extra)
        rec.harness_s = time.monotonic() - t_start
        _write(out_dir, rec)
        return rec

    # The portal first: a failure to start it is an infrastructure error before any inference.
    portal = None
    portal_info = None
    # Every backend gets it: the simulated agent signs in and downloads over HTTP, so its use is logged too.
    if arm.feature("portal") and getattr(scenario, "uses_portal", False):
        try:
            portal = _start_portal(scenario_id, out_dir, portal_starter)
            portal_info = portal.describe() if hasattr(portal, "describe") else {"url": getattr(portal, "url", None)}
        except Exception as exc:  # noqa: BLE001 - any start failure is infrastructure, by the design's definition
            return infra(f"portal_start: {exc}".splitlines()[0])
    stack = ExitStack()
    ws = meter = agent = worker_info = None
    sessions: list[SessionOutcome] = []
    selfcheck_first = selfcheck_final = None
    recovery_used = False
    try:
        from pilot.workspace import lay_out

        ws = lay_out(scenario, arm, ws_root, portal=portal)
        endpoint = None
        if backend in backends.CLI_BACKENDS:
            # A rehearsal's scripted server plays each run by its label; the real API is never told it.
            meter, endpoint = _open_meter(
                stack,
                out_dir,
                caps,
                model,
                environ,
                label_upstream=label_upstream or backend == backends.REHEARSAL,
                policy=arm.request_policy,
            )
        agent, worker_info, launch_error = backends.role(backend, "agent")(
            arm=arm,
            study=study,
            scenario=scenario,
            out_dir=out_dir,
            ws_root=ws_root,
            seed=seed,
            model=model,
            claude_bin=claude_bin,
            worker_env=worker_env,
            extra_env=extra_env,
            isolation=isolation,
            endpoint=endpoint,
            portal_url=getattr(portal, "url", None) if portal is not None else None,
            redact=tuple(portal.secrets()) if portal is not None and hasattr(portal, "secrets") else (),
            limits=limits,
        )
        if launch_error:
            return infra(
                launch_error,
                worker_env=worker_info,
                portal=portal_info,
                enforcement=isolation if isolation == "unisolated" else "",
            )
        if hasattr(agent, "close"):
            stack.callback(agent.close)

        # The proxy's next sequence number before each session: which of its exchanges belong to which session.
        session_bounds = [int(getattr(meter, "_seq", 0)) + 1]
        # The prompt the harness gives each session: the only user text the witness lets the model be sent.
        prompts = [str(study["worker"]["user_prompt"])]
        # Inference begins with the first request the proxy meters (a stand-in agent without one is its own model).
        proxied = meter is not None and record_from_proxy
        mark_phase(out_dir, "agent", requests_record=getattr(meter, "record_path", None) if proxied else None)
        first = agent.run_session(0, budget_usd=caps.usd, wall_s=caps.wall_s, max_turns=max_turns)
        sessions.append(first)
        cls1 = _metered_cap(classify(first), meter)
        mark_phase(
            out_dir, "selfcheck" if arm.feature("self_check") else "collect", inference=cls1.status != INFRA_ERROR
        )
        final_cls = cls1
        selfcheck_first = selfcheck_final = None
        recovery_used = False
        recovery_skipped = None
        if cls1.status == INFRA_ERROR:
            rec = _empty_record(
                base,
                cls1.infra_error or "infrastructure error",
                notes,
                worker_env=worker_info,
                portal=portal_info,
                sessions=[s.to_dict() for s in sessions],
                cli_version=first.cli_version,
                enforcement=getattr(agent, "enforcement", ""),
            )
            _close_meter(meter)
            _record_meter(rec, meter, None)
            rec.harness_s = time.monotonic() - t_start
            _write(out_dir, rec)
            return rec
        if arm.feature("self_check"):
            passed, lines = _selfcheck(ws_root, scenario)
            (out_dir / "selfcheck_first.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
            selfcheck_first = selfcheck_final = passed
            wants = (not passed) or cls1.status in (CAPPED, AGENT_ERROR)
            if wants and arm.recovery_resumes > 0:
                spent = combined_cost(sessions).total_usd
                if meter is not None and spent is not None:
                    # The cap holds on what the proxy metered, when that is the larger figure.
                    spent = max(spent, float(meter.metered_usd))
                budget_left = caps.usd - spent if spent is not None else 0.0
                wall_left = caps.wall_s - first.wall_s
                # The harness's own id (the real CLI), never one the stream reported; a stand-in reports its own.
                resume_id = first.assigned_session_id or first.session_id
                if resume_id is None:
                    recovery_skipped = "the first session reported no session id"
                elif spent is None:
                    # Without the first session's cost the remaining budget is unknown; a resume could overrun the cap.
                    recovery_skipped = (
                        "the first session's cost is unknown (no result), so no remaining budget can be given"
                    )
                elif meter is not None and meter.capped:
                    recovery_skipped = "the model proxy ended the run at its cost cap"
                elif budget_left < MIN_RESUME_USD:
                    recovery_skipped = f"no budget left ({budget_left:.4f} USD)"
                elif wall_left < MIN_RESUME_WALL_S:
                    recovery_skipped = f"no wall time left ({wall_left:.1f} s)"
                elif refusal := _resume_refusal(agent):
                    # The store the resume would read is not what the first session left: never resumed.
                    recovery_skipped = refusal
                else:
                    session_bounds.append(int(getattr(meter, "_seq", 0)) + 1)
                    prompts.append(RESUME_PROMPT)
                    mark_phase(out_dir, "recovery")
                    second = agent.run_session(
                        1,
                        budget_usd=budget_left,
                        wall_s=wall_left,
                        max_turns=max_turns,
                        resume_session_id=resume_id,
                        prompt=RESUME_PROMPT,
                    )
                    sessions.append(second)
                    cls2 = _metered_cap(classify(second), meter)
                    if cls2.status == INFRA_ERROR:
                        # The resume never ran: the run stands as the first session left it.
                        recovery_skipped = f"resume failed to run: {cls2.infra_error}"
                    else:
                        recovery_used = True
                        final_cls = cls2
                    mark_phase(out_dir, "selfcheck")
                    passed2, lines2 = _selfcheck(ws_root, scenario)
                    (out_dir / "selfcheck_final.txt").write_text("\n".join(lines2) + "\n", encoding="utf-8")
                    selfcheck_final = passed2
        # The agent is done: the proxy's books close (what is in flight is waited for, what stays open is booked at
        # its worst case) before the run's cost and record are read from them.
        _close_meter(meter)
        # The portal's health is taken when the agent is done, before evaluation can take its time.
        mark_phase(out_dir, "collect")
        portal_end = portal.end_of_run() if portal is not None else None
        rec = _finish(
            base,
            out_dir,
            scenario,
            arm,
            ws,
            sessions,
            final_cls,
            agent,
            notes,
            t_start,
            selfcheck_first=selfcheck_first,
            selfcheck_final=selfcheck_final,
            recovery_used=recovery_used,
            recovery_skipped=recovery_skipped,
            worker_info=worker_info,
            portal_info=portal_info,
            evaluate=evaluate,
            meter=meter,
            session_bounds=session_bounds,
            record_from_proxy=record_from_proxy,
            prompts=prompts,
            bytes_start=bytes_start,
        )
        if portal_end is not None:
            rec = _record_portal_end(rec, portal_end, portal, out_dir)
        return rec
    except Exception as exc:
        # Before the first model request nothing of the worker's exists: the failure is the harness's own parts',
        # an infrastructure error (rerun). After it, whatever failed, the run stands as delivered.
        if not inference_began(out_dir):
            raise
        return _harness_fault(
            base,
            out_dir,
            scenario,
            exc,
            ws=ws,
            sessions=sessions,
            meter=meter,
            agent=agent,
            notes=notes,
            worker_info=worker_info,
            portal_info=portal_info,
            evaluate=evaluate,
            t_start=t_start,
            bytes_start=bytes_start,
            selfcheck=(selfcheck_first, selfcheck_final, recovery_used),
        )
    finally:
        stack.close()
        if portal is not None:
            portal.stop()
            # The worker may have echoed the password; nothing the harness keeps (but the workspace) holds it.
            from pilot.portal.redaction import redact_tree

            redact_tree(out_dir, portal.secrets(), skip=(ws_root.name,))


def _resume_refusal(agent: Any) -> str | None:
    """The agent backend's reason not to resume its session (the real CLI checks its session store), or None."""
    check = getattr(agent, "resume_refusal", None)
    return check() if callable(check) else None


def _open_meter(
    stack: ExitStack,
    out_dir: Path,
    caps: Caps,
    model: str,
    environ: dict[str, str] | None,
    *,
    label_upstream: bool = False,
    policy: RequestPolicy | None = None,
):
    """Start the model proxy for this attempt (it alone holds the key) and open the run's meter, held to ``policy``
    (the arm's :class:`~pilot.protocol.request_policy.RequestPolicy`)."""
    from pilot.agents import launch
    from pilot.agents.model_proxy import MeteringProxy
    from pilot.protocol.prices import PriceTable
    from pilot.workspace import harness_record_dir

    env = dict(os.environ if environ is None else environ)
    upstream = env.get("ANTHROPIC_BASE_URL") or DEFAULT_API_URL
    prices = PriceTable.load(paths.PROTOCOL_DIR / "prices.yml")
    proxy = stack.enter_context(
        MeteringProxy(
            upstream,
            env.get("ANTHROPIC_API_KEY", ""),
            prices,
            harness_record_dir(out_dir) / "proxy",
            label_upstream=label_upstream,
        )
    )
    run_id = str(out_dir)
    meter = proxy.open_run(run_id, Decimal(str(caps.usd)), model, policy=policy)
    stack.callback(proxy.close_run, run_id)
    sock = getattr(meter, "socket_path", None)
    return meter, launch.ModelEndpoint(str(meter.token), Path(sock) if sock else None, getattr(meter, "base_url", None))


def _close_meter(meter: Any) -> None:
    """Close the run's books on the model proxy (:meth:`pilot.agents.model_proxy.RunMeter.close`), if it has one."""
    if meter is not None and hasattr(meter, "close"):
        meter.close()


def _metered_cap(cls: Classification, meter: Any) -> Classification:
    """A session the model proxy stopped at the run's cost cap ends as capped (cost), whatever the CLI made of it.

    Except one with no model output at all: it delivered nothing to evaluate, so it stays the infrastructure error
    the design makes of any failure before model output (rerun under the same id). That happens when an answer's
    usage was never reported (a stream cut) and the proxy booked its worst case, leaving no room for the retry.
    """
    if cls.status == INFRA_ERROR:
        return cls
    if meter is not None and getattr(meter, "capped", False):
        return Classification(
            CAPPED, censor_reason="cost", detail="the model proxy refused a request that could cross the cost cap"
        )
    return cls


def _record_meter(rec: RunRecord, meter: Any, reported_usd: float | None) -> None:
    """The proxy's metered cost beside the CLI's reported cost, and a note when they disagree."""
    if meter is None:
        return
    from pilot.protocol.prices import cost_disagreement

    rec.metered_cost_usd = Decimal(meter.metered_usd)
    requests = getattr(meter, "requests", None)
    rec.metered_requests = (
        len(requests) if isinstance(requests, (list, tuple)) else (int(requests) if requests is not None else None)
    )
    note = cost_disagreement(None if reported_usd is None else Decimal(str(reported_usd)), rec.metered_cost_usd)
    if note:
        rec.notes.append(note)


def _empty_record(base: dict, reason: str, notes: list[str], **extra: Any) -> RunRecord:
    fields: dict[str, Any] = dict(
        status=INFRA_ERROR,
        censored=False,
        censor_reason=None,
        infra_error=reason,
        agent_error=None,
        cost_usd=None,
        cost_complete=False,
        cost_method="no inference",
        recovery_cost_usd=None,
        wall_s=0.0,
        turns=0,
        tool_calls=0,
        tool_calls_by_tool={},
        questions=None,
        deviations=[],
        D=None,
        E=None,
        E_reasons=[],
        criteria_passed=None,
        criteria_total=None,
        criteria=[],
        selfcheck_first=None,
        recovery_used=False,
        recovery_skipped=None,
        selfcheck_final=None,
        cli_version=None,
        notes=list(notes),
    )
    fields.update(extra)
    return RunRecord(**base, **fields)


def _proxy_record(meter: Any, notes: list[str]) -> tuple[list[dict], bool] | None:
    """The proxy's exchanges of this run and whether the record's last line was torn, or None without a record."""
    from pilot.agents.model_proxy import read_exchange_record

    path = getattr(meter, "exchanges_path", None)
    if path is None or not Path(path).is_file():
        return None
    try:
        return read_exchange_record(Path(path))
    except ValueError as exc:
        # The harness's own file, damaged: the run is not lost over it; the stream stands, and the record says why.
        notes.append(f"the proxy's exchange record could not be read ({exc}); the run is read from the CLI's stream")
        return None


def _finish(
    base,
    out_dir,
    scenario,
    arm,
    ws,
    sessions,
    final_cls: Classification,
    agent,
    notes,
    t_start,
    *,
    selfcheck_first,
    selfcheck_final,
    recovery_used,
    recovery_skipped,
    worker_info,
    portal_info,
    evaluate,
    meter=None,
    session_bounds=None,
    record_from_proxy=True,
    prompts=None,
    bytes_start: int = 0,
) -> RunRecord:
    from pilot.workspace import transcript_path

    # The harness's own copy of the stream; where the model proxy kept its record of the exchanges, that record is
    # the run's (what the model said, which tools it called, what came back) and the stream is a second witness.
    stream = audit.read_transcript(transcript_path(out_dir))
    record = _proxy_record(meter, notes) if record_from_proxy else None
    if not record_from_proxy and meter is not None:
        notes.append(
            "the run is read from the CLI's stream alone (a stand-in CLI that is its own model; no proxy record)"
        )
    summary = stream if record is None else witness.proxy_summary(record[0], session_bounds=session_bounds)
    enforcement = getattr(agent, "enforcement", "")
    refusals = agent.refusals() if hasattr(agent, "refusals") else []
    devs = audit.audit(
        summary,
        arm.denied_families,
        arm.tools,
        network_allowed=bool(arm.feature("portal")),
        isolated=enforcement not in ("", "unisolated"),
        refusals=refusals,
    )
    tampering: list = []
    if record is not None:
        tampering = witness.compare(
            record[0],
            [s.summary for s in sessions],
            assigned_session_ids=[s.assigned_session_id or "" for s in sessions],
            metered_usd=Decimal(meter.metered_usd),
            truncated=record[1],
            session_bounds=session_bounds,
            killed_sessions=sum(bool(s.timed_out or s.bound) for s in sessions),
            redact=tuple(getattr(agent, "redact", ())),
            notes=notes,
            prompts=prompts,
        )
        devs += witness.tampering_deviations(tampering)
    deviations = [d.to_dict() for d in devs]
    cost = combined_cost(sessions)
    if any(t.kind == witness.FORGED_RESULT for t in tampering):
        # The client's figure cannot be believed: the run costs what the proxy metered.
        cost = replace(
            cost, total_usd=float(meter.metered_usd), complete=True, method="metered (the client's result was forged)"
        )
    completion, valid, refused = load_completion_record(ws.root)
    if refused:
        # Its questions are then missing (never zero): H has no count to add.
        notes.append(f"the completion record was not read: {refused}")
    status = final_cls.status
    wall = sum(s.wall_s for s in sessions)
    rec = RunRecord(
        **base,
        status=status,
        censored=final_cls.censored,
        censor_reason=final_cls.censor_reason,
        infra_error=None,
        agent_error=final_cls.detail or None if status == AGENT_ERROR else None,
        cost_usd=cost.total_usd,
        cost_complete=cost.complete,
        cost_method=cost.method,
        recovery_cost_usd=cost.per_session_usd[1] if len(cost.per_session_usd) > 1 else None,
        wall_s=round(wall, 3),
        turns=summary.turns,
        tool_calls=len(summary.tool_calls),
        tool_calls_by_tool=summary.tool_calls_by_tool,
        questions=count_questions(completion),
        deviations=deviations,
        D=None,
        E=None,
        E_reasons=[],
        criteria_passed=None,
        criteria_total=None,
        criteria=[],
        selfcheck_first=selfcheck_first,
        recovery_used=recovery_used,
        recovery_skipped=recovery_skipped,
        selfcheck_final=selfcheck_final,
        cli_version=sessions[-1].cli_version or sessions[0].cli_version,
        sessions=[s.to_dict() for s in sessions],
        completion_record_valid=valid,
        completion_status=completion.get("status") if valid and isinstance(completion, dict) else None,
        enforcement=enforcement,
        worker_env=worker_info,
        portal=portal_info,
        notes=list(notes) + list(getattr(agent, "notes", [])),
    )
    # A stand-in agent without a proxy (the simulated backend) meters itself, as a proxy would: a session killed before
    # it
    # reported still has a cost, so a dry run settles such runs on it instead of the reservation.
    _record_meter(rec, meter if meter is not None else getattr(agent, "meter", None), cost.total_usd)
    if base["backend"] in backends.CLI_BACKENDS and "macos" in arm.requires and platform.system() != "Darwin":
        rec.notes.append(
            f"arm {arm.id} requires a macOS node; this attempt ran on {platform.system()} (its masks and programs are "
            "that host's)"
        )
    pinned = str(protocol.study()["cli"]["version"])
    if base["backend"] in backends.CLI_BACKENDS and rec.cli_version and rec.cli_version != pinned:
        rec.notes.append(f"CLI version {rec.cli_version} differs from the pinned {pinned} (study.yml cli.version)")
    # What the run left, before anything reads it: a later re-evaluation checks it is still these bytes.
    rec.input_hashes = dict(ws.input_hashes)
    rec.workspace_sha256, rec.workspace_entries = record_workspace(ws.root, out_dir)
    if evaluate:
        mark_phase(out_dir, "evaluation")
        ev = evaluate_finished(scenario, ws.root, ws.input_hashes)
        (out_dir / EVALUATION_FILE).write_text(json.dumps(ev.to_dict(), indent=2) + "\n", encoding="utf-8")
        apply_evaluation(rec, ev)
    rec.worker_bytes_read = worker_files.bytes_read() - bytes_start
    rec.harness_s = time.monotonic() - t_start
    _write(out_dir, rec)
    return rec


def _harness_fault(
    base: dict,
    out_dir: Path,
    scenario: Any,
    exc: BaseException,
    *,
    ws: Any,
    sessions: list[SessionOutcome],
    meter: Any,
    agent: Any,
    notes: list[str],
    worker_info: Any,
    portal_info: Any,
    evaluate: bool,
    t_start: float,
    bytes_start: int,
    selfcheck: tuple[bool | None, bool | None, bool] = (None, None, False),
) -> RunRecord:
    """The run's own record when the harness failed after inference began: an agent error, evaluated as delivered.

    Not an infrastructure error: whether the fault came from the harness or from what the worker made, a rerun
    would give the run a fresh draw. ``harness_fault`` names the phase and the failure, so the run table counts
    such runs; what the agent spent stays charged.
    """
    phase = (read_phase(out_dir) or {}).get("phase", "unknown")
    fault = f"{HARNESS_FAULT_PREFIX} (phase {phase}): {type(exc).__name__}: {str(exc)[:300]}"
    cost = combined_cost(sessions) if sessions else None
    rec = _empty_record(
        base,
        "",
        notes,
        status=AGENT_ERROR,
        infra_error=None,
        agent_error=fault,
        harness_fault=fault,
        cost_usd=cost.total_usd if cost else None,
        cost_complete=bool(cost and cost.complete),
        cost_method=cost.method if cost else "unknown: the harness failed before a session ended",
        wall_s=round(sum(s.wall_s for s in sessions), 3),
        sessions=[s.to_dict() for s in sessions],
        cli_version=next((s.cli_version for s in sessions if s.cli_version), None),
        enforcement=getattr(agent, "enforcement", ""),
        worker_env=worker_info,
        portal=portal_info,
        D=False,
        E=False,
        eval_error="the harness failed before the evaluation could run (see harness_fault)",
        selfcheck_first=selfcheck[0],
        selfcheck_final=selfcheck[1],
        recovery_used=selfcheck[2],
    )
    import traceback

    rec.notes.append(fault)
    rec.notes.append("traceback of the harness fault:\n" + "".join(traceback.format_exception(exc, limit=8)))
    try:
        _record_meter(rec, meter if meter is not None else getattr(agent, "meter", None), rec.cost_usd)
    except Exception as again:  # noqa: BLE001 - the record is written whatever else fails
        rec.notes.append(f"the metered cost could not be read ({type(again).__name__}: {again})")
    if ws is not None:
        try:
            rec.input_hashes = dict(ws.input_hashes)
            rec.workspace_sha256, rec.workspace_entries = record_workspace(ws.root, out_dir)
            if evaluate:
                mark_phase(out_dir, "evaluation")
                ev = evaluate_finished(scenario, ws.root, ws.input_hashes)
                (out_dir / EVALUATION_FILE).write_text(json.dumps(ev.to_dict(), indent=2) + "\n", encoding="utf-8")
                apply_evaluation(rec, ev)
        except Exception as again:  # noqa: BLE001 - the run keeps its eval_error; pilot study reevaluate can retry
            rec.eval_error = f"the evaluation after the harness fault failed too ({type(again).__name__}: {again})"
    rec.worker_bytes_read = worker_files.bytes_read() - bytes_start
    rec.harness_s = time.monotonic() - t_start
    _write(out_dir, rec)
    return rec


def evaluate_finished(scenario: Any, workspace: Path, input_hashes: dict[str, str] | None) -> Any:
    """The evaluation of a finished run: the input-hash check, the oracle and the guarded reader
    (:func:`pilot.oracle_formats.evaluate.evaluate`: the core oracle, with the deck reader for a deck). The runner and
    ``pilot study reevaluate`` both call this.

    The evaluator's own failure is an evaluation error of the run (``errors``), never an exception:
    a finished run cannot become an infrastructure error, whatever happens in its evaluation.
    """
    from pilot.oracle_formats.evaluate import evaluate as oracle_evaluate
    from pilot.oracles.evaluate import Evaluation

    try:
        return oracle_evaluate(scenario, workspace, input_hashes)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        return Evaluation(
            scenario.id,
            str(workspace),
            False,
            False,
            [],
            [],
            errors=[f"the evaluation failed ({type(exc).__name__}: {str(exc)[:300]})"],
        )


def evaluation_fields(ev: Any) -> dict[str, Any]:
    """The run record's fields an evaluation sets:
    D, E, the criteria, and ``eval_error`` when it could not run in full."""
    errors = list(getattr(ev, "errors", []))
    return {
        "D": bool(ev.D),
        "E": bool(ev.E),
        "E_reasons": list(ev.E_reasons),
        "criteria_passed": int(ev.criteria_passed),
        "criteria_total": int(ev.criteria_total),
        "criteria": [asdict(c) if hasattr(c, "__dataclass_fields__") else dict(c) for c in ev.criteria],
        "eval_error": "; ".join(errors) or None,
    }


def evaluation_notes(ev: Any) -> list[str]:
    """The notes an evaluation that could not run in full leaves on the record (it is never charged to the worker
    silently)."""
    return [f"{EVAL_ERROR_NOTE}{e}" for e in getattr(ev, "errors", [])]


def apply_evaluation(rec: RunRecord, ev: Any) -> RunRecord:
    """Put an evaluation's verdict on the run record (:func:`evaluation_fields`, :func:`evaluation_notes`)."""
    for key, value in evaluation_fields(ev).items():
        setattr(rec, key, value)
    rec.notes.extend(evaluation_notes(ev))
    return rec


def workspace_manifest(workspace: Path) -> dict[str, str]:
    """Every entry under the workspace (relative path -> content hash; links by their target text, never followed).

    The input-hash walk (:func:`pilot.oracles.hashing.hash_inputs`): bounded, iterative, never opening a special file.
    """
    from pilot.oracles.hashing import hash_inputs

    return hash_inputs(Path(workspace))


def manifest_digest(manifest: dict[str, str]) -> str:
    """One SHA-256 over a workspace manifest (sorted, canonical JSON)."""
    import hashlib

    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def record_workspace(workspace: Path, out_dir: Path) -> tuple[str, int]:
    """Write the workspace's manifest beside it (``workspace_manifest.json``, outside what the agent can reach)
    and return its digest and number of entries, which the run record keeps."""
    manifest = workspace_manifest(workspace)
    (Path(out_dir) / WORKSPACE_MANIFEST).write_text(
        json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    return manifest_digest(manifest), len(manifest)


def _record_portal_end(rec: RunRecord, end: Any, portal: Any, out_dir: Path) -> RunRecord:
    """Put the portal's end of run on the record: requests, fault, and an infrastructure error or a note."""
    from pilot.portal.access_log import summarise_access_log
    from pilot.portal.redaction import redact_secrets

    rec.portal_requests, rec.portal_fault = int(end.requests), bool(end.fault)
    log = getattr(portal, "access_log_path", None)
    if log is not None:
        use = summarise_access_log(Path(log))
        rec.portal = dict(rec.portal or {}, use={k: v for k, v in use.items() if v})
    if end.infra_error:
        # The run cannot stand: the arm's portal was gone and the worker never got anything from it.
        rec.status, rec.infra_error, rec.agent_error = INFRA_ERROR, end.infra_error, None
        rec.censored, rec.censor_reason = False, None
        rec.D = rec.E = rec.criteria_passed = rec.criteria_total = None
        rec.E_reasons, rec.criteria = [], []
    elif end.note:
        rec.notes.append(end.note)
    rec = RunRecord.from_dict(json.loads(redact_secrets(json.dumps(rec.to_dict(), default=str), portal.secrets())))
    _write(out_dir, rec)
    return rec


def _write(out_dir: Path, rec: RunRecord) -> None:
    (out_dir / "run_record.json").write_text(json.dumps(rec.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
