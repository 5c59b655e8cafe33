"""A local HTTP server for the dashboard: the page at `/`, its data at `/api/data` (stdlib http.server).

It binds 127.0.0.1 unless told otherwise: the results name devices and hosts. Each request opens the
store anew (SQLite connections are per thread), so a run recorded while the server runs shows up on
the next reload.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from edge_sdk.dashboard.page import chart_data, render_page
from edge_sdk.errors import EdgeError, UsageError
from edge_sdk.results.store import ResultsStore

_SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                     "Cache-Control": "no-store"}


def _handler(db: Path, log: Callable[[str], None] | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "edge-sdk-dashboard"
        head_only = False

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            self.head_only = True
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            path = urlsplit(self.path).path
            if path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, "text/html; charset=utf-8", render_page(None).encode())
            elif path == "/api/data":
                try:
                    with ResultsStore(db) as store:
                        body = json.dumps(chart_data(store), default=str).encode()
                    self._send(HTTPStatus.OK, "application/json", body)
                except EdgeError as e:
                    self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "application/json",
                               json.dumps({"error": str(e)}).encode())
            else:
                self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

        def _send(self, status: HTTPStatus, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in _SECURITY_HEADERS.items():
                self.send_header(k, v)
            self.end_headers()
            if not self.head_only:
                self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:
            if log:
                log(f"{self.address_string()} {fmt % args}")

    return Handler


def make_server(*, db: Path, host: str = "127.0.0.1", port: int = 8765,
                log: Callable[[str], None] | None = None) -> ThreadingHTTPServer:
    """A bound, not yet serving, server (port 0: any free port; read it from .server_address)."""
    try:
        server = ThreadingHTTPServer((host, port), _handler(Path(db), log))
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port} ({e.strerror or e})",
                         hint="pick another port with --port, or --port 0 for any free one") from e
    server.daemon_threads = True
    return server


def serve(*, db: Path, host: str = "127.0.0.1", port: int = 8765, log: Callable[[str], None] | None = None,
          announce: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C."""
    server = make_server(db=db, host=host, port=port, log=log)
    bound_host, bound_port = server.server_address[:2]
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"edge-sdk: warning: the dashboard listens on {host}: anyone who can reach this machine "
              "can read the results", file=sys.stderr)
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    announce(f"dashboard of {db} at http://{shown}:{bound_port}/ (Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
