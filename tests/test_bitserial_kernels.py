"""The unipolar popc kernel's code paths (bitserial/popc.py) against the numpy reference, exactly:
the vector bitpack epilogue (pack_planes + its tensor intrinsic, every word type) and the chunked
activation loads (one vector load per pixel, lanes broadcast), the uint8-word byte-count chunks (popc8), on the host and
for pi3 under qemu."""
import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from edge_sdk.quant import bitserial as bs, glue as g
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import kernels as ops, schedule  # noqa: E402

HOST = get_target("host")
RNG = np.random.default_rng(11)


def _case(*, ab, wb, h, w, c, o, k, stride, word, glue_bits):
    """(spec, [input arrays], reference output) for one conv; random codes, random glue."""
    pad = (k - 1) // 2
    spec = dict(batch=1, height=h, width=w, channels=c, filters=o, kernel=k, stride=stride, padding=pad,
                a_bits=ab, w_bits=wb, mode="unipolar", word=word, glue_out_bits=glue_bits, out_word=word)
    a, wt = RNG.integers(0, 1 << ab, (1, h, w, c)), RNG.integers(0, 1 << wb, (k, k, c, o))
    acc = bs.bitserial_conv2d_nhwc(a, wt, a_bits=ab, w_bits=wb, mode="unipolar", stride=stride, padding=pad,
                                   word=word)
    ins = [bs.pack_activations(a, bits=ab, word=word), bs.pack_conv_weights(wt, bits=wb, word=word)]
    if glue_bits is None:
        return spec, ins, acc.astype("int32")
    glue = g.FusedGlue(shift=RNG.integers(-1, 5, o), offset=RNG.integers(-30, 30, o), flip=np.zeros(o, bool),
                       out_bits=glue_bits)
    ins += [np.asarray(v, "int32") for v in (glue.lshift, glue.offset, glue.rshift)]
    return spec, ins, bs.pack_activations(g.fused_glue(acc, glue), bits=glue_bits, word=word)


# (ab, wb, h, w, c, o, k, stride, word, glue_bits): 2-pixel and 1-pixel (prime width) tiles, 1x1 stride 2,
# 3-bit activations (chunks of 2 words x 3 planes), uint8 / uint32 / uint64 words, int32 outputs
CASES = [
    (2, 1, 8, 8, 64, 64, 3, 1, "uint16", 2),
    (2, 1, 7, 7, 128, 64, 3, 1, "uint16", 2),
    (1, 1, 9, 9, 64, 32, 1, 2, "uint16", 1),
    (3, 2, 6, 6, 96, 32, 3, 2, "uint16", 3),
    (2, 1, 6, 6, 64, 32, 3, 1, "uint8", 2),
    (2, 2, 5, 6, 96, 64, 3, 1, "uint32", 2),
    (1, 1, 5, 5, 128, 64, 3, 1, "uint64", 1),
    (2, 1, 8, 8, 64, 64, 3, 1, "uint16", None),
    (2, 1, 7, 7, 128, 48, 1, 2, "uint16", None),
    (2, 1, 5, 5, 320, 32, 3, 1, "uint8", 2),     # uint8 words: byte-count chunks of 20 of the 40 words
    (1, 2, 4, 6, 296, 16, 3, 2, "uint8", None),  # 37 words (prime): chunks of one word
    (3, 1, 6, 6, 64, 64, 1, 1, "uint8", 3),      # 1x1: the whole reduction is one chunk
]
IDS = [f"a{c[0]}w{c[1]}-{c[4]}x{c[5]}k{c[6]}s{c[7]}-{c[8]}-{'int32' if c[9] is None else 'fused'}" for c in CASES]


@pytest.fixture(params=[False, True], ids=["direct", "chunks"])
def host_schedule(request, monkeypatch):
    """The host's schedule with and without chunked activation loads (pi3's choice), so both code
    paths run natively here."""
    cfg = dataclasses.replace(schedule.SCHEDULES[HOST.arch], chunk_loads=request.param)
    monkeypatch.setitem(schedule.SCHEDULES, HOST.arch, cfg)
    return cfg


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_popc_kernel_matches_reference_on_host(case, host_schedule):
    ab, wb, h, w, c, o, k, s, word, gb = case
    spec, ins, ref = _case(ab=ab, wb=wb, h=h, w=w, c=c, o=o, k=k, stride=s, word=word, glue_bits=gb)
    ex = ops.build(ops.conv2d_prim_func(arch=HOST.arch, **spec), target=HOST)
    out = tvm.runtime.tensor(np.zeros(ref.shape, ref.dtype))
    ex.mod["main"](*[tvm.runtime.tensor(np.ascontiguousarray(v)) for v in ins], out)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_fused_conv_uses_the_vector_bitpack():
    """Whole output words: the `bits` block and the tensorized pack; a partial word keeps bitpack."""
    base = dict(batch=1, height=6, width=6, channels=32, kernel=3, padding=1, a_bits=2, w_bits=1,
                glue_out_bits=2, word="uint16", out_word="uint16")
    names = {b.name for b in ops.conv2d_compute(filters=32, **base)[1].op.input_tensors}
    assert "bits" in names
    names = {b.name for b in ops.conv2d_compute(filters=40, **base)[1].op.input_tensors}
    assert "bits" not in names and "glue" in names


def _pi3_asm(tmp_path, spec) -> str:
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("aarch64-linux-gnu-objdump") is None:
        pytest.skip("needs the cross toolchain and binutils-aarch64-linux-gnu")
    lib = tmp_path / "conv.so"
    ops.build(ops.conv2d_prim_func(arch=pi3.arch, **spec), target=pi3).export_library(str(lib),
                                                                                      fcompile=pi3.compiler())
    return subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(lib)], check=True,
                          capture_output=True, text=True).stdout


def test_pi3_kernel_broadcasts_with_ld1r_and_packs_with_addv(tmp_path):
    """pi3's A53 tile (schedule.pop_tile) broadcasts each activation word with ld1r (one cycle, as a
    by-lane dup from a chunk load is, without the chunk's stack copy) and packs with a horizontal add."""
    spec, _, _ = _case(ab=2, wb=1, h=14, w=14, c=128, o=64, k=3, stride=1, word="uint16", glue_bits=2)
    asm = _pi3_asm(tmp_path, spec)
    assert "\tld1r\t{v" in asm and ".8h}" in asm, "no broadcast load of the activation words"
    assert "\taddv\th" in asm, "no horizontal add: the bitpack is not vectorized"


@pytest.mark.qemu
@pytest.mark.parametrize("case", [CASES[i] for i in (0, 1, 3, 8, 9)], ids=[IDS[i] for i in (0, 1, 3, 8, 9)])
def test_pi3_popc_kernel_matches_reference_under_qemu(case, tmp_path):
    """pi3's schedule (chunked loads, vector bitpack) compiled for aarch64 and run by our runner under
    qemu -cpu cortex-a53: a Relax module with one call_tir whose inputs are the params."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tvm import relax

    from edge_sdk.runtime.execute import LocalRun, run_compiled

    ab, wb, h, w, c, o, k, s, word, gb = case
    spec, ins, ref = _case(ab=ab, wb=wb, h=h, w=w, c=c, o=o, k=k, stride=s, word=word, glue_bits=gb)
    func = ops.conv2d_prim_func(arch=pi3.arch, **spec).with_attrs({"global_symbol": "conv", "op_pattern": 8})
    bb = relax.BlockBuilder()
    rvars = [relax.Var(f"a{i}", relax.TensorType(list(v.shape), str(v.dtype))) for i, v in enumerate(ins)]
    dummy = relax.Var("x", relax.TensorType([1], "uint8"))  # the runner's input is float32/int8/uint8 only
    with bb.function("main", [dummy, *rvars]):
        gv = bb.add_func(func, "conv")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, rvars, relax.TensorType(list(ref.shape), str(ref.dtype)))))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    lib, params = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file(
        {f"p{i:04d}": tvm.runtime.tensor(np.ascontiguousarray(v)) for i, v in enumerate(ins)}, str(params))
    res = run_compiled(lib=lib, params=params, input=np.zeros(1, np.uint8), arch="aarch64",
                       emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_array_equal(res.output, ref)


def test_a_failed_build_is_a_compile_error_naming_the_target(monkeypatch):
    """tvm 0.27 raises RuntimeError / ValueError from tvm_ffi (it has no tvm.error.TVMError: catching that
    was an AttributeError on the error path)."""
    import tvm
    from tvm import te

    from edge_sdk.compiler.bitserial import kernels
    from edge_sdk.errors import CompileError
    from edge_sdk.targets import get_target

    def fail(*_a, **_k):
        raise RuntimeError("LLVM ERROR: cannot select")  # what a codegen failure surfaces as

    a = te.placeholder((4,), "float32")
    func = te.create_prim_func([a, te.compute((4,), lambda i: a[i] * 2)])
    monkeypatch.setattr(tvm, "compile", fail)
    with pytest.raises(CompileError, match="target 'host' failed to build: LLVM ERROR"):
        kernels.build(func, target=get_target("host"))
