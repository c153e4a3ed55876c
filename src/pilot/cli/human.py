"""``pilot human``: the human wave of a study (H0 without AI, H1 with the metered assistant).

- ``pilot human create STUDY WAVE --participants FILE [--seed N] [--per-condition K] [--scenarios IDS]
  [--ethics-approval REF]`` randomises the participants within occupation, assigns their scenarios, stores the
  plan and writes ``analysis/data/STUDY/human/WAVE/assignment.csv`` (no contact) and ``links.csv`` (each
  participant's contact and personal link, and the experimenter's; owner-only).
- ``pilot human serve STUDY WAVE [--port P] [--host H] [--trusted-host NAME ...] [--secure-cookies]`` serves the
  participant site (127.0.0.1 by default).
- ``pilot human status STUDY WAVE [--json]``: who is where, as the experimenter's page shows it.
- ``pilot human evaluate STUDY WAVE [--participant ID ...]``: close sessions past their time, evaluate the submitted.
- ``pilot human withdraw STUDY WAVE PARTICIPANT [--reason TEXT]``: withdraw a participant as the consent says.
- ``pilot human close STUDY WAVE``: the wave is over and its analysis starts (withdrawal then excludes).
- ``pilot human delete STUDY WAVE --contacts``: delete every contact of the wave (retention), logged.
- ``pilot human deletions STUDY [--wave WAVE]``: the deletion log and the withdrawals.
- ``pilot human export STUDY [--out FILE]``: the human wave's run table (``human_runs.csv``).
- ``pilot human simulate STUDY WAVE [--config FILE] [--replace]``: SIMULATED participants, for a dry run only.
- ``pilot human list STUDY``: the study's human waves.

Every failure ends in one line ``pilot human: <what happened>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pilot import paths


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("human", help="the human wave (H0, H1): plan, participant site, evaluation, withdrawal, export")
    hsub = p.add_subparsers(dest="human_command", metavar="SUBCOMMAND", required=True)

    c = hsub.add_parser("create", help="randomise the participants and store the wave's plan")
    _study_wave(c)
    c.add_argument(
        "--participants", type=Path, required=True, help="CSV with participant_id,contact,occupation,eligibility"
    )
    c.add_argument("--seed", type=int, help="seed of the randomisation (default: the study's seed)")
    c.add_argument(
        "--per-condition", type=int, help="participants per scenario and condition (default: study.yml human_wave)"
    )
    c.add_argument("--scenarios", help="scenario ids separated by commas (default: the study's scenarios)")
    c.add_argument("--ethics-approval", help="the ethics board's approval reference, kept with the wave")
    c.set_defaults(func=_cmd_create)

    s = hsub.add_parser("serve", help="serve the participant site")
    _study_wave(s)
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8767, help="port (0: any free port; default 8767)")
    s.add_argument(
        "--trusted-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header answered besides the bound address",
    )
    s.add_argument(
        "--secure-cookies", action="store_true", help="mark cookies Secure (a proxy in front terminates TLS)"
    )
    s.set_defaults(func=_cmd_serve)

    st = hsub.add_parser("status", help="every session of the wave: condition, scenario, state, clock, verdict")
    _study_wave(st)
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_cmd_status)

    e = hsub.add_parser("evaluate", help="close the sessions past their time and evaluate the submitted ones")
    _study_wave(e)
    e.add_argument("--participant", action="append", help="only this participant (repeatable)")
    e.set_defaults(func=_cmd_evaluate)

    w = hsub.add_parser(
        "withdraw", help="withdraw a participant: delete their data (or exclude it once analysis started)"
    )
    _study_wave(w)
    w.add_argument("participant", help="the participant's id (pseudonym)")
    w.add_argument("--reason", help="a note kept with the withdrawal (never required of the participant)")
    w.set_defaults(func=_cmd_withdraw)

    cl = hsub.add_parser("close", help="the wave is over: its analysis starts (a later withdrawal excludes)")
    _study_wave(cl)
    cl.set_defaults(func=_cmd_close)

    d = hsub.add_parser("delete", help="delete what the retention rules say must go")
    _study_wave(d)
    d.add_argument("--contacts", action="store_true", required=True, help="every contact of the wave (its links file)")
    d.set_defaults(func=_cmd_delete)

    dl = hsub.add_parser("deletions", help="the deletion log and the withdrawals")
    dl.add_argument("study", help="study name (folder under analysis/data/) or a study folder")
    dl.add_argument("--wave", help="one wave only")
    dl.set_defaults(func=_cmd_deletions)

    x = hsub.add_parser("export", help="write the human wave's run table (human_runs.csv)")
    x.add_argument("study", help="study name (folder under analysis/data/) or a study folder")
    x.add_argument("--out", type=Path, help="CSV file to write (default: the study folder's human_runs.csv)")
    x.set_defaults(func=_cmd_export)

    sim = hsub.add_parser("simulate", help="draw SIMULATED participants for a dry run (no person takes part)")
    _study_wave(sim)
    sim.add_argument(
        "--config", type=Path, help=f"the model (default {paths.shown(paths.SIMULATED_PARTICIPANTS_FILE)})"
    )
    sim.add_argument("--replace", action="store_true", help="draw again over an earlier SIMULATED wave of that name")
    sim.set_defaults(func=_cmd_simulate)

    ls = hsub.add_parser("list", help="the study's human waves")
    ls.add_argument("study", help="study name (folder under analysis/data/) or a study folder")
    ls.set_defaults(func=_cmd_list)


def _study_wave(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="study name (folder under analysis/data/) or a study folder")
    p.add_argument("wave", help="human wave name (lower-case letters, digits, hyphens)")


def _folder(study: str) -> Path:
    given = Path(study)
    if given.is_dir() and (given / "study.sqlite").is_file():
        return given
    return paths.study_dir(study)


def _fail(exc: BaseException) -> int:
    print(f"pilot human: {exc}", file=sys.stderr)
    return 2


def _errors() -> tuple[type[Exception], ...]:
    from pilot.human.assignment import AssignmentError
    from pilot.human.export import HumanExportError
    from pilot.human.participants import ParticipantFileError
    from pilot.human.session import SessionError
    from pilot.protocol import ProtocolError
    from pilot.runtable import RunTableError
    from pilot.store import StoreError

    return (
        AssignmentError,
        ParticipantFileError,
        ProtocolError,
        StoreError,
        SessionError,
        HumanExportError,
        RunTableError,
    )


def _cmd_create(args: argparse.Namespace) -> int:
    from pilot.human.participants import exposure_warning
    from pilot.human.wave import create_wave

    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()] if args.scenarios else None
    try:
        made = create_wave(
            _folder(args.study),
            args.wave,
            args.participants,
            seed=args.seed,
            per_condition=args.per_condition,
            scenarios=scenarios,
            ethics_approval=args.ethics_approval,
        )
    except _errors() as exc:
        return _fail(exc)
    warning = exposure_warning(args.participants)
    if warning:
        print(f"pilot human: {warning}", file=sys.stderr)
    by: dict[str, int] = {}
    for p in made.placements:
        key = f"{p.scenario} {p.condition}"
        by[key] = by.get(key, 0) + 1
    print(
        json.dumps(
            {
                "wave": made.wave,
                "participants": len(made.placements),
                "per_scenario_and_condition": dict(sorted(by.items())),
                "assignment": paths.shown(made.assignment_file),
                "links": paths.shown(made.links_file),
            },
            indent=2,
        )
    )
    print(
        f"pilot human: send each participant their own link from {paths.shown(made.links_file)} (prefix it with the "
        "site's address); the experimenter's link is its first line. No session may start before ethics approval.",
        file=sys.stderr,
    )
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from pilot.human.site import ParticipantServer

    try:
        server = ParticipantServer(
            _folder(args.study),
            args.wave,
            host=args.host,
            port=args.port,
            trusted_hosts=args.trusted_host,
            secure_cookies=args.secure_cookies,
        )
    except _errors() as exc:
        return _fail(exc)
    except OSError as exc:
        return _fail(
            OSError(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc} (choose another --port, or 0)")
        )
    from pilot.cli.signals import stop_on_signals

    stop_on_signals()
    try:
        print(f"pilot human: wave {args.wave} at {server.url}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from pilot.human import store
    from pilot.human.status import status_rows

    try:
        with store.open_store(_folder(args.study)) as st:
            rows = status_rows(st, args.wave)
    except _errors() as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        import pandas as pd

        print(pd.DataFrame(rows).to_string(index=False) if rows else "no participant")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from pilot.human.evaluate import evaluate_wave

    try:
        done = evaluate_wave(_folder(args.study), args.wave, only=args.participant)
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps({"evaluated": done}, indent=2))
    return 0


def _cmd_withdraw(args: argparse.Namespace) -> int:
    from pilot.human import store
    from pilot.human.withdraw import withdraw

    try:
        with store.open_store(_folder(args.study)) as st:
            made = withdraw(st, args.wave, args.participant, via="command", reason=args.reason)
    except _errors() as exc:
        return _fail(exc)
    print(
        json.dumps(
            {
                "participant": made.participant_id,
                "action": made.action,
                "stage": made.stage,
                "charged_usd": made.charged_usd,
                "deleted": made.deleted,
            },
            indent=2,
        )
    )
    return 0


def _cmd_close(args: argparse.Namespace) -> int:
    from pilot.human import store
    from pilot.human.withdraw import mark_analysis_started

    try:
        with store.open_store(_folder(args.study)) as st:
            store.wave(st.conn, args.wave)
            mark_analysis_started(st, args.wave)
            at = store.wave(st.conn, args.wave).analysis_started_at
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps({"wave": args.wave, "analysis_started_at": at}))
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    from pilot.human import store
    from pilot.human.withdraw import delete_contacts

    try:
        with store.open_store(_folder(args.study)) as st:
            removed = delete_contacts(st, args.wave)
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps({"wave": args.wave, "contacts_deleted": removed}))
    return 0


def _cmd_deletions(args: argparse.Namespace) -> int:
    from pilot.human import store

    try:
        with store.open_store(_folder(args.study)) as st:
            log = [dict(r) for r in store.deletions(st.conn, args.wave)]
            gone = [dict(r) for r in store.withdrawals(st.conn, args.wave)]
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps({"withdrawals": gone, "deletions": log}, indent=2))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from pilot.human.export import export_human_table

    try:
        target, made = export_human_table(_folder(args.study), args.out)
    except _errors() as exc:
        return _fail(exc)
    print(
        json.dumps(
            {
                "human_runs": str(target),
                "rows": len(made.table),
                "not_evaluated": made.pending,
                "withdrawn_excluded": made.withdrawn,
            }
        )
    )
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from pilot import backends

    try:
        made = backends.role(backends.SIMULATED_HUMAN, "participants")(
            _folder(args.study), args.wave, config=args.config, replace=args.replace
        )
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps(made, indent=2, default=str))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from pilot.human import store

    try:
        with store.open_store(_folder(args.study)) as st:
            rows = [store.wave(st.conn, w) for w in store.waves(st.conn)]
    except _errors() as exc:
        return _fail(exc)
    for w in rows:
        label = "SIMULATED (no person took part)" if w.simulated else "participants"
        print(f"{w.wave}\t{label}\tper condition {w.per_condition}\tcreated {w.created_at}")
    return 0
