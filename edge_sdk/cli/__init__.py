"""The edge-sdk command line: one module per command, add_X_parser (argparse only) -> drive_X (checks,
one call) -> library. common.py holds what commands share (model and device options, console, JSON).

`main(argv) -> int` so tests call it directly. Errors are EdgeError subclasses mapped to exit codes
(edge_sdk/errors.py). Library modules never import this package.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from edge_sdk import __version__
from edge_sdk.errors import EdgeError

# The command table, in `edge-sdk --help` order: each name is a module edge_sdk/cli/<name>.py with
# add_<name>_parser(sub). Importing the modules sets edge_sdk.cli.list, .compile, ... on this package,
# so this file must not use the builtins of those names.
COMMANDS: tuple[str, ...] = ("compile", "inspect", "run", "eval", "list", "bench", "deploy", "fleet", "demo",
                             "results", "dashboard", "tune", "keys")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-sdk", description="Compile, ship and compare image classifiers "
                                     "on Raspberry Pis (float32, int8, bitserial).")
    parser.add_argument("--version", action="version", version=f"edge-sdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"edge_sdk.cli.{name}")
        getattr(module, f"add_{name}_parser")(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.drive(args)
    except EdgeError as e:
        print(f"edge-sdk: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("edge-sdk: interrupted", file=sys.stderr)
        return 130
