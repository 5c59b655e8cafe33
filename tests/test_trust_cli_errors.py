"""Issue 15 item 7: clean errors with exit codes, never a traceback: `run --input` with a pickled or
malformed .npy or a decompression-bomb image, `-o` naming a folder (checked before the compile),
Ctrl-C during lowering, a corrupt store on `results list/export`; read-only commands never write a
schema into an empty file; written files honour the umask."""
from __future__ import annotations

import os
import signal
import sqlite3
import stat
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.results.store import ResultsStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_results import manifest, run_json  # noqa: E402
from test_trust_manifest import minimal_manifest  # noqa: E402


def run_cli(argv, capsys) -> tuple[int, str]:
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def png_claiming(width: int, height: int) -> bytes:
    """A valid PNG header for width x height 8-bit RGB, with one tiny IDAT: a decompression bomb's shape."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + \
        chunk(b"IEND", b"")


@pytest.mark.parametrize("kind", ["pickled", "garbage", "npz", "bomb", "truncated png"])
def test_run_input_errors_are_clean(host_package, tmp_path, capsys, kind):
    bad = tmp_path / ("in.npy" if kind in ("pickled", "garbage", "npz") else "in.png")
    if kind == "pickled":
        np.save(bad, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    elif kind == "garbage":
        bad.write_bytes(b"\x93NUMPY\x01\x00garbage that is not a header")
    elif kind == "npz":
        np.savez(tmp_path / "x.npz", a=np.zeros(3))
        (tmp_path / "x.npz").rename(bad)
    elif kind == "bomb":
        bad.write_bytes(png_claiming(60_000, 60_000))  # 3.6 G pixels from a 100-byte file
    else:
        bad.write_bytes(png_claiming(64, 64)[:40])
    code, err = run_cli(["run", str(host_package), "--input", str(bad), "--repeat", "1"], capsys)
    assert code == 2, err
    assert str(bad) in err
    if kind == "bomb":
        assert "decompression bomb" in err


def test_output_folder_is_refused_before_the_compile(tmp_path, capsys):
    out = tmp_path / "model.edgepkg"
    out.mkdir()
    code, err = run_cli(["compile", "mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "-o", str(out)], capsys)
    assert code == 2 and "is a folder" in err
    assert "lowering" not in err and "golden" not in err  # refused before the compile: nothing was built
    assert list(out.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_during_lowering_is_an_interrupt_not_a_compile_error(tmp_path):
    out = tmp_path / "m.edgepkg"
    p = subprocess.Popen([sys.executable, "-m", "edge_sdk", "compile", "mobilenet_v1", "--alpha", "0.25",
                          "--resolution", "64", "--classes", "10", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    while "lifted" not in seen and p.poll() is None:  # the last lowering step before TVM's build
        seen += p.stderr.readline()
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    err = seen + err
    assert p.returncode == 130, err[-2000:]
    assert "edge-sdk: interrupted" in err and "Traceback" not in err and "failed: \n" not in err
    assert not out.exists() and not list(tmp_path.glob(".*.part"))


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "r.sqlite"
    with ResultsStore(db) as s:
        s.record_run(run_json(), manifest(), device="kitchen-pi")
    return db


@pytest.mark.parametrize("damage", ["garbage", "bad json row", "zero median", "truncated"])
def test_corrupt_store_on_results_list_and_export(tmp_path, capsys, damage):
    db = _store(tmp_path)
    if damage == "garbage":
        db.write_bytes(b"SQLite format 3\0" + os.urandom(3000))
    elif damage == "truncated":
        db.write_bytes(db.read_bytes()[:1500])
    else:
        with sqlite3.connect(db) as c:
            c.execute("UPDATE measurements SET per_layer_ms = '[{'" if damage == "bad json row"
                      else "UPDATE measurements SET latency_median_ms = 0")
    for argv in (["results", "list", "--db", str(db)], ["results", "list", "--db", str(db), "--json"],
                 ["results", "export", "--db", str(db), "--json", str(tmp_path / "x.json"),
                  "--csv", str(tmp_path / "x.csv")]):
        code, err = run_cli(argv, capsys)
        assert code == 3, (argv, err)
        assert str(db) in err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.csv").exists()


def test_read_only_commands_never_write_a_schema(tmp_path, capsys):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert cli_main(["results", "list", "--db", str(empty)]) == 0
    assert "no runs recorded yet" in capsys.readouterr().out
    assert cli_main(["results", "export", "--db", str(empty), "--json", str(tmp_path / "e.json")]) == 0
    assert cli_main(["dashboard", "--db", str(empty), "--export", str(tmp_path / "e.html")]) == 0
    assert empty.stat().st_size == 0
    with sqlite3.connect(empty) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 0


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_written_files_honour_the_umask(tmp_path, mask):
    from edge_sdk.package import MEMBERS, write_package

    files = {}
    for name in MEMBERS:
        files[name] = tmp_path / name
        if name.endswith(".npy"):
            np.save(files[name], np.zeros((2, 3), np.float32))
        else:
            files[name].write_bytes(b"x" * 10)
    db = _store(tmp_path)
    old = os.umask(mask)
    try:
        pkg = write_package(tmp_path / "m.edgepkg", manifest=minimal_manifest(), files=files)
        with ResultsStore(db, read_only=True) as s:
            s.export_csv(tmp_path / "r.csv")
            s.export_json(tmp_path / "r.json")
    finally:
        os.umask(old)
    for f in (pkg, tmp_path / "r.csv", tmp_path / "r.json"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f
