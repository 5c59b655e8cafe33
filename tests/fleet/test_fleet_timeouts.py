"""Silent and failing devices in a fleet of real OpenSSH servers (the loopback fleet): a tarpit (a real
socket server that accepts and never speaks), a closed port, a wrong user and a wrong pinned host key.
defaults.connect_timeout / --connect-timeout bound the wait; each device's error says what happened,
in status as in deploy; the pool grows with the fleet (the tarpit counts how many connections it holds
at once)."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.fleet.config import parse_fleet
from edge_sdk.fleet.trust import fleet_status


class Tarpit:
    """Accepts every connection and never sends a byte; counts the connections open at once."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.peak = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.held = [c for c in self.held if _open(c)] + [conn]
                self.peak = max(self.peak, len(self.held))

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def _open(c: socket.socket) -> bool:
    """False once the client closed its end (EOF readable)."""
    c.setblocking(False)
    try:
        return c.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


@pytest.fixture
def tarpit():
    t = Tarpit()
    yield t
    t.close()


@pytest.fixture
def closed_port():
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: connection refused
    return port


def _mixed_fleet(loops, tmp_path: Path, tarpit: Tarpit, closed_port: int, timeout: float | None) -> Path:
    d1, d2 = loops["loop1"], loops["loop2"]
    lines = [f"defaults: {{key: {loops.client_key}, target: host"
             + (f", connect_timeout: {timeout}" if timeout else "") + "}", "devices:",
             f"  good: {{host: {d1.user}@{d1.ip}:{d1.port}}}",
             f"  mute: {{host: pi@127.0.0.1:{tarpit.port}}}",
             f"  gone: {{host: pi@127.0.0.1:{closed_port}}}",
             f"  stranger: {{host: nosuchuser@{d2.ip}:{d2.port}}}",
             f"  impostor: {{host: {d1.user}@{d2.ip}:{d2.port}, host_key: \"{d1.public_host_key()}\"}}", ""]
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines))
    return path


WHY = {"good": None, "mute": "timed out after {t} s waiting for the SSH banner", "gone": "connection refused",
       "stranger": "authentication failed for user 'nosuchuser'", "impostor": "host key CHANGED"}


def _check_rows(rows: dict[str, str | None], timeout: str) -> None:
    for name, why in WHY.items():
        if why is None:
            assert rows[name] is None, (name, rows[name])
        else:
            assert rows[name] and why.format(t=timeout) in rows[name] and f"device {name}" in rows[name], (name, rows)


def test_status_says_what_happened_and_the_fleet_file_bounds_the_wait(loopback_fleet, known_hosts_for, tmp_path,
                                                                       tarpit, closed_port, capsys):
    fleet_yaml = _mixed_fleet(loopback_fleet, tmp_path, tarpit, closed_port, timeout=1.5)
    kh = known_hosts_for(loopback_fleet)
    t0 = time.monotonic()
    code = cli_main(["fleet", "status", "--fleet", str(fleet_yaml), "--known-hosts", str(kh), "--json"])
    took = time.monotonic() - t0
    out = json.loads(capsys.readouterr().out)
    assert code == 8
    _check_rows({r["device"]: r["error"] for r in out}, "1.5")
    assert took < 9, took  # the tarpit cost its 1.5 s, not the 10 s default
    code = cli_main(["fleet", "status", "--fleet", str(fleet_yaml), "--known-hosts", str(kh), "--json",
                     "--device", "mute", "--connect-timeout", "0.5"])
    out = json.loads(capsys.readouterr().out)
    assert code == 8 and "timed out after 0.5 s waiting for the SSH banner" in out[0]["error"]


def test_a_bad_connect_timeout_is_named(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text("defaults:\n  connect_timeout: soon\ndevices:\n  a: 192.0.2.1\n")
    assert cli_main(["fleet", "status", "--fleet", str(path)]) == 3
    assert "fleet.yaml:2 defaults.connect_timeout: expected seconds" in capsys.readouterr().err
    path.write_text("defaults: {connect_timeout: 2}\ndevices:\n  a: 192.0.2.1\n")
    assert cli_main(["fleet", "status", "--fleet", str(path), "--connect-timeout", "0"]) == 2
    assert "--connect-timeout 0: expected seconds" in capsys.readouterr().err


def test_deploy_says_what_happened_too(loopback_fleet, known_hosts_for, tmp_path, tarpit, closed_port, v1, capsys):
    fleet_yaml = _mixed_fleet(loopback_fleet, tmp_path, tarpit, closed_port, timeout=1.5)
    kh = known_hosts_for(loopback_fleet)
    code = cli_main(["deploy", str(v1.path), "--fleet", str(fleet_yaml), "--known-hosts", str(kh), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 8
    _check_rows({r["device"]: r["error"] for r in out}, "1.5")
    assert "No existing session" not in json.dumps(out)
    assert [r["ok"] for r in out] == [True, False, False, False, False]


def test_the_pool_grows_with_the_fleet(tarpit):
    """300 silent devices: every one waits its connect timeout in a thread of its own (up to 128 at once),
    where a pool of 8 would hold at most 8 connections to the tarpit."""
    n = 300
    text = "defaults: {connect_timeout: 2}\ndevices:\n" + "".join(
        f"  mute{i}: pi@127.0.0.1:{tarpit.port}\n" for i in range(n))
    devices = parse_fleet(text).select()
    results = fleet_status(devices, known_hosts="/dev/null")
    assert len(results) == n and all(r.ok and not r.value.reachable for r in results)
    assert all("waiting for the SSH banner" in r.value.error for r in results)
    assert tarpit.peak >= 100, tarpit.peak
