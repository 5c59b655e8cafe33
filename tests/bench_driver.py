"""What the bench tests share (tests/test_bench.py, test_bench_file_peers.py, test_bench_emulate_threads.py):
`edge-sdk bench` driven through the CLI module's own parser and driver, and its JSON. Their `isolated`
fixture (bench packages and peer models in the test's tmp_path) is in tests/conftest.py."""
from __future__ import annotations

import argparse
import json

from edge_sdk.cli import bench as CB


def drive_bench(argv: list[str]) -> int:
    """`edge-sdk bench ARGV` (ARGV without the command's name) -> its exit code."""
    parser = argparse.ArgumentParser()
    CB.add_bench_parser(parser.add_subparsers())
    return CB.drive_bench(parser.parse_args(["bench", *argv]))


def bench_json(argv: list[str], capsys) -> tuple[int, dict]:
    """(exit code, the JSON it printed) of `edge-sdk bench ARGV`; ARGV asks for --json."""
    code = drive_bench(argv)
    return code, json.loads(capsys.readouterr().out)
