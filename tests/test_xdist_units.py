"""tests/xdist_units.py's hand-out order: by slow-test counts, or by measured durations when there are some."""
from __future__ import annotations

import json

import suite_timeline
import xdist_units


class Item:  # what order() reads of a pytest item
    def __init__(self, nodeid: str, slow: bool = False, group: str | None = None):
        self.nodeid, self._slow, self._group, self.fixturenames = nodeid, slow, group, ()

    def iter_markers(self, name):
        return [type("M", (), {"args": (self._group,), "kwargs": {}})()] if name == "xdist_group" and self._group else []

    def get_closest_marker(self, name):
        return object() if name == "slow" and self._slow else None


def _ids(items):
    return [it.nodeid for it in items]


def test_without_durations_units_with_more_slow_tests_go_first_and_quick_tests_last():
    items = [Item("a::q"), Item("b::s1", slow=True), Item("c::g1", True, "g"), Item("c::g2", True, "g")]
    units = xdist_units.order(items)
    assert _ids(items) == ["c::g1", "c::g2", "b::s1", "a::q"]
    assert units == {"c::g1": "group:g", "c::g2": "group:g"}


def test_measured_durations_put_the_longest_unit_first_and_guess_the_unmeasured(tmp_path):
    items = [Item("a::q"), Item("b::long", slow=True), Item("c::g1", True, "g"), Item("c::g2", True, "g"),
             Item("d::new", slow=True)]
    measured = {"a::q": 0.2, "b::long": 300.0, "c::g1": 20.0, "c::g2": 30.0}
    xdist_units.order(items, measured)
    # b 300 s, then the group 50 s, then d (not measured: the median measured slow test, 30 s), then a
    assert _ids(items) == ["b::long", "c::g1", "c::g2", "d::new", "a::q"]


def test_a_timeline_writes_the_durations_the_order_reads(tmp_path):
    line = {"test": "b::long", "worker": "gw0", "start": 10.0, "end": 310.5, "cpu_self": 1, "cpu_children": 2,
            "slow": True, "qemu": False}
    (tmp_path / "tests-gw0.jsonl").write_text(json.dumps(line) + "\n")
    out = tmp_path / "durations.json"
    assert suite_timeline.write_durations(tmp_path, out) == 1
    assert xdist_units.durations(out) == {"b::long": 300.5}
    assert xdist_units.durations(tmp_path / "absent.json") == {}
    assert "1 tests" in suite_timeline.summary(tmp_path)
