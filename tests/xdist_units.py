"""How the README's test command (`pytest -n 2 --dist loadgroup`) hands the suite to its two workers.

pytest-xdist 3.8's loadgroup tags a test of an xdist_group by rewriting the old `item._nodeid` string; pytest
9.2 keeps the id elsewhere (a structured NodeId), so the tag never reaches the scheduler and every test is a
unit of its own (pytest-dev/pytest-xdist#1386): a fixture built once per module or session was built once per
worker, the reduced demo (minutes of emulated Pi) twice. This plugin (tests/conftest.py loads it) replaces
the scheduler for --dist loadgroup:

- units: the tests of one xdist_group mark, or of the costly session fixtures (SHARED_SESSION), are one unit;
  the tests of a file that share a module- or class-scoped fixture (a compile, a calibration run) are one unit;
  any other test is a unit of its own;
- order: longest first, so the last units handed out are short and no worker idles at the end while the other
  finishes a long one. With tests/durations.json (each test's wall seconds from an earlier run's timeline,
  tests/suite_timeline.py), by each unit's measured seconds; without it, the units with more slow tests first
  (then more qemu tests), quick tests last, each in collection order.

No unit for the stand-in devices: each fleet gets its own random id, Unix users, free ports and random
subnets (edge_sdk/devices), so the device tests run on both workers (as they did in every CI run so far).

Only the workers collect (and know the fixtures), so each worker writes the units into the file the
controller named in its workerinput; the scheduler reads it once every worker has collected.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# session fixtures whose tests all run in one worker (one unit), so each is built once: the reduced demo
# runs the installed wheel's CLI (tests/conftest.py)
SHARED_SESSION = {"installed_wheel", "reduced_demo"}
# per-test wall seconds of an earlier full run (`python tests/suite_timeline.py DIR --durations FILE`); absent:
# hand out by slow-test counts
DURATIONS = Path(__file__).with_name("durations.json")
_KEY = "edge_sdk_units"  # the workerinput entry naming the units file
_DIR = pytest.StashKey[Path]()


def unit_of(item) -> str | None:
    """The unit an item shares with others, or None when it is a unit of its own."""
    groups = sorted(str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group"))
    if groups:
        return "group:" + "_".join(groups)
    names = set(getattr(item, "fixturenames", ()))
    if SHARED_SESSION & names:
        return "session:" + "+".join(sorted(SHARED_SESSION))
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d and d[-1].scope in ("module", "class", "package") for d in defs):
        return "file:" + item.nodeid.split("::")[0]
    return None


def durations(path: Path = DURATIONS) -> dict[str, float]:
    """{nodeid: seconds} measured in an earlier run (tests/suite_timeline.py --durations), or {}."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def _costs(items: list, units: dict[str, str], measured: dict[str, float]) -> dict[str, float]:
    """Each unit's expected seconds: its tests' measured wall time; a test not measured counts as the median
    measured test of its kind (slow or quick)."""
    def is_slow(it) -> bool:
        return it.get_closest_marker("slow") is not None

    known = {kind: sorted(measured[it.nodeid] for it in items if it.nodeid in measured and is_slow(it) == kind)
             for kind in (True, False)}
    guess = {kind: v[len(v) // 2] if v else (10.0 if kind else 0.1) for kind, v in known.items()}
    cost: dict[str, float] = {}
    for it in items:
        u = units[it.nodeid]
        cost[u] = cost.get(u, 0.0) + measured.get(it.nodeid, guess[is_slow(it)])
    return cost


def order(items: list, measured: dict[str, float] | None = None) -> dict[str, str]:
    """Sort items into hand-out order (each unit's tests together, in collection order) and return
    {nodeid: unit} for the tests that share a unit. With measured durations (tests/durations.json), the
    longest units first; without, the units with more slow tests (then more qemu tests) first."""
    units = {it.nodeid: unit_of(it) or it.nodeid for it in items}
    first: dict[str, int] = {}
    slow: dict[str, list[float]] = {}  # unit: [slow tests, qemu tests] (qemu tests are slow too: conftest.py)
    for i, it in enumerate(items):
        u = units[it.nodeid]
        first.setdefault(u, i)
        n = slow.setdefault(u, [0, 0])
        n[0] += it.get_closest_marker("slow") is not None
        n[1] += it.get_closest_marker("qemu") is not None
    if measured:
        slow = {u: [c] for u, c in _costs(items, units, measured).items()}
    index = {it.nodeid: i for i, it in enumerate(items)}
    items.sort(key=lambda it: (*(-k for k in slow[units[it.nodeid]]), first[units[it.nodeid]], index[it.nodeid]))
    return {n: u for n, u in units.items() if u != n}


def write_units(config, items: list) -> None:
    """On a worker of --dist loadgroup: order the items and write the units for the controller."""
    where = getattr(config, "workerinput", {}).get(_KEY)
    if where is None:
        return
    units = order(items, durations())
    tmp = Path(f"{where}.{config.workerinput['workerid']}")
    tmp.write_text(json.dumps(units))
    os.replace(tmp, where)  # every worker writes the same units


def _units_file(config) -> Path:
    if _DIR not in config.stash:
        config.stash[_DIR] = Path(tempfile.mkdtemp(prefix="edge-sdk-units-"))
    return config.stash[_DIR] / "units.json"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    if node.config.getvalue("dist") == "loadgroup":
        node.workerinput[_KEY] = str(_units_file(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """LoadScopeScheduling over the workers' units, in the workers' order (not re-sorted by size)."""

        units: dict[str, str] = {}

        def schedule(self) -> None:
            if self.collection is None:
                path = _units_file(self.config)
                self.units = json.loads(path.read_text()) if path.exists() else {}
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return self.units.get(nodeid, nodeid)

    config.option.loadscopereorder = False  # keep the workers' order: longest units first
    return UnitScheduling(config, log)


def pytest_unconfigure(config) -> None:
    if _DIR in config.stash:
        shutil.rmtree(config.stash[_DIR], ignore_errors=True)
