"""The portal's server process: ``python -m pilot.portal.server`` (started by ``instance.py``).

It reads its secrets from the first line of standard input (credential
digests, never the password; an instance id), binds waitress to 127.0.0.1 on
the given port (0: the OS picks a free one), prints one JSON line with the
bound port, and serves until standard input closes: the parent closing the
pipe, or dying, stops the server, so no orphan outlives its run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from pilot.portal.wire import EXIT_BIND, EXIT_CONTENT, EXIT_SETUP, LOOPBACK


def _stop_when_stdin_closes(on_close) -> None:
    def watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        on_close()

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pilot.portal.server")
    parser.add_argument("--content", type=Path, required=True, help="the scenario's portal content folder")
    parser.add_argument("--access-log", type=Path, required=True, help="JSON-lines access log to append to")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args(argv)

    from pilot.portal.access_log import AccessLog
    from pilot.portal.app import SignInLimits, create_app
    from pilot.portal.content import PortalContentError, load_portal_content
    from pilot.portal.credentials import CredentialVerifier

    try:
        setup = json.loads(sys.stdin.readline())
        verifier = CredentialVerifier.from_json(setup["verifier"])
        instance_id = str(setup["instance_id"])
        limits = SignInLimits(**setup.get("limits", {}))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"portal: bad setup line on standard input: {exc}", file=sys.stderr)
        return EXIT_SETUP
    try:
        content = load_portal_content(args.content)
    except PortalContentError as exc:
        print(f"portal: content error: {exc}", file=sys.stderr)
        return EXIT_CONTENT

    import waitress

    access_log = AccessLog(args.access_log)
    app = create_app(content, verifier, instance_id=instance_id, access_log=access_log, limits=limits)
    try:
        server = waitress.create_server(app, host=LOOPBACK, port=args.port, threads=args.threads,
                                        ident="intranet", clear_untrusted_proxy_headers=True)
    except OSError as exc:
        print(f"portal: cannot bind {LOOPBACK}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BIND

    def shut_down() -> None:
        access_log.close()
        os._exit(0)

    _stop_when_stdin_closes(shut_down)
    print(json.dumps({"port": server.effective_port, "host": server.effective_host, "pid": os.getpid()}), flush=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
