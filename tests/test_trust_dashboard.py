"""Issue 15 item 6: the dashboard on a malformed store answers 500 with a JSON error that the page
shows; idle connections are closed; `--host ::1` binds IPv6 (or says clearly why not). Read-only:
serving or exporting never writes a schema into an empty file."""
from __future__ import annotations

import json
import socket
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.dashboard import make_server
from edge_sdk.errors import UsageError
from edge_sdk.results.store import ResultsStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_results import manifest, run_json  # noqa: E402

BREAKAGES = {
    "bad JSON row": ("UPDATE measurements SET per_layer_ms = '{not json'", "column per_layer_ms is not a JSON list"),
    "zero median": ("UPDATE measurements SET latency_median_ms = 0", "latency_median_ms is 0.0, not a positive time"),
    "bad layer JSON": ("UPDATE package_layers SET inputs = '[1,'", "column inputs is not a JSON list"),
    "text median": ("UPDATE measurements SET latency_median_ms = 'fast'", "latency_median_ms is 'fast'"),
}


def broken_store(tmp_path: Path, sql: str) -> Path:
    db = tmp_path / "broken.sqlite"
    with ResultsStore(db) as s:
        s.record_run(run_json(), manifest(), device="kitchen-pi")
        s.record_run(run_json(variant="int8", median=4.0), manifest(variant="int8"), device="kitchen-pi")
    with sqlite3.connect(db) as c:
        c.execute(sql)
    return db


@contextmanager
def serving(db: Path, **kw):
    server = make_server(db=db, port=0, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    try:
        yield f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        assert e.headers["Content-Type"] == "application/json"
        return e.code, json.load(e)


@pytest.mark.parametrize("case", list(BREAKAGES))
def test_malformed_store_is_a_500_with_a_json_error(tmp_path, case):
    sql, says = BREAKAGES[case]
    db = broken_store(tmp_path, sql)
    with serving(db) as base:
        status, body = get(base + "/api/data")
        again, _ = get(base + "/api/data")  # the server lives on
    assert status == again == 500
    assert says in body["error"] and str(db) in body["error"], body


def test_corrupt_file_is_a_500_too(tmp_path):
    db = tmp_path / "garbage.sqlite"
    db.write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)
    with serving(tmp_path / "ok.sqlite") as base:  # served store replaced by garbage after start
        db.replace(tmp_path / "ok.sqlite")
        status, body = get(base + "/api/data")
    assert status == 500 and "not a readable results database" in body["error"]


def test_idle_connection_is_closed(tmp_path):
    db = tmp_path / "r.sqlite"
    ResultsStore(db).close()
    with serving(db, idle_timeout=0.5) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=20) as idle:
            status, _ = get(base + "/api/data")  # another client is served meanwhile
            idle.settimeout(20)
            t0 = time.monotonic()
            assert idle.recv(1) == b""  # the server hung up on the silent client
            waited = time.monotonic() - t0
    assert status == 200
    assert waited < 15  # closed by the idle timeout, long before our own 20 s socket timeout


def test_ipv6_loopback_binds(tmp_path):
    db = tmp_path / "r.sqlite"
    ResultsStore(db).close()
    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        with pytest.raises(UsageError, match=r"cannot listen on \[::1\]"):
            make_server(db=db, host="::1", port=0)
        return
    server = make_server(db=db, host="::1", port=0)
    try:
        assert server.address_family == socket.AF_INET6 and server.server_address[0] == "::1"
    finally:
        server.server_close()
    server = make_server(db=db, host="::1", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        status, body = get(f"http://[::1]:{server.server_address[1]}/api/data")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200 and body["latency"] == []


@pytest.mark.parametrize("host", ["nosuch.host.invalid", "::zz", "256.1.1.1"])
def test_unusable_host_is_a_clear_usage_error(tmp_path, host):
    with pytest.raises(UsageError, match="cannot listen on"):
        make_server(db=tmp_path / "r.sqlite", host=host, port=0)


def test_dashboard_export_never_writes_a_schema_into_an_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert cli_main(["dashboard", "--db", str(empty), "--export", str(tmp_path / "d.html")]) == 0
    assert empty.stat().st_size == 0 and (tmp_path / "d.html").stat().st_size > 1000
    with serving(empty) as base:
        status, body = get(base + "/api/data")
    assert status == 200 and body["latency"] == [] and empty.stat().st_size == 0


@pytest.fixture(scope="module")
def chromium_ok():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from cdp import chromium_binary

    if chromium_binary() is None:
        pytest.skip("needs chromium; tools/setup.sh installs it")


def test_page_shows_the_servers_error(chromium_ok, tmp_path):
    from cdp import Chromium

    db = broken_store(tmp_path, BREAKAGES["zero median"][0])
    with serving(db) as base, Chromium(tmp_path / "profile") as browser:
        assert browser.load(base + "/") == "error"
        shown = browser.evaluate("document.getElementById('charts').textContent")
    assert "HTTP 500" in shown and "latency_median_ms is 0.0, not a positive time" in shown, shown
