"""Binarized ResNet18 compiled end to end vs the plain-numpy network reference (exact codes, head 1e-4)."""
import json
import shutil

import numpy as np
import pytest

from edge_sdk.errors import ModelError
from edge_sdk.models.binarized import binarize, binarized_resnet18, golden_input
from edge_sdk.quant.bitserial_net_ref import run_reference
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial.backend import GOLDEN_TOL, compile_binarized  # noqa: E402

SMALL = dict(alpha=0.25, resolution=32, classes=10, seed=5)


def _net(ab, wb, **kw):
    """The integer stem unless a test asks otherwise (the w1a2 variant's; w1a2-float-stem's float32 has its own tests)."""
    return binarized_resnet18(a_bits=ab, w_bits=wb, **(SMALL | {"stem": "int8"} | kw))


def _run_vm(ex, params, x):
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)])
    return [o.numpy() for o in out] if not hasattr(out, "numpy") else out.numpy()


# ---- the reference on its own ---------------------------------------------------------------

def test_reference_codes_are_spread_and_shiftnorm_makes_fused_equal_unfused():
    net = _net(2, 1)
    x = golden_input(net.input_shape, seed=0)
    fused, unfused = run_reference(net, x, glue="fused"), run_reference(net, x, glue="unfused")
    np.testing.assert_array_equal(fused.codes, unfused.codes)
    assert all(0.05 < f < 0.8 for f in fused.histogram.values()), fused.histogram  # ranges neither dead nor saturated
    # without shift normalization the fused glue snaps M to a power of two: the codes move
    raw = _net(2, 1, shiftnorm=False)
    assert not np.array_equal(run_reference(raw, x, glue="fused").codes, run_reference(raw, x, glue="unfused").codes)


def test_reference_float_stem_is_exact_on_the_golden_grid():
    """The snapped float stem (stem="float32") sums exactly in float32 too: the codes entering the binary
    part do not depend on float rounding (what makes the compiled integer part comparable bit for bit)."""
    from edge_sdk.quant import bitserial_net_ref as ref

    net = _net(2, 1, stem="float32")
    x = golden_input(net.input_shape, seed=1)
    s = net.stem
    y64 = ref.conv2d_values(x, s.weight, stride=2, pad=s.pad)
    y32 = ref.conv2d_values(x.astype(np.float32), s.weight, stride=2, pad=s.pad).astype(np.float32)
    np.testing.assert_array_equal(y64, y32.astype(np.float64))
    assert np.all(y64 * 2.0 ** 7 * 2.0 ** 20 == np.rint(y64 * 2.0 ** 7 * 2.0 ** 20))  # on a dyadic grid


# ---- compiled on the host ------------------------------------------------------------------

@pytest.mark.parametrize("ab,wb", [(1, 1), (2, 1), (2, 2)], ids=["w1a1", "w1a2", "w2a2"])
def test_host_build_matches_reference(ab, wb):
    net = _net(ab, wb)
    x = golden_input(net.input_shape, seed=2)
    ref = run_reference(net, x, glue="fused")
    ex, params, _ = compile_binarized(net, get_target("host"), glue="fused", output="both")
    codes, scores = _run_vm(ex, params, x)
    np.testing.assert_array_equal(codes, ref.codes)
    np.testing.assert_allclose(scores, ref.scores, rtol=GOLDEN_TOL, atol=GOLDEN_TOL)


def test_float_stem_still_builds_and_matches_its_reference():
    """stem="float32" (the float stem the digits nets were trained with) stays selectable and exact."""
    net = _net(2, 1, stem="float32")
    x = golden_input(net.input_shape, seed=2)
    ref = run_reference(net, x, glue="fused")
    ex, params, rows = compile_binarized(net, get_target("host"), glue="fused", output="both")
    codes, scores = _run_vm(ex, params, x)
    np.testing.assert_array_equal(codes, ref.codes)
    np.testing.assert_allclose(scores, ref.scores, rtol=GOLDEN_TOL, atol=GOLDEN_TOL)
    assert [r["op"] for r in rows][:2] == ["conv2d", "max_pool2d"]


def test_unfused_build_equals_fused_build_and_reference():
    """Shift-normalized scales are powers of two: the float glue lands on the same codes exactly."""
    net = _net(2, 1)
    x = golden_input(net.input_shape, seed=3)
    host = get_target("host")
    got = {g: _run_vm(*compile_binarized(net, host, glue=g, output="both")[:2], x) for g in ("fused", "unfused")}
    np.testing.assert_array_equal(got["unfused"][0], got["fused"][0])
    np.testing.assert_array_equal(got["unfused"][0], run_reference(net, x, glue="unfused").codes)
    np.testing.assert_allclose(got["unfused"][1], got["fused"][1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("glue", ["fused", "unfused"])
def test_mobilenet_v1_float_depthwise_bitserial_pointwise_matches_reference(glue):
    from edge_sdk.models.binarized import binarized_mobilenet_v1

    net = binarized_mobilenet_v1(a_bits=2, w_bits=1, **(SMALL | {"stem": "float32"}))  # the int8 stem: below
    assert len(net.convs) == 13 and all(c.kernel == 1 for c in net.convs)
    x = golden_input(net.input_shape, seed=6)
    ref = run_reference(net, x, glue=glue)
    ex, params, rows = compile_binarized(net, get_target("host"), glue=glue, output="both")
    codes, scores = _run_vm(ex, params, x)
    np.testing.assert_array_equal(codes, ref.codes)
    np.testing.assert_allclose(scores, ref.scores, rtol=GOLDEN_TOL, atol=GOLDEN_TOL)
    ops_ = [r["op"] for r in rows]
    assert ops_.count("depthwise_conv2d") == 13 and ops_.count("bitserial_conv2d") == 13


# ---- compiled for pi3, run under qemu --------------------------------------------------------

@pytest.mark.qemu
@pytest.mark.parametrize("ab,wb", [(1, 1), (2, 1), (2, 2)], ids=["w1a1", "w1a2", "w2a2"])
def test_pi3_build_matches_reference_under_qemu(ab, wb, tmp_path):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    net = _net(ab, wb)
    x = golden_input(net.input_shape, seed=4)
    ref = run_reference(net, x, glue="fused")
    ex, params, _ = compile_binarized(net, pi3, glue="fused", output="codes")
    lib, pfile = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_array_equal(res.output, ref.codes)


@pytest.mark.qemu
def test_pi3_mobilenet_v1_w1a2_matches_reference_under_qemu(tmp_path):
    """MobileNetV1's float depthwise layers between binary pointwise convs on pi3: the scheduled quantize+pack
    and dequant kernels (16+ channels) and the default-lowered ones (8 channels at alpha 0.25), codes exact."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.models.binarized import binarized_mobilenet_v1
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    net = binarized_mobilenet_v1(a_bits=2, w_bits=1, **(SMALL | {"stem": "int8"}))
    x = golden_input(net.input_shape, seed=8)
    ref = run_reference(net, x, glue="fused")
    ex, params, _ = compile_binarized(net, pi3, glue="fused", output="codes")
    lib, pfile = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_array_equal(res.output, ref.codes)


@pytest.mark.qemu
@pytest.mark.parametrize("stem", ["int8", "float32"])
def test_pi3_unfused_build_matches_reference_under_qemu(stem, tmp_path):
    """The unfused ablation uses the same stem (its own bitpack after it): codes exact on pi3 too."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    net = _net(2, 1, stem=stem)
    x = golden_input(net.input_shape, seed=7)
    ref = run_reference(net, x, glue="unfused")
    ex, params, _ = compile_binarized(net, pi3, glue="unfused", output="codes")
    lib, pfile = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    np.testing.assert_array_equal(res.output, ref.codes)


@pytest.mark.qemu
def test_pi3_package_golden_under_qemu(tmp_path):
    if shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.cli import main

    pkg = tmp_path / "r18_w2a2_pi3.edgepkg"
    assert main(["compile", "resnet18", "--alpha", "0.25", "--resolution", "32", "--classes", "10",
                 "--variant", "w2a2", "--target", "pi3", "-o", str(pkg)]) == 0
    from edge_sdk.run import run_package

    for threads in (1, 4):  # each thread's stack scratch is its own (compiler/stack_scratch)
        res = run_package(pkg, repeat=1, warmup=0, threads=threads, model=False)
        assert res.emulated and res.golden_ok, (threads, res.golden_max_abs_err)
    from edge_sdk.compiler.stack_scratch import workspace_hooks
    from edge_sdk.package import open_package

    assert workspace_hooks(open_package(pkg, tmp_path / "pkg").member("model.so")) == []


# ---- through the CLI: compile_model, the package, the runner --------------------------------

@pytest.mark.parametrize("variant", ["w1a2", "w1a2-float-stem"])
def test_cli_compile_and_run_w1a2(variant, tmp_path, capsys):
    from edge_sdk.cli import main
    from edge_sdk.package import read_manifest

    pkg = tmp_path / "r18_w1a2.edgepkg"
    assert main(["compile", "resnet18", "--alpha", "0.25", "--resolution", "32", "--classes", "10",
                 "--variant", variant, "-o", str(pkg)]) == 0
    capsys.readouterr()
    assert main(["run", str(pkg), "--json", "--repeat", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["golden"]["ok"] and out["variant"] == variant
    m = read_manifest(pkg)
    assert m["golden"]["reference"] == "numpy-bitserial" and m["golden"]["atol"] == GOLDEN_TOL
    assert m["variant_info"]["glue"] == "fused" and m["variant_info"]["activation_bits"] == 2
    rows = [r for r in m["layers"] if r["op"] == "bitserial_conv2d"]
    assert len(rows) == 19  # 8 blocks x 2 convs + 3 downsample shortcuts
    assert all(r["flops"] > 0 and r["bytes_read"] > 0 and 0 < r["glue"]["share_est"] < 1 for r in rows)
    assert m["layers"][-2]["op"] == "dense"
    if variant == "w1a2":  # the variant's stem (variants.py): integer, its three kernels
        assert m["variant_info"]["stem"] == "int8"
        assert [r["kernels"][0]["name"] for r in m["layers"][:3]] == [
            "edge_stem_quantize", "edge_stem_conv_i8", "edge_stem_pool_pack"]
        return
    # the float stem: conv, then max pool + quantize + pack as one kernel (bitserial/io.pool_quantize_pack_prim_func)
    assert [r["op"] for r in m["layers"]][:2] == ["conv2d", "max_pool2d"]
    assert m["variant_info"]["stem"] == "float32" and m["layers"][1]["epilogue"] == ["quantize", "bitpack"]
    assert [r["kernels"][0]["name"] for r in m["layers"][:2]] == ["edge_conv_0", "bitserial_pool_pack"]


def test_int8_stem_rows_have_their_own_kernels():
    """--profile charges each integer-stem kernel to its own row, not to the first binary conv."""
    net = _net(2, 1)
    _, _, rows = compile_binarized(net, get_target("host"), glue="fused")
    assert [r["op"] for r in rows][:3] == ["quantize", "conv2d", "max_pool2d"] and rows[1]["precision"] == "int8"
    assert [r["kernels"][0]["name"] for r in rows[:3]] == [
        "edge_stem_quantize", "edge_stem_conv_i8", "edge_stem_pool_pack"]


# ---- what is refused ------------------------------------------------------------------------

def test_unsupported_models_and_widths_are_refused():
    from edge_sdk.models.zoo import build_zoo_model

    mb2 = build_zoo_model("mobilenet_v2", alpha=0.35, resolution=32, classes=10)
    with pytest.raises(ModelError, match="model 'mobilenet_v2': no binarized layout; available: resnet18, mobilenet_v1"):
        binarize(mb2, a_bits=2, w_bits=1)
    r18 = build_zoo_model("resnet18", alpha=0.25, resolution=32, classes=10)
    with pytest.raises(ModelError, match="polarity 'bipolar'"):
        binarize(r18, a_bits=2, w_bits=1, polarity="bipolar")
    with pytest.raises(ModelError, match="w1a4"):
        binarize(r18, a_bits=4, w_bits=1)
