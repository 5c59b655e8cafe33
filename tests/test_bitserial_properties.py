"""Property tests (hypothesis) for the bitserial ops: random shapes, strides, paddings, bit widths, words.

- compiled conv2d / dense (our TE + schedules) == a plain integer numpy conv / matmul of the code values,
  exactly, on the host; a few examples under qemu for pi3 (the aarch64 schedule);
- the fused glue's codes == the unfused float glue's up to the documented rounding (quant/glue.py): exactly
  under shift normalization, else within |acc * (|M| - 2^-shift)| + 1 codes;
- unsupported bit widths and layer kinds raise errors that name them.
Compile time dominates: example counts are modest and deadlines off.
"""
import shutil

import numpy as np
import pytest

hyp = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st  # noqa: E402

from edge_sdk.errors import CompileError, ModelError  # noqa: E402
from edge_sdk.quant import bitserial as bs, glue as g  # noqa: E402
from edge_sdk.targets import get_target  # noqa: E402

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import kernels as ops  # noqa: E402

HOST = get_target("host")
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def conv_cases(draw, *, max_hw: int = 8, max_c: int = 70):
    k = draw(st.sampled_from([1, 3]))
    stride = draw(st.sampled_from([1, 2]))
    pad = tuple(draw(st.integers(0, k - 1)) for _ in range(4)) if k > 1 else (0, 0, 0, 0)
    h, w = draw(st.integers(1, max_hw)), draw(st.integers(1, max_hw))
    assume(h + pad[0] + pad[2] >= k and w + pad[1] + pad[3] >= k)
    mode = draw(st.sampled_from(bs.MODES))
    a_bits = draw(st.sampled_from(ops.SUPPORTED_BITS["activations"]))
    pad_value = draw(st.sampled_from([0, 1])) if (mode == "bipolar" and a_bits == 1 and k > 1) else 0
    return dict(batch=draw(st.integers(1, 2)), height=h, width=w, channels=draw(st.integers(1, max_c)),
                filters=draw(st.integers(1, 20)), kernel=k, stride=stride, padding=pad, a_bits=a_bits,
                w_bits=draw(st.sampled_from(ops.SUPPORTED_BITS["weights"])), mode=mode,
                word=draw(st.sampled_from(sorted(bs.WORD_BITS))), pad_value=pad_value,
                seed=draw(st.integers(0, 2**31 - 1)))


def _conv_inputs(spec):
    rng = np.random.default_rng(spec["seed"])
    a = rng.integers(0, 1 << spec["a_bits"], (spec["batch"], spec["height"], spec["width"], spec["channels"]))
    w = rng.integers(0, 1 << spec["w_bits"], (spec["kernel"], spec["kernel"], spec["channels"], spec["filters"]))
    return a, w


def _conv_reference(spec, a, w) -> np.ndarray:
    """Plain integer conv of the code *values*; one-padding (pad_value 1) padded with +1 explicitly."""
    av, wv = bs.reference_values(a, w, a_bits=spec["a_bits"], w_bits=spec["w_bits"], mode=spec["mode"])
    if spec["pad_value"]:
        t, l, b, r = spec["padding"]
        av = np.pad(av, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=1)
        return bs.conv2d_nhwc_int(av, wv, stride=spec["stride"], padding=0)
    return bs.conv2d_nhwc_int(av, wv, stride=spec["stride"], padding=spec["padding"])


def _prim_spec(spec):
    return {k: v for k, v in spec.items() if k != "seed"}


def _run_conv(spec, a, w, *, target=HOST, glue=None):
    word = spec["word"]
    extra = {}
    args = [bs.pack_activations(a, bits=spec["a_bits"], word=word), bs.pack_conv_weights(w, bits=spec["w_bits"], word=word)]
    if glue is not None:
        extra = dict(glue_out_bits=glue.out_bits, out_word="uint32")
        args += [np.asarray(v, np.int32) for v in (glue.lshift, glue.offset, glue.rshift)]
    ex = ops.build(ops.conv2d_prim_func(arch=target.arch, **_prim_spec(spec), **extra), target=target)
    oh = bs.conv_out_size(spec["height"], spec["kernel"], spec["stride"], spec["padding"][0], spec["padding"][2])
    ow = bs.conv_out_size(spec["width"], spec["kernel"], spec["stride"], spec["padding"][1], spec["padding"][3])
    if glue is None:
        out = np.zeros((spec["batch"], oh, ow, spec["filters"]), np.int32)
    else:
        out = np.zeros((spec["batch"], oh, ow, -(-spec["filters"] // 32), glue.out_bits), np.uint32)
    tv = [tvm.runtime.tensor(np.ascontiguousarray(x)) for x in (*args, out)]
    ex.mod["main"](*tv)
    return tv[-1].numpy()


# ---- compiled == numpy, exactly ------------------------------------------------------------

_BASE = dict(batch=1, stride=1, a_bits=1, w_bits=1, seed=0, pad_value=0)


@settings(max_examples=14, **SETTINGS)
@given(conv_cases())
@example(dict(_BASE, height=1, width=1, channels=1, filters=11, kernel=1, padding=(0, 0, 0, 0), mode="bipolar",
              word="uint16"))  # a 1x1 output with a prime filter count: the int32 schedule once summed wrong
@example(dict(_BASE, height=5, width=4, channels=37, filters=9, kernel=3, padding=(1, 0, 2, 1), mode="bipolar",
              word="uint32", pad_value=1))  # Larq's one-padding with a partial word of channels
def test_compiled_conv2d_equals_integer_reference(spec):
    a, w = _conv_inputs(spec)
    np.testing.assert_array_equal(_run_conv(spec, a, w), _conv_reference(spec, a, w))


@settings(max_examples=10, **SETTINGS)
@given(n=st.integers(1, 3), k=st.integers(1, 150), o=st.integers(1, 24), a_bits=st.sampled_from([1, 2, 3]),
       w_bits=st.sampled_from([1, 2]), mode=st.sampled_from(bs.MODES), word=st.sampled_from(sorted(bs.WORD_BITS)),
       seed=st.integers(0, 2**31 - 1))
def test_compiled_dense_equals_integer_reference(n, k, o, a_bits, w_bits, mode, word, seed):
    rng = np.random.default_rng(seed)
    a, w = rng.integers(0, 1 << a_bits, (n, k)), rng.integers(0, 1 << w_bits, (k, o))
    ex = ops.build(ops.dense_prim_func(arch=HOST.arch, batch=n, features=k, units=o, a_bits=a_bits, w_bits=w_bits,
                                       mode=mode, word=word), target=HOST)
    args = [bs.pack_activations(a, bits=a_bits, word=word), bs.pack_dense_weights(w, bits=w_bits, word=word),
            np.zeros((n, o), np.int32)]
    tv = [tvm.runtime.tensor(np.ascontiguousarray(x)) for x in args]
    ex.mod["main"](*tv)
    av, wv = bs.reference_values(a, w, a_bits=a_bits, w_bits=w_bits, mode=mode)
    np.testing.assert_array_equal(tv[-1].numpy(), bs.dense_int(av, wv))


@settings(max_examples=8, **SETTINGS)
@given(conv_cases(max_c=40), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_compiled_fused_glue_conv_equals_numpy_glue(spec, out_bits, seed):
    assume(spec["pad_value"] == 0)
    rng = np.random.default_rng(seed)
    o = spec["filters"]
    glue = g.FusedGlue(shift=rng.integers(-2, 6, o), offset=rng.integers(-40, 40, o), flip=np.zeros(o, bool),
                       out_bits=out_bits)
    a, w = _conv_inputs(spec)
    want = bs.pack_activations(g.fused_glue(_conv_reference(spec, a, w), glue), bits=out_bits, word="uint32")
    np.testing.assert_array_equal(_run_conv(spec, a, w, glue=glue), want)


@pytest.mark.qemu
@settings(max_examples=3, **SETTINGS)
@given(spec=conv_cases(max_hw=6, max_c=40))
def test_pi3_conv2d_under_qemu_equals_integer_reference(spec, tmp_path_factory):
    """The aarch64 schedule, cross-compiled and run by qemu-aarch64 (cortex-a53) through our runner."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tvm import relax

    from edge_sdk.runtime.execute import LocalRun, run_compiled

    a, w = _conv_inputs(spec)
    ref = _conv_reference(spec, a, w)
    word = spec["word"]
    xa = bs.pack_activations(a, bits=spec["a_bits"], word=word)
    wp = bs.pack_conv_weights(w, bits=spec["w_bits"], word=word)
    func = ops.conv2d_prim_func(arch=pi3.arch, **_prim_spec(spec)).with_attr("global_symbol", "conv")
    bb = relax.BlockBuilder()  # the runner feeds float32/int8/uint8 inputs: the packed words travel as params
    x = relax.Var("input", relax.TensorType((1,), "uint8"))
    pa, pw = (relax.Var(f"p000{i}", relax.TensorType(v.shape, word)) for i, v in enumerate((xa, wp)))
    with bb.function("main", [x, pa, pw]):
        gv = bb.add_func(func, "conv")
        out = bb.emit(relax.call_tir(gv, [pa, pw], relax.TensorType(ref.shape, "int32")))
        bb.emit_func_output(out)
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    d = tmp_path_factory.mktemp("qemu")
    lib, pfile = d / "m.so", d / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({"p0000": tvm.runtime.tensor(xa), "p0001": tvm.runtime.tensor(wp)}, str(pfile))
    res = run_compiled(lib=lib, params=pfile, input=np.zeros(1, np.uint8), arch="aarch64", emulate_cpu="cortex-a53",
                       how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_array_equal(res.output, ref)


# ---- fused vs unfused glue -----------------------------------------------------------------

@st.composite
def glue_cases(draw):
    o = draw(st.integers(1, 16))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    a_bits, out_bits = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2, 3]))
    params = g.GlueParams(weight_scale=rng.uniform(0.01, 1.0, o), in_step=2.0 ** (1 - a_bits),
                          out_step=2.0 ** (1 - out_bits), gamma=rng.uniform(-2, 2, o), beta=rng.normal(0, 1, o),
                          mean=rng.normal(0, 3, o), var=rng.uniform(0.1, 40, o), out_bits=out_bits)
    bound = int(draw(st.sampled_from([9, 72, 576, 4608]))) * ((1 << a_bits) - 1)
    acc = rng.integers(-bound, bound + 1, (64, o))
    return params, acc, bound


@settings(max_examples=200, deadline=None, derandomize=True)
@given(glue_cases())
def test_fused_equals_unfused_under_shift_normalization(case):
    """Exact where the shift is |M|'s own exponent; a channel whose |M| < 2^-max_shift gets the capped
    shift (quant/glue.py: |acc| * |M| < 1/2 there) and may differ by one code (hypothesis found it)."""
    params, acc, bound = case
    p = g.shiftnorm_params(params)
    glue = g.derive_fused_glue(p, acc_bound=bound)
    m, _ = p.multiplier_and_bias()
    own = np.isclose(np.abs(m), np.exp2(-glue.shift.astype(np.float64)), rtol=1e-9, atol=0)
    fused = g.fused_glue(np.where(glue.flip, -acc, acc), glue)
    for dtype in (np.float64, np.float32):  # the numpy unfused glue, and the float32 one the graph runs
        d = np.abs(fused - g.unfused_glue(acc, p, dtype=dtype))
        assert d[:, own].max(initial=0) == 0 and d.max(initial=0) <= 1, (dtype, glue.shift, d.max())
        assert np.all(np.abs(m[~own]) * bound < 0.5)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(glue_cases())
def test_fused_within_documented_rounding_without_shift_normalization(case):
    """|fused - unfused| <= |acc| * | |M| - 2^-shift | + 1 codes (quant/glue.py), per element."""
    params, acc, bound = case
    glue = g.derive_fused_glue(params, acc_bound=bound)
    m, _ = params.multiplier_and_bias()
    fused = g.fused_glue(np.where(glue.flip, -acc, acc), glue)
    ref = g.unfused_glue(acc, params)
    allowed = np.abs(acc) * np.abs(np.abs(m) - np.exp2(-glue.shift.astype(np.float64))) + 1
    assert np.all(np.abs(fused - ref) <= allowed + 1e-9)


# ---- refusals ---------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None, derandomize=True)
@given(a_bits=st.integers(0, 9), w_bits=st.integers(0, 9))
def test_unsupported_bit_widths_are_named(a_bits, w_bits):
    spec = dict(batch=1, height=4, width=4, channels=8, filters=4, kernel=3, stride=1, padding=1, mode="unipolar")
    ok_a, ok_w = a_bits in ops.SUPPORTED_BITS["activations"], w_bits in ops.SUPPORTED_BITS["weights"]
    if ok_a and ok_w:
        ops.conv2d_compute(a_bits=a_bits, w_bits=w_bits, **spec)
        return
    what = f"{a_bits}-bit activations" if not ok_a else f"{w_bits}-bit weights"
    with pytest.raises(CompileError, match=f"bitserial conv2d: {what} are not supported"):
        ops.conv2d_compute(a_bits=a_bits, w_bits=w_bits, **spec)
    with pytest.raises(CompileError, match=f"bitserial dense: {what} are not supported"):
        ops.dense_compute(batch=1, features=8, units=4, a_bits=a_bits, w_bits=w_bits)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(a_bits=st.integers(1, 6), w_bits=st.integers(1, 4))
def test_binarized_builder_names_unsupported_widths(a_bits, w_bits):
    from edge_sdk.models.binarized import binarized_resnet18

    if a_bits <= 3 and w_bits <= 2:
        return
    with pytest.raises(ModelError, match=f"w{w_bits}a{a_bits} is not supported"):
        binarized_resnet18(alpha=0.25, resolution=32, classes=10, a_bits=a_bits, w_bits=w_bits)


def test_unsupported_layer_kinds_and_options_are_named():
    from edge_sdk.models.binarized import binarize
    from edge_sdk.models.zoo import build_zoo_model

    with pytest.raises(ModelError, match="model 'mobilenet_v2': no binarized layout"):
        binarize(build_zoo_model("mobilenet_v2", alpha=0.35, resolution=32, classes=10), a_bits=2, w_bits=1)
    spec = dict(batch=1, height=4, width=4, channels=8, filters=4, kernel=3, stride=1, padding=1, w_bits=1)
    with pytest.raises(CompileError, match="pad_value 1 needs 0, or 1 with bipolar 1-bit activations"):
        ops.conv2d_compute(a_bits=1, mode="unipolar", pad_value=1, **spec)
    with pytest.raises(CompileError, match="pad_value 1 needs"):
        ops.conv2d_compute(a_bits=2, mode="bipolar", pad_value=1, **spec)
    with pytest.raises(CompileError, match="bitserial mode 'ternary'"):
        ops.conv2d_compute(a_bits=1, mode="ternary", **spec)
    with pytest.raises(ValueError, match="3-bit weights are not supported"):
        bs.quantize_weights(np.ones((3, 3, 4, 2)), bits=3)
    with pytest.raises(ModelError, match="output bit width 9 is outside 1..8"):
        g.derive_fused_glue(g.GlueParams(weight_scale=1.0, in_step=1.0, out_step=1.0, gamma=1.0, beta=0.0, mean=0.0,
                                         var=1.0, out_bits=9), acc_bound=10)
