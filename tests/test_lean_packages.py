"""Lean float packages (issue 13): weights are stored once at 4 bytes; Winograd's U = G g G^T is
made once at load by a compiled kernel (ops/weight_transform.py) that the executable's
infer_transform_params runs (lower.split_load_transforms; runner.cc and loader.py call it).

References: U against winograd.transform_weight (numpy, float64), whole models against the numpy
Relax interpreter (quant/relax_ref.py, float64). Sizes: params.bin against the model's own conv and
dense weights (plus one bias per output channel) counted from the imported graph. No speed asserted.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.compiler.ops import winograd as wg
from edge_sdk.compiler.ops.weight_transform import winograd_weight
from edge_sdk.targets import get_target

RNG = np.random.default_rng(13)
CASES = [(8, 12, 4, 8), (16, 32, 2, 16), (5, 7, 4, 8), (64, 64, 4, 16), (12, 20, 2, 8)]  # ci, co, m, nr


def _weights(ci, co):
    return (RNG.standard_normal((3, 3, ci, co)) / np.sqrt(9 * ci)).astype("float32")


def _close_to_numpy(u, w, m, nr):
    want = wg.transform_weight(w, m, nr)  # float64 einsum, rounded once
    assert u.shape == want.shape
    # each U entry is two 3-term sums of float32 products: a few roundings of max |U|
    np.testing.assert_allclose(u, want, rtol=0, atol=8 * np.finfo(np.float32).eps * np.abs(want).max())
    co = w.shape[3]
    flat = u.transpose(0, 1, 3, 2, 4).reshape(*u.shape[:2], w.shape[2], -1)
    assert not flat[..., co:].any()  # padded output channels are zero


@pytest.mark.parametrize("ci,co,m,nr", CASES)
def test_weight_transform_kernel_matches_numpy_on_host(ci, co, m, nr):
    host = get_target("host")
    func = winograd_weight(ci, co, m, nr, lanes=8, name="t_wt")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=host.tvm_target())
    w = _weights(ci, co)
    out = tvm.runtime.tensor(np.zeros((m + 2, m + 2, -(-co // nr), ci, nr), "float32"))
    lib["t_wt"](tvm.runtime.tensor(w), out)
    _close_to_numpy(out.numpy(), w, m, nr)


def _needs_cross():
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    return pi3


@pytest.mark.qemu
@pytest.mark.parametrize("ci,co,m,nr", [CASES[0], CASES[4]])
def test_weight_transform_kernel_matches_numpy_on_pi3_under_qemu(ci, co, m, nr):
    """The NEON schedule, cross-compiled for pi3 and run by our runner under qemu (A53)."""
    pi3 = _needs_cross()
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    w = _weights(ci, co)
    shape = (m + 2, m + 2, -(-co // nr), ci, nr)
    bb = relax.BlockBuilder()
    xv = relax.Var("input", relax.TensorType(w.shape, "float32"))
    with bb.function("main", [xv]):
        gv = bb.add_func(winograd_weight(ci, co, m, nr, name="t_wt"), "t_wt")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, [xv], relax.TensorType(shape, "float32"))))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    with tempfile.TemporaryDirectory() as d:
        lib, pfile = Path(d) / "m.so", Path(d) / "params.bin"
        ex.export_library(str(lib), fcompile=pi3.compiler())
        tvm.runtime.save_param_dict_to_file({}, str(pfile))
        res = run_compiled(lib=lib, params=pfile, input=w, arch="aarch64", emulate_cpu="cortex-a53",
                           how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    _close_to_numpy(res.output, w, m, nr)


def weight_bytes(mod) -> int:
    """4 bytes per conv / dense weight and per output channel's bias, from the imported graph."""
    total = []

    def visit(e):
        if (isinstance(e, relax.Call) and getattr(e.op, "name", "") in ("relax.nn.conv2d", "relax.matmul")
                and isinstance(e.args[1], tvm.ir.GenericConst)):
            shape = e.args[1].value.shape
            cout = shape[0] if e.op.name == "relax.nn.conv2d" and e.attrs.kernel_layout == "OIHW" else shape[-1]
            total.append(int(np.prod(shape)) + int(cout))

    relax.analysis.post_order_visit(mod["main"], visit)
    return 4 * sum(total)


def _sections(lib: Path) -> list[str]:
    """ELF section names, read with binutils' readelf (it reads either architecture)."""
    import subprocess

    out = subprocess.run(["readelf", "-SW", str(lib)], capture_output=True, text=True, check=True).stdout
    return [line.split("]", 1)[1].split()[0] for line in out.splitlines() if line.strip().startswith("[")
            and "]" in line and line.split("]", 1)[1].split()]


@pytest.fixture(scope="module")
def small_resnet():
    from edge_sdk.models.zoo import build_zoo_model

    # 64 px: 16x16 (F(4x4) on NEON), 8x8, 4x4, 2x2 stages (F(2x2))
    return build_zoo_model("resnet18", alpha=0.25, resolution=64, classes=10, seed=4)


@pytest.mark.slow
def test_host_executable_transforms_at_load_and_matches_reference(small_resnet):
    """infer(x, *infer_transform_params(stored)) == main(x, *stored) == the float64 interpreter."""
    from edge_sdk.compiler import lower
    from edge_sdk.quant.relax_ref import evaluate

    ex, params = lower.compile_relax(small_resnet.mod, get_target("host"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    stored = [tvm.runtime.tensor(params[k]) for k in sorted(params)]
    x = small_resnet.example_input(seed=5)
    ready = vm["infer_transform_params"](stored)
    assert any(len(t.shape) == 5 and t.shape[0] == t.shape[1] in (4, 6) for t in ready)  # U is made here
    assert not any(len(a.shape) == 5 and a.shape[0] == a.shape[1] in (4, 6) for a in params.values())
    lean = vm["infer"](tvm.runtime.tensor(x), *ready).numpy()
    inline = vm["main"](tvm.runtime.tensor(x), *stored).numpy()
    ref = np.asarray(evaluate(small_resnet.mod, x))
    np.testing.assert_allclose(lean, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    np.testing.assert_allclose(inline, lean, rtol=1e-6, atol=1e-6 * float(np.abs(ref).max()))


@pytest.mark.slow
@pytest.mark.qemu
def test_pi3_package_is_lean_and_runs_under_qemu(small_resnet, tmp_path):
    """The pi3 package's params.bin is at most 1.05x the weights; our runner transforms them at load
    under qemu (A53) and matches the float64 interpreter; the Python loader does the same on the host."""
    _needs_cross()
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.package import open_package
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.runtime.bundle import ensure_bundle
    from edge_sdk.runtime.execute import LocalRun, run_compiled
    from edge_sdk.variants import get_variant

    out = tmp_path / "r18.edgepkg"
    compile_model(small_resnet, variant=get_variant("float32"), target=get_target("pi3"), out=out)
    pkg = open_package(out, tmp_path / "open")
    kernels = [k["name"] for r in pkg.manifest["layers"] for k in r.get("kernels", [])]
    assert any("winograd" in k for k in kernels) and not any("wino_wt" in k for k in kernels)
    stored = pkg.member("params.bin").stat().st_size
    assert stored <= 1.05 * weight_bytes(small_resnet.mod), (stored, weight_bytes(small_resnet.mod))
    sections = _sections(pkg.member("model.so"))  # no DWARF shipped; the symbols the profilers read stay
    assert ".symtab" in sections and not [n for n in sections if n.startswith(".debug")], sections
    x = small_resnet.example_input(seed=6)
    ref = np.asarray(evaluate(small_resnet.mod, x))
    res = run_compiled(lib=pkg.member("model.so"), params=pkg.member("params.bin"), input=x, arch="aarch64",
                       emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_allclose(res.output, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    host_out = tmp_path / "h.edgepkg"
    compile_model(small_resnet, variant=get_variant("float32"), target=get_target("host"), out=host_out)
    hpkg = open_package(host_out, tmp_path / "hopen")
    sys.path.insert(0, str(ensure_bundle("x86_64")))
    try:
        from edge_sdk_runtime.loader import load
    finally:
        sys.path.pop(0)
    assert not [n for n in _sections(hpkg.member("model.so")) if n.startswith(".debug")]
    model = load(hpkg.member("model.so"), hpkg.member("params.bin"))
    np.testing.assert_allclose(model.run(x), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
