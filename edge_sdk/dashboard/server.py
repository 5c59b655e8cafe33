"""A local HTTP server for the dashboard: the page at `/`, its data at `/api/data` (stdlib http.server).

It binds 127.0.0.1 unless told otherwise: the results name devices and hosts; an IPv6 address
(`--host ::1`) binds an IPv6 socket. Each request opens the store anew, read-only (SQLite connections
are per thread), so a run recorded while the server runs shows up on the next reload. A store it
cannot read answers 500 with {"error": ...}, which the page shows; a connection idle for
IDLE_TIMEOUT_S is closed, so idle clients cannot hold the server's threads.
"""
from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from edge_sdk.dashboard.page import chart_data, render_page
from edge_sdk.errors import EdgeError, UsageError
from edge_sdk.results.store import ResultsStore

IDLE_TIMEOUT_S = 30.0
_SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                     "Cache-Control": "no-store"}


def _handler(db: Path, log: Callable[[str], None] | None, idle_timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "edge-sdk-dashboard"
        head_only = False
        timeout = idle_timeout  # StreamRequestHandler sets it on the socket: a silent client is dropped

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            self.head_only = True
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            path = urlsplit(self.path).path
            if path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, "text/html; charset=utf-8", render_page(None).encode())
            elif path == "/api/data":
                self._send_data()
            else:
                self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

        def _send_data(self) -> None:
            try:
                with ResultsStore(db, read_only=True) as store:
                    body = json.dumps(chart_data(store), default=str, allow_nan=False).encode()
            except EdgeError as e:
                self._send_error(str(e))
            except Exception as e:  # noqa: BLE001 - the server answers every request; the reason goes to the page
                self._send_error(f"cannot read the results store {db}: {type(e).__name__}: {e}")
            else:
                self._send(HTTPStatus.OK, "application/json", body)

        def _send_error(self, message: str) -> None:
            if log:
                log(f"api/data: {message}")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "application/json", json.dumps({"error": message}).encode())

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


def make_server(*, db: Path, host: str = "127.0.0.1", port: int = 8765, log: Callable[[str], None] | None = None,
                idle_timeout: float = IDLE_TIMEOUT_S) -> ThreadingHTTPServer:
    """A bound, not yet serving, server (port 0: any free port; read it from .server_address)."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(f"cannot listen on {shown}: not an address of this machine ({e})",
                         hint="--host 127.0.0.1 (IPv4 loopback) or ::1 (IPv6 loopback)") from None
    server_class = type("DashboardServer", (ThreadingHTTPServer,), {"address_family": family})
    try:
        server = server_class((host, port), _handler(Path(db), log, idle_timeout))
    except OSError as e:
        ipv6 = " (IPv6 is off on this machine?)" if family == socket.AF_INET6 else ""
        raise UsageError(f"cannot listen on {shown} ({e.strerror or e}){ipv6}",
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
