"""Winograd F(m x m, 3 x 3) conv (ops/winograd.py) against a float64 numpy direct conv.

Tolerance: Winograd's rounding is not the direct conv's. Its forward error is bounded (Higham-style,
as in Barabasz et al., "Error analysis and improving the accuracy of Winograd convolution") by
gamma_n * [A^T ((|G| |g| |G^T|) . (|B^T| |d| |B|)) A] with absolute values everywhere, where n counts
the roundings along one output's longest chain: two 1-D passes each way (alpha terms each), the
Cin-long GEMM sum, the epilogue's bias / residual add. `_bound` evaluates that bracket in float64, so
the check is as tight as F(4x4)'s large coefficients (5 in B^T, 8 in A^T) make it and no looser; a
wrong tile, transform or index is off by the size of the output itself and fails it.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.compiler.ops import winograd as wg
from edge_sdk.compiler.ops.common import Epilogue, simd_of
from edge_sdk.targets import get_target

RNG = np.random.default_rng(11)
EPS32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff


def ref_conv(x, w, pad):
    """float64 NHWC 3x3 stride-1 conv; pad = (top, left, bottom, right)."""
    x = np.pad(x.astype("float64"), ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0)))
    oh, ow = x.shape[1] - 2, x.shape[2] - 2
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(3):
        for j in range(3):
            out += x[:, i:i + oh, j:j + ow, :] @ w[i, j].astype("float64")
    return out


def _bound(x, w, pad, m):
    """A^T[(|G||w||G^T|) . (|B^T||d||B|)]A with |.| on every matrix and datum, per output (float64)."""
    bt, g, at = (np.abs(a) for a in wg.matrices(m))
    xp = np.abs(np.pad(x.astype("float64"), ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0))))
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    th, tw = -(-oh // m), -(-ow // m)
    xp = np.pad(xp, ((0, 0), (0, th * m + 2 - xp.shape[1]), (0, tw * m + 2 - xp.shape[2]), (0, 0)))
    u = np.einsum("ei,ijck,nj->enck", g, np.abs(w.astype("float64")), g)
    out = np.zeros((th * m, tw * m, w.shape[3]))
    for ty in range(th):
        for tx in range(tw):
            d = xp[0, ty * m:ty * m + m + 2, tx * m:tx * m + m + 2, :]
            v = np.einsum("ei,ijc,nj->enc", bt, d, bt)
            mm = np.einsum("enc,enck->enk", v, u)
            out[ty * m:(ty + 1) * m, tx * m:(tx + 1) * m] = np.einsum("ae,enk,bn->abk", at, mm, at)
    return out[None, :oh, :ow]


def _check(out, x, w, pad, m, ref, extra):
    """|out - ref| <= gamma_n * bound + the epilogue's roundings (`extra`: |bias| + |residual|)."""
    n = x.shape[3] + 4 * (m + 2) + 3
    tol = n * EPS32 / (1 - n * EPS32) * _bound(x, w, pad, m) + 4 * EPS32 * (np.abs(ref) + extra)
    err = np.abs(out.astype("float64") - ref)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert np.all(err <= tol), f"error {err[worst]:.3g} > tolerance {tol[worst]:.3g} at {worst}"


def _case(shape, co, pad, m, simd, *, residual, act, schedule="default"):
    x = RNG.standard_normal(shape).astype("float32")
    w = (RNG.standard_normal((3, 3, shape[3], co)) / np.sqrt(9 * shape[3])).astype("float32")
    b = RNG.standard_normal(co).astype("float32")
    nr = simd.nr
    u = wg.transform_weight(w, m, nr)
    cpad = u.shape[2] * nr
    oh, ow = shape[1] + pad[0] + pad[2] - 2, shape[2] + pad[1] + pad[3] - 2
    r = RNG.standard_normal((1, oh, ow, cpad)).astype("float32")
    bp = np.zeros(cpad, "float32")
    bp[:co] = b
    build = wg.conv2d_winograd_planar if schedule == "planar" else wg.conv2d_winograd
    func = build(shape, pad, cpad, m, simd, epi=Epilogue(act, residual), nr=nr, name="t_wino")
    ref = ref_conv(x, w, pad) + b + (r[..., :co] if residual else 0)
    extra = np.abs(b) + (np.abs(r[..., :co]) if residual else 0)
    if act[0] == "relu":
        ref = np.maximum(ref, 0)
    args = [x, u, bp] + ([r] if residual else [])
    return func, args, (1, oh, ow, cpad), ref, extra, x, w


SAME, VALID = (1, 1, 1, 1), (0, 0, 0, 0)
CASES = [  # (input shape, Cout, padding, m, residual, act)
    ((1, 9, 11, 16), 24, SAME, 4, True, ("relu",)),   # H, W not multiples of 4; residual + ReLU
    ((1, 10, 7, 8), 13, VALID, 4, False, ("none",)),  # VALID, output 8x5, channel tail (13 of 16)
    ((1, 7, 9, 12), 16, SAME, 2, True, ("relu",)),    # odd sizes, tail tiles for m = 2
    ((1, 6, 5, 5), 8, (0, 1, 1, 0), 2, False, ("relu",)),  # asymmetric pad, Cin not a lane multiple
    ((1, 14, 14, 64), 64, SAME, 4, True, ("relu",)),  # a ResNet18-like layer, Cin = 64 roundings
    ((1, 10, 10, 8), 8, VALID, 4, False, ("none",)),  # no pad block at all: 10 = 2 tiles x 4 + 2 (issue 21)
]


@pytest.mark.parametrize("shape,co,pad,m,residual,act", CASES)
def test_host_matches_direct_conv(shape, co, pad, m, residual, act):
    host = get_target("host")
    func, args, out_shape, ref, extra, x, w = _case(shape, co, pad, m, simd_of(host.tvm_target()),
                                                   residual=residual, act=act)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=host.tvm_target())
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib["t_wino"](*[tvm.runtime.tensor(a) for a in args], out)
    _check(out.numpy()[..., :co], x, w, pad, m, ref, extra)


@pytest.mark.parametrize("m", [2, 4])
def test_transform_matrices_compute_a_correlation(m):
    """A^T[(G g) . (B^T d)] is the valid 3-tap correlation of d, exactly (in float64) for m outputs."""
    bt, g, at = wg.matrices(m)
    d, k = RNG.standard_normal(m + 2), RNG.standard_normal(3)
    want = np.array([d[i:i + 3] @ k for i in range(m)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def test_selection_keeps_direct_where_winograd_does_not_apply():
    simd = simd_of(get_target("pi3").tvm_target())
    assert wg.choose_m(simd, (1, 56, 56, 64), (3, 3), (2, 2), 64) is None  # stride 2
    assert wg.choose_m(simd, (1, 56, 56, 64), (1, 1), (1, 1), 64) is None  # 1x1
    assert wg.choose_m(simd, (1, 56, 56, 4), (3, 3), (1, 1), 8) is None   # too few channels
    assert wg.choose_m(simd, (1, 56, 56, 64), (3, 3), (1, 1), 64) in (2, 4)


def _fer_conv_site(simd):
    """fer's emotion classifier's 3x3 8 -> 8 conv at 62x62, VALID, ReLU (families.conv_site, seeded weights)."""
    from edge_sdk.compiler.choice import families

    w = (RNG.standard_normal((3, 3, 8, 8)) / np.sqrt(72)).astype("float32")
    return families.conv_site(simd, (1, 62, 62, 8), w, (1, 1), VALID, RNG.standard_normal(8).astype("float32"),
                              Epilogue(("relu",)), layer="fer_conv")


def test_a53_rule_follows_the_l2_and_the_channel_bound(monkeypatch):
    """pi3: direct below 16 channels (fer's conv); F(4x4) while its V + M fit the target table's L2, or from 32
    channels on (ResNet18's layers); with a larger L2 in the table the 16-channel 56x56 conv takes F(4x4) too."""
    from edge_sdk.targets import CacheConfig

    simd, host = (simd_of(get_target(t).tvm_target()) for t in ("pi3", "host"))
    assert wg.choose_m(simd, (1, 62, 62, 8), (3, 3), (1, 1), 8, pad=VALID) is None  # fer: 8 channels
    assert wg.choose_m(simd, (1, 28, 28, 8), (3, 3), (1, 1), 8) is None
    for hw, c, m in ((56, 64, 4), (28, 128, 4), (14, 256, 4), (7, 512, 2)):  # ResNet18's 3x3 stride-1 convs
        assert wg.choose_m(simd, (1, hw, hw, c), (3, 3), (1, 1), c) == m, (hw, c)
    l2 = CacheConfig().l2_bytes
    assert wg.working_set_bytes(4, (28, 28), 16, 16) <= l2 < wg.working_set_bytes(4, (56, 56), 16, 16)
    assert wg.choose_m(simd, (1, 28, 28, 16), (3, 3), (1, 1), 16) == 4
    assert wg.choose_m(simd, (1, 56, 56, 16), (3, 3), (1, 1), 16) is None
    assert wg.working_set_bytes(4, (56, 56), 32, 32) > l2 and wg.choose_m(simd, (1, 56, 56, 32), (3, 3), (1, 1), 32) == 4
    # the working set is the output's tiles: 58x58 VALID -> 56x56 out (903 KB), 30x30 VALID -> 28x28 (226 KB)
    assert wg.choose_m(simd, (1, 58, 58, 16), (3, 3), (1, 1), 16, pad=VALID) is None
    assert wg.choose_m(simd, (1, 30, 30, 16), (3, 3), (1, 1), 16, pad=VALID) == 4
    assert wg.choose_m(host, (1, 62, 62, 8), (3, 3), (1, 1), 8, pad=VALID) == 4  # x86: its measured table as is
    monkeypatch.setitem(wg._WORKING_SET_BYTES, "neon", 2 * l2)
    assert wg.choose_m(simd, (1, 56, 56, 16), (3, 3), (1, 1), 16) == 4


def test_fer_conv_default_on_pi3_is_direct_and_matches_numpy_on_host():
    """The pi3 default for fer's conv is the direct conv (its weights, not Winograd's U), and that kernel, compiled for
    the host, matches the float64 numpy conv."""
    from edge_sdk.compiler.choice import families
    from edge_sdk.compiler.ops.common import WORKLOAD_ATTR

    site = _fer_conv_site(simd_of(get_target("pi3").tvm_target()))
    assert families.conv_plan(simd_of(get_target("pi3").tvm_target()), (1, 62, 62, 8), (3, 3), (1, 1), VALID, 8,
                              "default") == (None, "default")
    acts = site.random_acts(0)
    built = site.build("default", "t_fer", acts)
    assert built.args[1].shape == (1, 3, 3, 8, 8)  # the direct conv's packed weights, not Winograd's U (6, 6, ...)
    func = built.func.without_attr(WORKLOAD_ATTR) if WORKLOAD_ATTR in (built.func.attrs or {}) else built.func
    lib = tvm.compile(tvm.IRModule({"t_fer": func}), target=get_target("host").tvm_target())
    out = tvm.runtime.tensor(np.zeros(built.out.shape, "float32"))
    lib["t_fer"](*[tvm.runtime.tensor(a) for a in built.args], out)
    ref = site.reference(acts)
    np.testing.assert_allclose(out.numpy()[..., :8], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.qemu
def test_fer_conv_default_on_pi3_matches_numpy_under_qemu():
    """The same pi3 default kernel cross-built and run under qemu (A53) against numpy (standalone.check_plain)."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.compiler.choice import standalone

    got = standalone.check_plain(_fer_conv_site(simd_of(pi3.tvm_target())), "default", pi3)
    assert got.ok, got.reason
    assert got.max_error is not None and got.max_error < 1e-4


# Cin >= 64 even: the packed V panels and the A53 assembly tile (wg.packs); 7x9 at m=2 has 20 tiles, so
# the last panel holds 4 copies of tile 19 (stored nowhere); Cin 66 is not a lane multiple.
PACKED = [CASES[4] + ("default",), ((1, 7, 9, 66), 72, SAME, 2, False, ("none",), "default"),
          ((1, 7, 9, 64), 64, SAME, 2, True, ("relu",), "default"),  # m=2 residual: the tail tiles' R prefetch
          CASES[4] + ("planar",)]


def test_packed_rule_and_asm_call():
    """Which layers take the assembly tile, and that the packed kernel calls it (the PrimFunc's text)."""
    simd = simd_of(get_target("pi3").tvm_target())
    assert wg.packs(simd, 196, 64, 8) and wg.packs(simd, 16, 512, 8) and wg.packs(simd, 20, 66, 8)
    assert not wg.packs(simd, 196, 32, 8)  # K < conv1x1_gemm_a53.MIN_K
    assert not wg.packs(simd, 9, 64, 8)  # 9 tiles -> 16 rows: more than a quarter padding
    assert not wg.packs(simd, 196, 64, 8, "planar")
    assert not wg.packs(simd_of(get_target("host").tvm_target()), 196, 64, 8)  # x86: no A64 assembly
    shape, co, pad, m, residual, act = CASES[4]
    text = {s: _case(shape, co, pad, m, simd, residual=residual, act=act, schedule=s)[0].body.script()
            for s in ("default", "planar")}
    assert "edge_a53_sgemm_8x8" in text["default"] and "edge_a53_sgemm_8x8" not in text["planar"]
    # one PRFM pair call a step (prfm_pair_a53: one line a PRFM) for M (alpha^2 / 4 lines, 64 bytes
    # apart) and R's m rows (with a residual): packed path only
    calls = sorted(re.findall(r"edge_a53_prfm_n(\d+)_o\d+\", T.address_of\((\w+)", text["default"]))
    want = sorted([(str((m + 2) ** 2 // 4), "M")] + ([(str(m), "R_1")] if residual else []))
    assert calls == want, calls
    assert "prfm" not in text["planar"] and "llvm.prefetch" not in text["default"]


@pytest.mark.qemu
@pytest.mark.parametrize("shape,co,pad,m,residual,act,schedule", [CASES[0] + ("default",), CASES[2] + ("default",)]
                         + PACKED)
def test_pi3_under_qemu_matches_direct_conv(shape, co, pad, m, residual, act, schedule):
    """The NEON schedule (4 lanes), cross-compiled for pi3 and run by our runner under qemu (A53)."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    func, args, out_shape, ref, extra, x, w = _case(shape, co, pad, m, simd_of(pi3.tvm_target()),
                                                   residual=residual, act=act, schedule=schedule)
    bb = relax.BlockBuilder()
    xv = relax.Var("input", relax.TensorType(args[0].shape, "float32"))
    pv = [relax.Var(f"p{i:04d}", relax.TensorType(a.shape, "float32")) for i, a in enumerate(args[1:])]
    with bb.function("main", [xv, *pv]):
        gv = bb.add_func(func, "t_wino")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, [xv, *pv], relax.TensorType(out_shape, "float32"))))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    with tempfile.TemporaryDirectory() as d:
        lib, pfile = Path(d) / "m.so", Path(d) / "params.bin"
        ex.export_library(str(lib), fcompile=pi3.compiler())
        tvm.runtime.save_param_dict_to_file({f"p{i:04d}": tvm.runtime.tensor(a) for i, a in enumerate(args[1:])},
                                            str(pfile))
        res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53",
                           how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    _check(res.output[..., :co], x, w, pad, m, ref, extra)


@pytest.mark.slow
def test_resnet18_with_winograd_matches_reference():
    """A whole ResNet18 (width 0.25, 112 px: 28x28 and 14/7/4 px stages, so both m=4 and m=2 run)
    compiled for the host against the numpy interpreter (quant/relax_ref.py, float64)."""
    from edge_sdk.compiler import lower
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.models.zoo import build_zoo_model

    host = get_target("host")
    model = build_zoo_model("resnet18", alpha=0.25, resolution=112, classes=10, seed=4)
    sites: list = []
    ex, params = lower.compile_relax(model.mod, host, kernel_sites=sites)
    wino = [s["name"] for s in sites if "winograd" in s["name"]]
    assert len(wino) >= 12, [s["name"] for s in sites]  # every 3x3 stride-1 conv but the stem's pool
    x = model.example_input(seed=5)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    ref = np.asarray(evaluate(model.mod, x))
    # 16 convs deep, each within its own bound above (~1e-6 relative for Cin <= 128): 1e-4 leaves margin
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert int(np.argmax(out)) == int(np.argmax(ref))
