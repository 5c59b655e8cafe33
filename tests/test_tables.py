"""The two tables own their facts (issue 11 item 3): help texts, tune's variants, bench's peer families and
emulation's CPU facts are read from variants.py and targets.py, not restated by their consumers."""
from __future__ import annotations

import re

import pytest

from edge_sdk import targets, variants
from edge_sdk.cli import main
from edge_sdk.errors import UsageError


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "-h"])
    assert e.value.code == 0
    return re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))  # argparse wraps at hyphens


def test_help_texts_list_the_tables_rows(capsys):
    compile_help = _help(capsys, "compile")
    assert all(n in compile_help for n in variants.names()), compile_help
    assert all(n in compile_help for n in variants.CALIBRATED_VARIANTS + variants.TUNABLE_VARIANTS)
    tune_help = _help(capsys, "tune")
    assert all(n in tune_help for n in variants.TUNABLE_VARIANTS), tune_help


def test_tune_refuses_a_variant_the_table_does_not_mark_tunable(capsys):
    other = next(n for n, v in variants.VARIANTS.items() if not v.tunable and v.available)
    assert main(["tune", "mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--variant", other]) == 2
    err = capsys.readouterr().err
    assert f"--variant {other}" in err and all(n in err for n in variants.TUNABLE_VARIANTS), err


def test_every_peer_family_a_variant_compares_with_has_peers():
    from edge_sdk.bench.peers import PEERS

    families = {p.family for p in PEERS}
    for v in variants.VARIANTS.values():
        assert v.peer_families, v.name
        assert set(v.peer_families) <= families, (v.name, v.peer_families, families)
    assert variants.VARIANTS[variants.BASELINE].family == "float"
    assert all(variants.VARIANTS[n].family == "bitserial" for n in variants.LCE_VARIANTS)


def test_emulation_facts_come_from_the_target_rows():
    from edge_sdk.qemu import runner as emulate

    rows = [targets.get_target(n) for n in targets.TARGET_NAMES if n != "host"]
    emulated = [t for t in rows if t.emulate_cpu]
    assert emulated
    for t in emulated:
        assert t.qemu_cpu() == t.emulate_cpu
        if t.caches is not None:
            assert emulate.CACHES[t.emulate_cpu] is next(r.caches for r in emulated if r.emulate_cpu == t.emulate_cpu)
        if t.cpuinfo is not None:
            assert emulate.CPUINFO[t.emulate_cpu] == next(r.cpuinfo for r in emulated
                                                          if r.emulate_cpu == t.emulate_cpu and r.cpuinfo)
    with pytest.raises(UsageError, match="no emulation CPU") as e:
        targets.get_target("host").qemu_cpu()
    assert all(t.name in e.value.hint for t in emulated)


def test_stand_in_targets_name_stand_in_devices_that_exist():
    from edge_sdk.devices import stand_in_module

    stand_ins = targets.stand_in_targets()
    assert {t.name for t in stand_ins} >= {"host"} and any(t.emulate_cpu for t in stand_ins)
    for t in stand_ins:  # the demo starts edge_sdk/devices/<stand_in>.py's fleet class for each
        mod = stand_in_module(t.stand_in)
        fleets = [c for c in vars(mod).values() if isinstance(c, type) and c.__name__.endswith("Fleet")
                  and c.__module__ == mod.__name__ and callable(getattr(c, "start", None))]
        assert fleets, t.stand_in
