"""Per-layer modelled Pi ms (timing/per_layer.py): the timing model's price of each layer's functions.

What is checked (no speed): `edge-sdk run PKG --profile --json` of a pi3 package under qemu carries
per_layer_modelled_ms whose rows sum to the whole-model modelled ms (within 3 %, where the issue allows;
the rest is kept as named rows, never dropped), named by the model file's layer names exactly as the
host-style profile of the same run names them, each row's conv + glue = its ms; model.so code no layer
lists stays small (the join of functions to layers works). The join's arithmetic on hand-made figures:
a kernel shared by two layers, TVM's body / wrapper names, and the N-thread span.
"""
from __future__ import annotations

import json

import pytest

from edge_sdk.runtime.profile import OUTSIDE
from edge_sdk.timing import per_layer


@pytest.mark.qemu
def test_run_profile_json_carries_per_layer_modelled_ms(pi3_package, capsys):
    from edge_sdk.cli import main
    from edge_sdk.package import read_manifest

    assert main(["run", str(pi3_package), "--profile", "--repeat", "1", "--warmup", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows, total = doc["per_layer_modelled_ms"], doc["modelled_ms"]
    assert "modelled Pi 3 ms" in doc["per_layer_modelled_is"] and "QEMU wall" in doc["per_layer_ms_is"]
    assert sum(r["ms"] for r in rows) == pytest.approx(total, rel=0.03)
    layers = [r for r in rows if r["op"] != OUTSIDE]
    manifest = read_manifest(pi3_package)["layers"]
    assert [r["name"] for r in layers] == [r["name"] for r in manifest if r.get("kernels")]
    assert [r["name"] for r in layers] == [r["name"] for r in doc["per_layer_ms"]]  # the host profile's names
    for r in rows:
        assert r["ms"] >= 0 and r["conv_ms"] + r["glue_ms"] == pytest.approx(r["ms"], abs=2e-6), r
    convs = [r for r in layers if any(s in r["op"] for s in ("conv", "dense"))]
    assert convs and all(r["conv_ms"] > 0 for r in convs)
    rest = {r["name"]: r["ms"] for r in rows if r["op"] == OUTSIDE}
    assert rest.get(per_layer.RUNTIME, 0) > 0  # the VM's calls and allocations: a named row
    assert rest.get(per_layer.MODEL_OTHER, 0) < 0.03 * total, rest  # the kernels' code is all joined to layers


LAYERS = [{"name": "c1", "op": "conv2d", "kernels": [{"name": "k_conv", "call": 0, "role": "main",
                                                       "glue_share_est": 0.25}]},
          {"name": "c2", "op": "conv2d", "kernels": [{"name": "k_conv", "call": 1, "role": "main",
                                                       "glue_share_est": 0.25},
                                                      {"name": "k_pack", "call": 0, "role": "glue"}]},
          {"name": "lv", "op": "reshape"},  # no kernels: no row (as the host profile)
          {"name": "sm", "op": "softmax", "kernels": [{"name": "softmax", "call": 0, "role": "main"}]}]


def _figures(threads: int, split: dict, per_thread: dict) -> dict:
    fns = [{"file": "model.so", "function": "k_conv_compute_", "cycles": 6000.0},
           {"file": "model.so", "function": "k_conv", "cycles": 200.0},
           {"file": "model.so", "function": "__tvm_ffi_k_pack", "cycles": 100.0},
           {"file": "model.so", "function": "softmax_compute_", "cycles": 300.0},
           {"file": "model.so", "function": "__tvm_main__", "cycles": 50.0},
           {"file": "libtvm_runtime.so", "function": "TVMBackendAllocWorkspace", "cycles": 400.0},
           {"file": "libc.so.6", "function": "memcpy", "cycles": 150.0}]
    listed = sum(f["cycles"] for f in fns)
    work = sum(t["cycles"] for t in per_thread.values())
    total = work if threads == 1 else split["fork_join"] + split["parallel_wait"] + work / threads
    return {"functions": fns, "clock_ghz": 1.0, "threads": threads, "modelled_cycles": total,
            "cycles_split": split, "per_thread": per_thread, "listed": listed}


def test_layer_split_shares_kernels_and_keeps_the_rest_named():
    fig = _figures(1, {}, {"0": {"cycles": 7200.0 + 800.0}})
    rows = {r["name"]: r for r in per_layer.layer_split(fig, LAYERS)}
    ms = 1e-6  # one cycle at 1 GHz, in ms
    assert list(rows)[:3] == ["c1", "c2", "sm"]
    assert rows["c1"]["ms"] == pytest.approx(3100 * ms) and rows["c1"]["conv_ms"] == pytest.approx(0.75 * 3100 * ms)
    assert rows["c2"]["ms"] == pytest.approx((3100 + 100) * ms) and rows["c2"]["glue_ms"] == pytest.approx(
        (0.25 * 3100 + 100) * ms)
    assert rows[per_layer.RUNTIME]["ms"] == pytest.approx(400 * ms)
    assert rows[per_layer.MODEL_OTHER]["ms"] == pytest.approx(50 * ms)
    assert rows[per_layer.LIBRARIES]["ms"] == pytest.approx(150 * ms)
    assert rows[per_layer.BELOW]["ms"] == pytest.approx(800 * ms)  # priced blocks beyond the function table
    assert sum(r["ms"] for r in rows.values()) == pytest.approx(fig["modelled_cycles"] * ms)


def test_layer_split_at_four_threads_scales_the_work_to_the_span():
    per_thread = {str(v): {"cycles": 7200.0 / 4} for v in range(4)}
    fig = _figures(4, {"fork_join": 300.0, "parallel_wait": 500.0}, per_thread)
    rows = {r["name"]: r for r in per_layer.layer_split(fig, LAYERS)}
    assert rows[per_layer.PARALLEL]["ms"] == pytest.approx(800e-6)
    assert sum(r["ms"] for r in rows.values()) == pytest.approx(fig["modelled_cycles"] * 1e-6)
    assert rows["c1"]["ms"] == pytest.approx(3100e-6 / 4)


def test_layer_split_joins_the_int8_tables_indexed_kernels():
    """The int8 path's rows carry no kernels: row "i:<tensor>" is kernel "<kind>_i" (compiler/int8/backend.py)."""
    layers = [{"name": "0:conv1_relu6", "op": "conv2d"}, {"name": "1:avgpool", "op": "mean"},
              {"name": "2:fc", "op": "dense"}]
    fns = [{"file": "model.so", "function": "conv_2d_0_compute_", "cycles": 900.0},
           {"file": "model.so", "function": "__tvm_ffi_conv_2d_0", "cycles": 10.0},
           {"file": "model.so", "function": "mean_1_compute_", "cycles": 40.0},
           {"file": "libtvm_runtime.so", "function": "TVMBackendAllocWorkspace", "cycles": 50.0}]
    fig = {"functions": fns, "clock_ghz": 1.0, "threads": 1, "modelled_cycles": 1000.0, "cycles_split": {},
           "per_thread": {"0": {"cycles": 1000.0}}}
    rows = {r["name"]: r for r in per_layer.layer_split(fig, layers)}
    assert rows["0:conv1_relu6"]["ms"] == pytest.approx(910e-6) and rows["0:conv1_relu6"]["conv_ms"] == pytest.approx(910e-6)
    assert rows["1:avgpool"]["glue_ms"] == pytest.approx(40e-6)
    assert "2:fc" not in rows  # no kernel of its index ran: no row, as for a row without kernels
    assert sum(r["ms"] for r in rows.values()) == pytest.approx(1000e-6)
