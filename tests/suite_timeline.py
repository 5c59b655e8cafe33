"""Where the suite's time goes: each test's wall and CPU time on its worker, and its turns at the qemu lock.

Off unless EDGE_SDK_TEST_TIMELINE names a folder (tests/conftest.py loads this plugin):

    EDGE_SDK_TEST_TIMELINE=/tmp/tl .venv/bin/python -m pytest -q -n 2 --dist loadgroup
    .venv/bin/python tests/suite_timeline.py /tmp/tl          # the summary
    .venv/bin/python tests/suite_timeline.py /tmp/tl --durations tests/durations.json  # tests/xdist_units.py's order

Each worker (or the one process without xdist) appends a JSON line per test to FOLDER/tests-<worker>.jsonl:
its node id, wall start and end (setup, call and teardown: a module or session fixture's build is charged to
the first test that asks for it), and the CPU seconds of the worker process itself and of the children it
waited for (compiler subprocesses, qemu, the CLI) from getrusage. The qemu runner appends each turn at its one
work-directory lock (edge_sdk/qemu/workdir.py: asked, got, released) to FOLDER/lock.jsonl, from any
process the test started too (EDGE_SDK_LOCK_LOG is inherited), tagged with PYTEST_XDIST_WORKER.

A test whose wall time is well above its CPU time waited: for the lock (lock.jsonl says how long), for an
emulated Pi's sshd, a sleep or a timeout, or for the CPU the other worker and other processes were using.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

ENV = "EDGE_SDK_TEST_TIMELINE"
LOCK_LOG = "EDGE_SDK_LOCK_LOG"  # edge_sdk/qemu/runner.LOCK_LOG (not imported: the plugin loads before any test)


def _folder() -> Path | None:
    where = os.environ.get(ENV)
    return Path(where) if where else None


def _cpu() -> tuple[float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def pytest_configure(config) -> None:
    folder = _folder()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        os.environ[LOCK_LOG] = str(folder / "lock.jsonl")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = _folder()
    if folder is None:
        yield
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    start, (own0, kids0) = time.time(), _cpu()
    yield
    end, (own1, kids1) = time.time(), _cpu()
    line = {"test": item.nodeid, "worker": worker, "start": round(start, 3), "end": round(end, 3),
            "cpu_self": round(own1 - own0, 3), "cpu_children": round(kids1 - kids0, 3),
            "slow": item.get_closest_marker("slow") is not None, "qemu": item.get_closest_marker("qemu") is not None}
    with open(folder / f"tests-{worker}.jsonl", "a") as fh:
        fh.write(json.dumps(line) + "\n")


# -- the summary -----------------------------------------------------------------------------------------------
def _read(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def summary(folder: Path, top: int = 25) -> str:
    tests = [t for f in sorted(folder.glob("tests-*.jsonl")) for t in _read(f)]
    turns = _read(folder / "lock.jsonl")
    if not tests:
        return f"no tests-*.jsonl in {folder}"
    t0 = min(t["start"] for t in tests)
    t1 = max(t["end"] for t in tests)
    for t in tests:  # the lock waits and holds of the test's worker during the test
        mine = [u for u in turns if (u["worker"] or "main") == t["worker"]]  # "": no xdist
        t["lock_wait"] = sum(_overlap(u["asked"], u["got"], t["start"], t["end"]) for u in mine)
        t["lock_held"] = sum(_overlap(u["got"], u["released"], t["start"], t["end"]) for u in mine)
        t["wall"] = t["end"] - t["start"]
        t["cpu"] = t["cpu_self"] + t["cpu_children"]
    out = [f"{len(tests)} tests, {t1 - t0:.0f} s from the first test's start to the last one's end"]
    for w in sorted({t["worker"] for t in tests}):
        mine = sorted((t for t in tests if t["worker"] == w), key=lambda t: t["start"])
        busy = sum(t["wall"] for t in mine)
        cpu = sum(t["cpu"] for t in mine)
        gaps = sum(max(0.0, b["start"] - a["end"]) for a, b in zip(mine, mine[1:]))
        out.append(f"  {w}: {len(mine)} tests, {mine[0]['start'] - t0:.0f} .. {mine[-1]['end'] - t0:.0f} s, "
                   f"in tests {busy:.0f} s (CPU {cpu:.0f} s: self {sum(t['cpu_self'] for t in mine):.0f}, children "
                   f"{sum(t['cpu_children'] for t in mine):.0f}), between tests {gaps:.0f} s, waiting for the qemu "
                   f"lock {sum(t['lock_wait'] for t in mine):.0f} s, holding it {sum(t['lock_held'] for t in mine):.0f} s, "
                   f"idle at the end {t1 - mine[-1]['end']:.0f} s")
    units: dict[str, dict] = {}
    for t in tests:  # per file (a unit is often a file)
        u = units.setdefault(t["test"].split("::")[0], {"n": 0, "wall": 0.0, "cpu": 0.0, "lock_wait": 0.0,
                                                        "workers": set()})
        u["n"] += 1
        u["wall"] += t["wall"]
        u["cpu"] += t["cpu"]
        u["lock_wait"] += t["lock_wait"]
        u["workers"].add(t["worker"])
    out.append(f"\nfiles by wall (top {top}): wall s, CPU s, lock wait s, tests, workers")
    for name, u in sorted(units.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        out.append(f"  {u['wall']:7.1f} {u['cpu']:7.1f} {u['lock_wait']:6.1f} {u['n']:4d} "
                   f"{','.join(sorted(u['workers']))}  {name}")
    out.append(f"\ntests by wall (top {top}): wall s, CPU s, lock wait s, worker, start s")
    for t in sorted(tests, key=lambda t: -t["wall"])[:top]:
        out.append(f"  {t['wall']:7.1f} {t['cpu']:7.1f} {t['lock_wait']:6.1f} {t['worker']:>5} "
                   f"{t['start'] - t0:6.0f}  {t['test']}")
    out.append(f"\ntests by wall minus CPU (waits; top {top}): wall - CPU s, lock wait s, test")
    for t in sorted(tests, key=lambda t: -(t["wall"] - t["cpu"]))[:top]:
        out.append(f"  {t['wall'] - t['cpu']:7.1f} {t['lock_wait']:6.1f}  {t['test']}")
    return "\n".join(out)


def write_durations(folder: Path, out: Path) -> int:
    """{nodeid: wall seconds} of the timeline's tests, for tests/xdist_units.py's hand-out order."""
    tests = [t for f in sorted(folder.glob("tests-*.jsonl")) for t in _read(f)]
    walls = {t["test"]: round(t["end"] - t["start"], 2) for t in tests}
    out.write_text(json.dumps(walls, indent=0, sort_keys=True) + "\n")
    return len(tests)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--durations" in args:  # DIR --durations FILE: write the per-test durations instead of the summary
        i = args.index("--durations")
        print(f"{write_durations(Path(args[0]), Path(args[i + 1]))} tests -> {args[i + 1]}")
    else:
        print(summary(Path(args[0]), *(int(a) for a in args[1:2])))
