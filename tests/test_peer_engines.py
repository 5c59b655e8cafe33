"""The peer engines, one module each in edge_sdk/bench/peers/: the bench's rows come from them, the script
that runs them is package code (an installed wheel finds it), and what the engine's own Python loads (the
LCE venv, the aarch64 guest) imports only the standard library at its top, never edge_sdk."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import edge_sdk
from edge_sdk.bench import peers as P
from edge_sdk.bench.peers import time_engine
from edge_sdk.qemu.runner import peer_runner_files

PACKAGE = Path(edge_sdk.__file__).resolve().parent


def test_rows_come_from_the_engine_modules_in_order():
    assert list(P.ENGINE_MODULES) == ["litert", "onnxruntime", "lce", "ncnn"]
    assert all(name == m.ENGINE for name, m in P.ENGINE_MODULES.items())
    assert [(p.engine, p.variant) for p in P.PEERS] == [(e, row[0]) for e, m in P.ENGINE_MODULES.items()
                                                        for row in m.PEERS]
    assert sorted(time_engine.ENGINES) == sorted(P.ENGINE_MODULES)  # the script offers exactly these


def test_the_runner_is_package_code():
    for engine in P.ENGINE_MODULES:
        files = peer_runner_files(engine)
        assert all(f.is_file() and PACKAGE in f.resolve().parents for f in files), files
    assert peer_runner_files("litert")[0] == P.TIME_ENGINE


def test_what_runs_in_the_engines_python_imports_only_the_standard_library():
    for f in {f for e in P.ENGINE_MODULES for f in peer_runner_files(e)}:
        tree = ast.parse(f.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module}
        assert names - {"numpy"} <= set(sys.stdlib_module_names) | {"__future__"}, (f.name, names)
