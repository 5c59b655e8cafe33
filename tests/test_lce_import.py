"""Larq Compute Engine import: a model written by LCE's converter (tools/make_lce_model.py), compiled on our
bitserial kernels, against the output of LCE's own interpreter (tests/data/lce/expected.npy)."""
import json
import shutil

import numpy as np
import pytest

from edge_sdk.errors import ModelError, UsageError
from edge_sdk.models import lce
from edge_sdk.quant import lce_ref
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")


@pytest.fixture(scope="module")
def lce_data(data_dir):
    d = data_dir / "lce"
    return d / "model_lce.tflite", np.load(d / "input.npy"), np.load(d / "expected.npy")


def _run(ex, params, x):
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(params[k]) for k in sorted(params)]
    return np.concatenate([vm["main"](tvm.runtime.tensor(x[i:i + 1]), *args).numpy() for i in range(len(x))])


def test_converter_wrote_every_lce_op_and_options_parse(lce_data):
    path, _, _ = lce_data
    assert lce.is_lce_file(path)
    g = lce.read_lce(path)
    kinds = [op.kind for op in g.ops]
    assert set(lce.LCE_OPS) <= set(kinds), kinds
    bconvs = [op for op in g.ops if op.kind == "LceBconv2d"]
    assert [op.options["channels_in"] for op in bconvs] == [24, 32, 40]  # partial words in
    assert {op.options["pad_values"] for op in bconvs} == {0, 1}  # zero- and one-padding
    assert [g.dtypes[op.outputs[0]] for op in bconvs] == ["int32", "int32", "float32"]  # thresholds and float out
    assert bconvs[2].options["stride_height"] == 2


def test_numpy_reference_matches_lce_interpreter(lce_data):
    path, x, expected = lce_data
    g = lce.read_lce(path)
    got = np.concatenate([lce_ref.run_reference(g, x[i:i + 1]) for i in range(len(x))])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert len({int(np.argmax(r)) for r in expected}) >= 1 and expected.std() > 0.01  # not a constant output


@pytest.mark.parametrize("glue", ["fused", "unfused"])
def test_compiled_host_matches_lce_interpreter(lce_data, glue):
    from edge_sdk.compiler.bitserial.lce import emit_lce
    from edge_sdk.compiler.lower import compile_relax

    path, x, expected = lce_data
    host = get_target("host")
    mod, names = emit_lce(lce.read_lce(path), arch=host.arch, glue=glue)
    assert len(names) == 3
    ex, params = compile_relax(mod, host)
    np.testing.assert_allclose(_run(ex, params, x), expected, rtol=0, atol=1e-5)


def test_flipped_input_changes_the_output(lce_data):
    """The binary layers matter: negating the input flips every sign and moves the scores."""
    path, x, expected = lce_data
    g = lce.read_lce(path)
    assert np.abs(lce_ref.run_reference(g, -x[:1]) - expected[:1]).max() > 1e-3


def test_cli_compile_w1a1_and_run(lce_data, tmp_path, capsys):
    from edge_sdk.cli import main
    from edge_sdk.package import read_manifest

    path, _, _ = lce_data
    pkg = tmp_path / "lce.edgepkg"
    assert main(["compile", str(path), "--variant", "w1a1", "-o", str(pkg)]) == 0
    capsys.readouterr()
    assert main(["run", str(pkg), "--json", "--repeat", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["golden"]["ok"]
    m = read_manifest(pkg)
    assert m["golden"]["reference"] == "numpy-lce" and m["variant_info"]["polarity"] == "bipolar"
    assert [r["op"] for r in m["layers"]].count("bitserial_conv2d") == 3


@pytest.mark.parametrize("variant", ["w1a2", "float32"])
def test_other_variants_are_refused(lce_data, tmp_path, variant, capsys):
    from edge_sdk.cli import main
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.variants import get_variant

    path, _, _ = lce_data
    out = tmp_path / "x.edgepkg"
    assert main(["compile", str(path), "--variant", variant, "-o", str(out)]) != 0
    assert "Larq binary model" in capsys.readouterr().err and not out.exists()
    with pytest.raises(UsageError, match=f"Larq binary model.*--variant w1a1.*not {variant}"):
        compile_model(lce.load_lce(path), variant=get_variant(variant), target=get_target("host"), out=out)


def test_unsupported_op_is_named(lce_data, monkeypatch):
    path, _, _ = lce_data
    from edge_sdk.graph.ops import lce as registry

    monkeypatch.delitem(registry.OPS, "MEAN")
    with pytest.raises(ModelError, match=r"op 8 \(MEAN\) is not supported by the LCE importer"):
        lce.read_lce(path)


def test_float_tflite_is_not_taken_for_lce(data_dir):
    assert not lce.is_lce_file(data_dir / "mobilenet_v1_0.25_64_float.tflite")


@pytest.mark.qemu
def test_pi3_build_matches_lce_interpreter_under_qemu(lce_data, tmp_path):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.compiler.bitserial.lce import emit_lce
    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    path, x, expected = lce_data
    mod, _ = emit_lce(lce.read_lce(path), arch=pi3.arch, glue="fused")
    ex, params = compile_relax(mod, pi3)
    lib, pfile = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    res = run_compiled(lib=lib, params=pfile, input=x[:1], arch="aarch64", emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_allclose(res.output, expected[:1], rtol=0, atol=1e-5)


def test_inspect_says_the_lce_ops_are_read(lce_data):
    """edge-sdk inspect FILE on an LCE file: its Larq ops are what the bitserial path reads (graph/ops/lce.py),
    not 'no implementation', and the file imports."""
    from edge_sdk.models.inspect_file import inspect_model_file

    path, _, _ = lce_data
    report = inspect_model_file(path)
    ops = {o["op"]: o for o in report["ops"]}
    for kind in lce.LCE_OPS:
        assert ops[f"CUSTOM:{kind}"]["supported"] and "w1a1" in ops[f"CUSTOM:{kind}"]["why"], ops
    assert report["import"]["ok"]
