"""The dashboard server against hostile clients, over raw sockets to the real server (make_server +
serve_forever, as `edge-sdk dashboard` runs it): Host values that are not its own address get 421 (DNS
rebinding), a client dribbling header lines is cut at the whole-request deadline, connections over the
cap get 503, and a client reset is no traceback."""
from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from edge_sdk.dashboard import make_server
from edge_sdk.results.store import ResultsStore


@contextmanager
def serving(tmp_path: Path, **kw):
    db = tmp_path / "results.sqlite"
    ResultsStore(db).close()
    server = make_server(db=db, port=0, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[0], server.server_address[1], db
    finally:
        server.shutdown()
        server.server_close()


def request(host: str, port: int, header_host: str | None, path: str = "/api/data") -> tuple[int, bytes]:
    head = f"GET {path} HTTP/1.1\r\n" + (f"Host: {header_host}\r\n" if header_host is not None else "")
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall((head + "Connection: close\r\n\r\n").encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def test_only_the_servers_own_host_names_are_answered(tmp_path):
    with serving(tmp_path) as (host, port, db):
        for ok in ("127.0.0.1", f"127.0.0.1:{port}", "localhost", f"LocalHost:{port}", f"[::1]:{port}", "[::1]"):
            status, body = request(host, port, ok)
            assert status == 200, (ok, body[:200])
        for bad in ("attacker.example", f"attacker.example:{port}", f"127.0.0.1.attacker.example:{port}",
                    f"127.0.0.1:{port + 1}", "localhost:80", "", None, "[::1", f"127.0.0.1:{port}@evil"):
            status, body = request(host, port, bad)
            assert status == 421, (bad, body[:200])
            assert str(db).encode() not in body and b"latency" not in body
        assert request(host, port, "evil.example", "/")[0] == 421  # the page too, not only the data


def test_the_host_given_is_answered_too(tmp_path):
    with serving(tmp_path, host="127.0.0.2") as (host, port, _):
        assert request(host, port, f"127.0.0.2:{port}")[0] == 200
        assert request(host, port, "localhost")[0] == 200
        assert request(host, port, "127.0.0.3")[0] == 421


def _hung_up(s: socket.socket, line: bytes) -> bool:
    """Send one more header line; True once the server has shut the connection."""
    try:
        s.sendall(line)
        s.setblocking(False)
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # EPIPE / ECONNRESET: shut by the server
        return True
    finally:
        s.setblocking(True)


def test_a_client_dribbling_header_lines_is_cut_at_the_request_deadline(tmp_path):
    """Each line arrives well inside the per-read idle timeout; only a deadline on the whole request ends it."""
    with serving(tmp_path, idle_timeout=3.0, request_deadline=2.0) as (host, port, _), \
            socket.create_connection((host, port), timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /api/data HTTP/1.1\r\n")
        cut_at = None
        for i in range(40):  # 20 s of dribbling, if nobody stops it
            time.sleep(0.5)
            if _hung_up(s, f"X-Drip-{i}: {i}\r\n".encode()):
                cut_at = time.monotonic() - t0
                break
    assert cut_at is not None, "the dribbling client held the connection for 20 s"
    assert cut_at < 6.0, cut_at  # deadline 2 s (+ the time to notice), far from the 20 s it would take


def test_connections_over_the_cap_get_503_and_slots_come_back(tmp_path):
    with serving(tmp_path, max_connections=3, idle_timeout=20.0) as (host, port, _):
        idle = [socket.create_connection((host, port), timeout=10) for _ in range(3)]
        time.sleep(0.3)
        with socket.create_connection((host, port), timeout=10) as extra:
            extra.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = extra.recv(200)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        for s in idle:
            s.close()
        deadline = time.monotonic() + 10
        while True:
            status = request(host, port, "127.0.0.1")[0]
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 200


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends RST
    sock.close()


def test_client_resets_print_no_traceback(tmp_path, capfd):
    lines = []
    with serving(tmp_path, log=lines.append) as (host, port, _):
        for i in range(5):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(b"GET /api/data HTTP/1.1\r\nHost: 127.0.0.1\r\n" if i % 2 else b"GET /api/da")
            time.sleep(0.1)
            _reset(s)
        s = socket.create_connection((host, port), timeout=10)  # reset while the answer is being written
        s.sendall(b"GET /api/data HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 50)
        _reset(s)
        time.sleep(0.5)
        assert request(host, port, "127.0.0.1")[0] == 200  # still serving
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err

