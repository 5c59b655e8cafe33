"""A local HTTP server for the dashboard: the page at `/`, its data at `/api/data` (stdlib http.server).

It binds 127.0.0.1 unless told otherwise: the results name devices and hosts; an IPv6 address
(`--host ::1`) binds an IPv6 socket. Each request opens the store anew, read-only (SQLite connections
are per thread), so a run recorded while the server runs shows up on the next reload. A store it
cannot read answers 500 with {"error": ...}, which the page shows.

Hardening (a page on any web site can make the browser talk to 127.0.0.1):
- only the Host values of the address it serves are answered (127.0.0.1, localhost, [::1], the --host
  given, and for a wildcard --host this machine's name and addresses; with the served port or none);
  anything else gets 421, so a DNS-rebinding page cannot read the results;
- each request has REQUEST_DEADLINE_S from its first byte to its last write, whatever the client
  dribbles; a connection that sends nothing for IDLE_TIMEOUT_S is closed;
- at most MAX_CONNECTIONS at once (each holds a thread); more are answered 503 and closed;
- a client that resets or times out is a line in the log, never a traceback.
"""
from __future__ import annotations

import json
import re
import socket
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from edge_sdk.dashboard.page import chart_data, render_page
from edge_sdk.errors import EdgeError, UsageError
from edge_sdk.results.store import ResultsStore

IDLE_TIMEOUT_S = 30.0
REQUEST_DEADLINE_S = 10.0
MAX_CONNECTIONS = 32
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 31\r\n"
         b"Connection: close\r\n\r\ntoo many connections; try again\n")
_SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                     "Cache-Control": "no-store"}


class Handler(BaseHTTPRequestHandler):
    """One connection's requests; `db`, `log` and `timeout` are set by _handler's subclass."""

    server_version = "edge-sdk-dashboard"
    head_only = False
    cut = False
    db: Path
    log: Callable[[str], None] | None = None
    timeout = IDLE_TIMEOUT_S  # StreamRequestHandler sets it on the socket: a silent client is dropped

    def handle_one_request(self) -> None:
        try:  # up to the idle timeout for the request's first byte (not consumed: peek)
            self.rfile.peek(1)
        except TimeoutError:
            self.close_connection = True
            return
        timer = threading.Timer(self.server.request_deadline, self._cut)  # the whole request, not per read
        timer.daemon = True
        timer.start()
        try:
            super().handle_one_request()
        finally:
            timer.cancel()
        self.close_connection = self.close_connection or self.cut

    def _cut(self) -> None:
        self.cut = True
        try:  # a blocked read returns b"" at once; the handler ends as if the client had gone
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
        self.head_only = True
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        if self.cut:
            return
        if not self.server.host_allowed(self.headers.get("Host")):
            self.log_message("refused Host %r", self.headers.get("Host"))
            self._send(HTTPStatus.MISDIRECTED_REQUEST, "text/plain; charset=utf-8",
                       b"this server answers only for its own address (Host header)\n")
            return
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", render_page(None).encode())
        elif path == "/api/data":
            self._send_data()
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

    def _send_data(self) -> None:
        try:
            with ResultsStore(self.db, read_only=True) as store:
                body = json.dumps(chart_data(store), default=str, allow_nan=False).encode()
        except EdgeError as e:
            self._send_error(str(e))
        except Exception as e:  # noqa: BLE001 - the server answers every request; the reason goes to the page
            self._send_error(f"cannot read the results store {self.db}: {type(e).__name__}: {e}")
        else:
            self._send(HTTPStatus.OK, "application/json", body)

    def _send_error(self, message: str) -> None:
        if self.log:
            self.log(f"api/data: {message}")
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
        if self.log:
            self.log(f"{self.address_string()} {fmt % args}")


def _handler(db: Path, log: Callable[[str], None] | None, idle_timeout: float) -> type[Handler]:
    return type("Handler", (Handler,), {"db": db, "log": staticmethod(log) if log else None,
                                        "timeout": idle_timeout})


class DashboardServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with the Host check, the connection cap and quiet client resets."""

    daemon_threads = True
    request_deadline = REQUEST_DEADLINE_S

    def __init__(self, address, handler, *, log: Callable[[str], None] | None = None,
                 max_connections: int = MAX_CONNECTIONS):
        super().__init__(address, handler)
        self.log, self._slots = log, threading.BoundedSemaphore(max_connections)
        self.allowed_hosts = allowed_hosts(address[0])

    def host_allowed(self, value: str | None) -> bool:
        m = re.fullmatch(r"(\[[0-9a-f:.]+\]|[^\[\]:]+)(?::(\d{1,5}))?", (value or "").strip().lower())
        return bool(m) and m.group(1) in self.allowed_hosts and m.group(2) in (None, str(self.server_address[1]))

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.setblocking(False)
                request.send(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the request's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # reset, broken pipe, timeout: the client's doing, not a bug here
            if self.log:
                self.log(f"{client_address[0]}: connection dropped ({type(error).__name__}: {error})")
            return
        super().handle_error(request, client_address)


def allowed_hosts(host: str) -> frozenset[str]:
    """Host header names (lower case, IPv6 in brackets) that mean this server."""
    names = {"127.0.0.1", "localhost", "[::1]", host}
    if host in ("0.0.0.0", "::", ""):  # every address of the machine: its names and addresses too
        names |= {socket.gethostname(), socket.getfqdn()}
        try:
            names |= {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None)}
        except OSError:
            pass
    return frozenset((f"[{n}]" if ":" in n and not n.startswith("[") else n).lower() for n in names if n)


def make_server(*, db: Path, host: str = "127.0.0.1", port: int = 8765, log: Callable[[str], None] | None = None,
                idle_timeout: float = IDLE_TIMEOUT_S, request_deadline: float = REQUEST_DEADLINE_S,
                max_connections: int = MAX_CONNECTIONS) -> DashboardServer:
    """A bound, not yet serving, server (port 0: any free port; read it from .server_address)."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(f"cannot listen on {shown}: not an address of this machine ({e})",
                         hint="--host 127.0.0.1 (IPv4 loopback) or ::1 (IPv6 loopback)") from None
    server_class = type("DashboardServer", (DashboardServer,), {"address_family": family,
                                                                "request_deadline": request_deadline})
    try:
        server = server_class((host, port), _handler(Path(db), log, idle_timeout), log=log,
                              max_connections=max_connections)
    except OSError as e:
        ipv6 = " (IPv6 is off on this machine?)" if family == socket.AF_INET6 else ""
        raise UsageError(f"cannot listen on {shown} ({e.strerror or e}){ipv6}",
                         hint="pick another port with --port, or --port 0 for any free one") from e
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
