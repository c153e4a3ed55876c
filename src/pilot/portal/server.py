"""The portal's server process: ``python -m pilot.portal.server`` (started by ``instance.py``).

It reads its secrets from the first line of standard input (credential
digests, never the password; an instance id; the limits), binds waitress to
127.0.0.1 on the given port (0: the OS picks a free one) or to a Unix socket,
prints one JSON line with where it listens, and serves until standard input
closes: the parent closing the pipe, or dying, stops the server, so no orphan
outlives its run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from pilot.portal.wire import EXIT_BIND, EXIT_CONTENT, EXIT_SETUP, LOOPBACK, ServerLimits, port_argument


def _stop_when_stdin_closes(on_close) -> None:
    def watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        on_close()

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


def _json_error_channel():
    """waitress's channel, answering its own errors (413 before the body is read, 400, 431) in JSON under /api/."""
    from waitress.channel import HTTPChannel
    from waitress.task import ErrorTask

    class JsonErrorTask(ErrorTask):
        def execute(self):
            if not (self.request.path or "").startswith("/api/"):
                return super().execute()
            e = self.request.error
            self.status = f"{e.code} {e.reason}"
            body = json.dumps({"error": f"{e.reason.lower()}: {e.body}"}).encode("utf-8")
            self.response_headers.append(("Content-Type", "application/json"))
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class JsonErrorChannel(HTTPChannel):
        error_task_class = JsonErrorTask

    return JsonErrorChannel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pilot.portal.server")
    parser.add_argument("--content", type=Path, required=True, help="the scenario's portal content folder")
    parser.add_argument("--access-log", type=Path, required=True, help="JSON-lines access log to append to")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", type=port_argument, default=0, help="port on 127.0.0.1 (0: any free port)")
    where.add_argument("--unix-socket", type=Path, default=None, help="listen on this Unix socket (mode 0600) instead")
    args = parser.parse_args(argv)

    from pilot.portal.access_log import AccessLog
    from pilot.portal.app import SessionLimits, SignInLimits, create_app
    from pilot.portal.content import PortalContentError, load_portal_content
    from pilot.portal.credentials import CredentialVerifier

    try:
        setup = json.loads(sys.stdin.readline())
        verifier = CredentialVerifier.from_json(setup["verifier"])
        instance_id = str(setup["instance_id"])
        limits = SignInLimits(**setup.get("limits", {}))
        session_limits = SessionLimits(**setup.get("session_limits", {}))
        server_limits = ServerLimits(**setup.get("server_limits", {}))
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
    app = create_app(
        content, verifier, instance_id=instance_id, access_log=access_log, limits=limits, session_limits=session_limits
    )
    listen = (
        {"unix_socket": str(args.unix_socket), "unix_socket_perms": "600"}
        if args.unix_socket
        else {"host": LOOPBACK, "port": args.port}
    )
    try:
        server = waitress.create_server(
            app,
            **listen,
            threads=server_limits.threads,
            ident="intranet",
            clear_untrusted_proxy_headers=True,
            connection_limit=server_limits.connection_limit,
            channel_timeout=server_limits.channel_timeout_s,
            cleanup_interval=server_limits.cleanup_interval_s,
            max_request_body_size=server_limits.max_body_bytes,
            max_request_header_size=server_limits.max_header_bytes,
        )
    except OSError as exc:
        print(
            f"portal: cannot bind {args.unix_socket or f'{LOOPBACK}:{args.port}'}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_BIND
    server.channel_class = _json_error_channel()

    def shut_down() -> None:
        access_log.close()
        if args.unix_socket:
            args.unix_socket.unlink(missing_ok=True)
        os._exit(0)

    _stop_when_stdin_closes(shut_down)
    where_line = (
        {"unix_socket": str(args.unix_socket)}
        if args.unix_socket
        else {"port": server.effective_port, "host": server.effective_host}
    )
    print(json.dumps(where_line | {"pid": os.getpid()}), flush=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
