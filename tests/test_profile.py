"""Per-layer profiling: edge-runner --profile, the manifest's per-layer kernels, conv vs glue time.

Times are never compared with a speed; what is checked: every layer the lowering maps to kernels
gets a positive time, the parts add up (conv + glue = ms; layers sum to about the profiled run),
glue time exists where glue kernels exist (unfused bitserial), and the joins themselves
(kernel_map.assign_kernels, profile.layer_times) on hand-made inputs.
"""
from __future__ import annotations

import pytest

from edge_sdk.compiler.kernel_map import assign_kernels
from edge_sdk.results import normalize_per_layer
from edge_sdk.run import run_package
from edge_sdk.runtime.profile import format_table, layer_times


def _check_layers(res, manifest_layers):
    prof = res.layer_profile
    mapped = [r["name"] for r in manifest_layers if r.get("kernels")]
    assert [r["name"] for r in prof.layers] == mapped
    for r in prof.layers:
        assert r["ms"] > 0, r
        assert r["conv_ms"] >= 0 and r["glue_ms"] >= 0
        assert r["conv_ms"] + r["glue_ms"] == pytest.approx(r["ms"])
    summed = sum(r["ms"] for r in prof.layers)
    kernel_ms = summed + prof.other_ms  # every timed call, owned or not
    # The layers own most of the timed kernel time (a join dropping sites, or dividing by the runs twice,
    # breaks this). The run itself also pays the timing hook once per call: ~0.6 us on the Xeon, so a tiny
    # net of 500 calls a run (unfused w1a2 at 32x32) spends ~60 % of its profiled run in the hook. The
    # factor against the run is therefore loose, not a speed.
    assert summed >= 0.3 * kernel_ms, (summed, prof.other_ms)
    assert 0.1 * prof.run_ms <= kernel_ms <= 1.2 * prof.run_ms, (kernel_ms, prof.run_ms)
    return prof


def _manifest(pkg):
    from edge_sdk.package import read_manifest

    return read_manifest(pkg)


# ---- host, float32 ---------------------------------------------------------------------------

def test_float_host_profile_covers_every_layer(host_package):
    m = _manifest(host_package)
    assert all(r.get("kernels") for r in m["layers"]), [r["name"] for r in m["layers"] if not r.get("kernels")]
    res = run_package(host_package, repeat=5, profile=True)
    assert res.golden_ok
    prof = _check_layers(res, m["layers"])
    names = {k["kernel"] for k in prof.kernels}
    for r in m["layers"]:  # every layer's main kernel was seen by the runner under its symbol
        assert {k["name"] for k in r["kernels"] if k["role"] == "main"} <= names
    convs = [r for r in prof.layers if "conv" in r["op"]]
    assert convs and all(r["conv_ms"] > r["glue_ms"] for r in convs)  # fused epilogues: a small share
    assert [r for r in prof.layers if r["op"] == "softmax"][0]["conv_ms"] == 0
    out = res.to_json()
    assert [r["name"] for r in normalize_per_layer(out["per_layer_ms"])] == [r["name"] for r in prof.layers]
    assert {"conv_ms", "glue_ms"} <= set(out["per_layer_ms"][0])
    table = str(res)
    assert "GFLOP/s" in table and "pw13" in table


def test_without_profile_nothing_extra(host_package):
    res = run_package(host_package, repeat=2)
    assert res.layer_profile is None and "per_layer_ms" not in res.to_json()


def test_cli_run_profile_json(host_package, capsys):
    import json

    from edge_sdk.cli import main

    assert main(["run", str(host_package), "--repeat", "3", "--profile", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["per_layer_ms"]) == len(_manifest(host_package)["layers"])
    assert all(r["ms"] > 0 for r in out["per_layer_ms"])


# ---- host, unfused bitserial -----------------------------------------------------------------

@pytest.fixture(scope="module")
def unfused_package(tmp_path_factory):
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    model = build_zoo_model("resnet18", alpha=0.25, resolution=32, classes=10, seed=5)
    out = tmp_path_factory.mktemp("unfused") / "r18_w1a2_unfused.edgepkg"
    compile_model(model, variant=get_variant("w1a2-unfused"), target=get_target("host"), out=out)
    return out


def test_unfused_bitserial_glue_is_measured(unfused_package):
    m = _manifest(unfused_package)
    res = run_package(unfused_package, repeat=5, profile=True)
    assert res.golden_ok
    prof = _check_layers(res, m["layers"])
    by_name = {r["name"]: r for r in prof.layers}
    binary = [r for r in m["layers"] if r["op"] == "bitserial_conv2d"]
    assert binary and all(r["name"] in by_name for r in binary)
    with_glue = [r for r in binary if any(k["role"] == "glue" for k in r["kernels"])]
    assert len(with_glue) >= len(binary) // 2  # each block's glue chain follows one of its convs
    for r in binary:
        t = by_name[r["name"]]
        assert t["conv_ms"] > 0
        assert (t["glue_ms"] > 0) == (r in with_glue), (r["name"], t)


# ---- pi3 under qemu ---------------------------------------------------------------------------

@pytest.mark.qemu
def test_pi3_profile_under_qemu(pi3_package):
    res = run_package(pi3_package, repeat=2, warmup=0, profile=True)
    assert res.emulated and res.golden_ok
    _check_layers(res, _manifest(pi3_package)["layers"])
    assert "emulated" in str(res)


# ---- the joins on hand-made inputs -----------------------------------------------------------

ROWS = [{"name": "c1", "op": "conv2d", "flops": 1000, "output": [1, 2, 2, 5], "epilogue": ["add"]},
        {"name": "b1", "op": "bitserial_conv2d", "flops": 800, "output": [1, 2, 2, 4],
         "glue": {"mode": "fused", "share_est": 0.25}},
        {"name": "b2", "op": "bitserial_conv2d", "flops": 800, "output": [1, 2, 2, 4],
         "glue": {"mode": "unfused", "share_est": 0.3}},
        {"name": "lv9", "op": "astype", "flops": 16, "output": [1, 2, 2, 4]},
        {"name": "sm", "op": "softmax", "flops": 50, "output": [1, 10]}]


def test_assign_kernels_shared_kernels_glue_and_op_names():
    sites = [{"name": "transpose", "call": 0, "var": "lv0"},  # before any layer: charged to the first
             {"name": "edge_conv_0", "call": 0, "var": "lv1", "layer": "c1"},
             {"name": "edge_bitserial_conv_0", "call": 0, "var": "b1_var"},
             {"name": "edge_bitserial_conv_0", "call": 1, "var": "b2_var"},  # same kernel, second layer
             {"name": "fused_cast_multiply_add", "call": 0, "var": "lv5"},
             {"name": "softmax1", "call": 0, "var": "gv"}]
    rows = assign_kernels(ROWS, sites, var_to_layer={"b1_var": "b1", "b2_var": "b2"})
    k = {r["name"]: r.get("kernels") for r in rows}
    assert k["c1"] == [{"name": "edge_conv_0", "call": 0, "role": "main", "glue_share_est": 0.02},
                       {"name": "transpose", "call": 0, "role": "glue"}]
    assert k["b1"] == [{"name": "edge_bitserial_conv_0", "call": 0, "role": "main", "glue_share_est": 0.25}]
    assert k["b2"] == [{"name": "edge_bitserial_conv_0", "call": 1, "role": "main", "glue_share_est": 0.0},
                       {"name": "fused_cast_multiply_add", "call": 0, "role": "glue"}]
    assert k["lv9"] is None and k["sm"] == [{"name": "softmax1", "call": 0, "role": "main"}]
    assert "kernels" not in ROWS[0]  # the input rows are left alone


def test_layer_times_splits_conv_and_glue():
    rows = assign_kernels(ROWS, [{"name": "edge_conv_0", "call": 0, "var": "a", "layer": "c1"},
                                 {"name": "k", "call": 0, "var": "b", "layer": "b1"},
                                 {"name": "k", "call": 1, "var": "c", "layer": "b2"},
                                 {"name": "glue_chain", "call": 0, "var": "d"},
                                 {"name": "softmax", "call": 0, "var": "e"}])
    profile = {"runs": 2, "median_run_ms": 5.0,
               "kernels": [{"kernel": "edge_conv_0", "calls": 2, "total_ms": 2.0, "mean_ms": 1.0},
                           {"kernel": "k", "calls": 4, "total_ms": 4.0, "mean_ms": 1.0},
                           {"kernel": "glue_chain", "calls": 2, "total_ms": 1.0, "mean_ms": 0.5},
                           {"kernel": "vm.builtin.alloc_tensor", "calls": 20, "total_ms": 0.4, "mean_ms": 0.02}],
               "sites": [{"kernel": "edge_conv_0", "call": 0, "calls": 2, "total_ms": 2.0, "mean_ms": 1.0},
                         {"kernel": "k", "call": 0, "calls": 2, "total_ms": 1.2, "mean_ms": 0.6},
                         {"kernel": "k", "call": 1, "calls": 2, "total_ms": 2.8, "mean_ms": 1.4},
                         {"kernel": "glue_chain", "call": 0, "calls": 2, "total_ms": 1.0, "mean_ms": 0.5}]}
    prof = layer_times(rows, profile)
    t = {r["name"]: r for r in prof.layers}
    assert t["c1"]["conv_ms"] == pytest.approx(0.98) and t["c1"]["glue_ms"] == pytest.approx(0.02)
    assert t["b1"]["conv_ms"] == pytest.approx(0.45) and t["b1"]["glue_ms"] == pytest.approx(0.15)
    assert t["b2"]["conv_ms"] == pytest.approx(1.4) and t["b2"]["glue_ms"] == pytest.approx(0.5)
    assert t["sm"]["ms"] == 0 and t["sm"]["conv_ms"] == 0  # never called: 0, not an error
    assert prof.other_ms == pytest.approx(0.2)  # the builtins, per inference
    assert "b2" in format_table(prof, peak_gflops=10.0)
