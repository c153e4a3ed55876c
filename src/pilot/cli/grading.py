"""``pilot grading``: the expert grading wave of a study (A-005).

- ``pilot grading create STUDY WAVE --graders FILE [--per-package K] [--sample all|N] [--seed N]``
  draws the packages (every judged run of the primary waves, or N per scenario x arm), assigns each
  to K graders of its occupation (arms balanced within grader, queues shuffled) and stores the plan in
  the study's store; the personal sign-in links are written once to
  ``analysis/data/STUDY/grading/WAVE/links.csv`` (owner-only; the store keeps hashes alone).
- ``pilot grading serve STUDY WAVE [--port P] [--host H] [--trusted-host NAME ...] [--secure-cookies]``
  serves the blind grading site (127.0.0.1 by default; behind a TLS reverse proxy when deployed,
  see ``protocol/human/evaluation.md``).
- ``pilot grading progress STUDY WAVE`` prints open, saved and submitted counts per grader and stratum.
- ``pilot grading export STUDY WAVE --out FILE`` writes the submitted grades (CSV, the coordinator's export).
- ``pilot grading report STUDY WAVE [--grades FILE] [--out DIR]`` computes agreement and the panel's bias per arm.
- ``pilot grading simulate STUDY WAVE [--config FILE] [--replace]`` draws a SIMULATED wave for a dry run.
- ``pilot grading list STUDY`` lists the study's waves.
- ``pilot grading links reissue|revoke STUDY WAVE GRADER`` gives a grader (or ``coordinator``) a new sign-in link, or
  none; the old link stops working at once and their open sessions end.
- ``pilot grading secret rotate STUDY WAVE`` replaces the site's secret: everyone is signed out.
- ``pilot grading backup STUDY WAVE --out FILE`` copies the study's store (grades included) while the site runs.

Every failure ends in one line ``pilot grading: <what happened>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pilot import paths


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("grading", help="expert grading of a study's packages: plan, site, export, report")
    gsub = p.add_subparsers(dest="grading_command", metavar="SUBCOMMAND", required=True)

    c = gsub.add_parser("create", help="draw and assign the packages of a new grading wave")
    _study_wave(c)
    c.add_argument(
        "--graders", type=Path, required=True, help="CSV with name,contact,occupations (occupations separated by ';')"
    )
    c.add_argument(
        "--per-package", type=int, default=2, metavar="K", help="graders per package (at least 2; default 2)"
    )
    c.add_argument("--sample", default="all", help="all (default) or N: N packages per scenario x arm, seeded")
    c.add_argument("--seed", type=int, help="seed of the sample and the assignment (default: the study's seed)")
    c.add_argument(
        "--with-human",
        action="store_true",
        help="draw the human wave's packages too (pilot human), blind among the agents' as the judges saw them",
    )
    c.set_defaults(func=_cmd_create)

    s = gsub.add_parser("serve", help="serve the blind grading site")
    _study_wave(s)
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; a reverse proxy in front for anything else)",
    )
    s.add_argument("--port", type=int, default=8766, help="port (0: any free port; default 8766)")
    s.add_argument(
        "--trusted-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header the site answers besides the bound address (the proxy's public name)",
    )
    s.add_argument("--secure-cookies", action="store_true", help="mark cookies Secure (the proxy terminates TLS)")
    s.set_defaults(func=_cmd_serve)

    pr = gsub.add_parser("progress", help="open, saved and submitted assignments per grader and per stratum")
    _study_wave(pr)
    pr.add_argument("--json", action="store_true", help="print JSON")
    pr.set_defaults(func=_cmd_progress)

    e = gsub.add_parser("export", help="write the wave's submitted grades as CSV")
    _study_wave(e)
    e.add_argument("--out", type=Path, required=True, help="CSV file to write")
    e.set_defaults(func=_cmd_export)

    r = gsub.add_parser("report", help="agreement among experts and with the LLM panel, and the panel's bias per arm")
    _study_wave(r)
    r.add_argument("--grades", type=Path, help="a coordinator's export to read instead of the store's grades")
    r.add_argument("--out", type=Path, help="folder for the report's tables (CSV and LaTeX)")
    r.add_argument("--seed", type=int, help="seed of the bootstrap (default: the wave's seed)")
    r.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples over packages (default 2000)")
    r.set_defaults(func=_cmd_report)

    sim = gsub.add_parser("simulate", help="draw a SIMULATED grading wave for a dry run (never for a real study)")
    _study_wave(sim)
    sim.add_argument(
        "--config",
        type=Path,
        help=f"the simulated graders' model (default {paths.shown(paths.SIMULATED_GRADERS_FILE)})",
    )
    sim.add_argument("--replace", action="store_true", help="draw again over an earlier SIMULATED wave of that name")
    sim.set_defaults(func=_cmd_simulate)

    ln = gsub.add_parser("links", help="reissue a lost sign-in link or revoke a leaked one (the old one stops at once)")
    ln.add_argument("action", choices=("reissue", "revoke"))
    _study_wave(ln)
    ln.add_argument("grader", help="the grader's id (G01 ...), or coordinator")
    ln.set_defaults(func=_cmd_links)

    sec = gsub.add_parser("secret", help="rotate the grading site's secret (signs everyone out)")
    sec.add_argument("action", choices=("rotate",))
    _study_wave(sec)
    sec.set_defaults(func=_cmd_secret)

    bk = gsub.add_parser("backup", help="a consistent copy of the study's store, grades included, while the site runs")
    _study_wave(bk)
    bk.add_argument("--out", type=Path, required=True, help="the backup file to write (SQLite)")
    bk.set_defaults(func=_cmd_backup)

    ls = gsub.add_parser("list", help="the study's grading waves")
    ls.add_argument("study", help="study name (folder under analysis/data/) or a study folder")
    ls.set_defaults(func=_cmd_list)


def _study_wave(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="study name (folder under analysis/data/) or a study folder")
    p.add_argument("wave", help="grading wave name (lower-case letters, digits, hyphens)")


def _folder(study: str) -> Path:
    given = Path(study)
    if given.is_dir() and (given / "study.sqlite").is_file():
        return given
    return paths.study_dir(study)


def _fail(exc: Exception) -> int:
    print(f"pilot grading: {exc}", file=sys.stderr)
    return 2


def _errors() -> tuple[type[Exception], ...]:
    from pilot.grading.assignment import AssignmentError
    from pilot.grading.graders import GraderFileError
    from pilot.protocol import ProtocolError
    from pilot.store import StoreError
    from pilot.web_sessions import SecretError

    return (AssignmentError, GraderFileError, ProtocolError, StoreError, SecretError)


def _cmd_create(args: argparse.Namespace) -> int:
    from pilot.grading.plan import PRIMARY_WAVES, create_wave
    from pilot.store import HUMAN_WAVE

    if args.sample == "all":
        per_stratum = None
    elif args.sample.isdigit() and int(args.sample) > 0:
        per_stratum = int(args.sample)
    else:
        return _fail(ValueError(f"--sample {args.sample!r}: all, or a positive number of packages per scenario x arm"))
    try:
        made = create_wave(
            _folder(args.study),
            args.wave,
            args.graders,
            per_package=args.per_package,
            per_stratum=per_stratum,
            seed=args.seed,
            study_waves=(*PRIMARY_WAVES, HUMAN_WAVE) if args.with_human else PRIMARY_WAVES,
        )
    except _errors() as exc:
        return _fail(exc)
    loads = {g.grader_id: sum(1 for a in made.assignments if a.grader_id == g.grader_id) for g in made.graders}
    print(
        json.dumps(
            {
                "wave": made.wave,
                "packages": len(made.packages),
                "offered": made.offered,
                "assignments": len(made.assignments),
                "graders": len(made.graders),
                "per_grader": loads,
                "largest_arm_imbalance_within_a_grader": max(made.spread.values(), default=0),
                "links": paths.shown(made.links_file),
            },
            indent=2,
        )
    )
    print(
        f"pilot grading: send each grader their own link from {paths.shown(made.links_file)} "
        "(prefix it with the site's address); it is shown nowhere else",
        file=sys.stderr,
    )
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from pilot.grading.site import GradingServer

    try:
        server = GradingServer(
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
        print(f"pilot grading: wave {args.wave} at {server.url}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _cmd_progress(args: argparse.Namespace) -> int:
    from pilot.grading import store

    try:
        with store.open_store(_folder(args.study)) as st:
            store.wave(st.conn, args.wave)
            tables = store.progress(st.conn, args.wave)
    except _errors() as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps({k: v.to_dict(orient="records") for k, v in tables.items()}, indent=2))
    else:
        for name, table in tables.items():
            print(f"by {name}:\n{table.to_string(index=False)}\n")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from pilot.grading import store
    from pilot.store import atomic_write_text

    try:
        with store.open_store(_folder(args.study)) as st:
            frame = store.grades_frame(st.conn, args.wave)
    except _errors() as exc:
        return _fail(exc)
    atomic_write_text(args.out, store.export_csv(frame))
    print(
        json.dumps(
            {
                "export": str(args.out),
                "rows": len(frame),
                "submitted_assignments": int(
                    frame.loc[frame["criterion"] != "", ["package_id", "grader_id"]].drop_duplicates().shape[0]
                ),
            }
        )
    )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pilot.grading import report

    try:
        result = report.load_report(
            _folder(args.study), args.wave, grades_csv=args.grades, seed=args.seed, B=args.resamples
        )
    except _errors() as exc:
        return _fail(exc)
    print(result.summary.to_string(index=False))
    if args.out is not None:
        written = report.write_grading_outputs(result, args.out, args.out)
        print(json.dumps({k: str(v) for k, v in written.items()}, indent=2))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from pilot.simulated.graders import simulate_wave

    try:
        made = simulate_wave(_folder(args.study), args.wave, args.config, replace=args.replace)
    except _errors() as exc:
        return _fail(exc)
    print(
        json.dumps(
            {
                "wave": args.wave,
                "label": "SIMULATED",
                "packages": len(made.created.packages),
                "assignments": len(made.created.assignments),
                "truth": paths.shown(made.truth_file),
                "planted_bias_q_contrast": made.truth["bias_q_contrast"],
            },
            indent=2,
        )
    )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from pilot.grading import store

    try:
        with store.open_store(_folder(args.study)) as st:
            rows = [store.wave(st.conn, w) for w in store.waves(st.conn)]
    except _errors() as exc:
        return _fail(exc)
    for w in rows:
        print(f"{w.wave}\t{w.source}\tK={w.per_package}\tcreated {w.created_at}")
    return 0


def _cmd_links(args: argparse.Namespace) -> int:
    from pilot.grading.links import change_link

    try:
        change = change_link(_folder(args.study), args.wave, args.grader, revoke=args.action == "revoke")
    except _errors() as exc:
        return _fail(exc)
    print(
        json.dumps(
            {
                "who": change.who,
                "link": "revoked" if change.path is None else "reissued",
                "sessions_closed": change.sessions_closed,
                "links": paths.shown(change.links_file),
            },
            indent=2,
        )
    )
    if change.path is not None:
        print(
            f"pilot grading: send {change.who} the new link from {paths.shown(change.links_file)} "
            "(prefix it with the site's address); the old one no longer signs in",
            file=sys.stderr,
        )
    return 0


def _cmd_secret(args: argparse.Namespace) -> int:
    from pilot.grading.links import rotate_secret

    try:
        closed = rotate_secret(_folder(args.study), args.wave)
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps({"wave": args.wave, "secret": "rotated", "sessions_closed": closed}))
    return 0


def _cmd_backup(args: argparse.Namespace) -> int:
    from pilot.grading import store

    try:
        with store.open_store(_folder(args.study)) as st:
            store.wave(st.conn, args.wave)
        out = store.backup(_folder(args.study), args.out)
    except _errors() as exc:
        return _fail(exc)
    print(json.dumps({"backup": str(out), "bytes": out.stat().st_size}))
    return 0
