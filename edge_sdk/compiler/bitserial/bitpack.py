"""The vectorized bitpack epilogue of the bitserial kernels (popc.py's fused conv, io.py's quantize+pack):
bit planes as word-typed lanes, then one vector shift and a horizontal add per word and plane."""
from __future__ import annotations

from edge_sdk.quant.bitserial import WORD_BITS

PACK_INTRIN = "edge_bitserial_pack_{word}"
# per-tile buffers: "local" ones were TVMBackendAllocWorkspace calls per tile (ResNet18 w1a2 pi3: ~11 M of
TILE_SCOPE = "global"  # 226 M modelled cycles in WorkspacePool); "global" ones are stack allocas (ACC_SCOPE)


def pack_planes(q, *, bits: int, word: str):
    """bitpack(q) for whole words, as two blocks the schedule vectorizes: `bits` (bit plane b of
    every channel, one word-typed lane per channel, (.., bits, O)) and `pack` (per word and plane,
    sum over k of bits << k, which `pack_intrin` turns into one vector shift and a horizontal add).
    Why: the te.sum bitpack compiled to ~3.5 scalar instructions per output bit (shift, and, bfi),
    ~10 M of ResNet18 w1a2's A53 instructions; the vector form is ~8 per word and plane."""
    from tvm import te, tirx

    wb = WORD_BITS[word]
    *lead, o = (int(d) for d in q.shape)
    plane = te.compute((*lead, bits, o), lambda *i: ((q[(*i[:-2], i[-1])].astype("int32") >> i[-2].astype("int32"))
                                                     & tirx.const(1, "int32")).astype(word), name="bits")
    k = te.reduce_axis((0, wb), name="k")
    return te.compute((*lead, o // wb, bits),
                      lambda *i: te.sum(plane[(*i[:-2], i[-1], i[-2] * wb + k)] << k.astype(word), axis=k),
                      name="pack")


def pack_intrin(word: str) -> str:
    """Register (once) and name the tensor intrinsic: C[0] += sum_k A[k] << k, A a local word vector."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    name = PACK_INTRIN.format(word=word)
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    wb = WORD_BITS[word]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (wb,), word, offset_factor=1, scope=TILE_SCOPE)
        C = T.match_buffer(c, (1,), word, offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:1], A[0:wb])
            T.writes(C[0:1])
            for k in T.serial(0, wb):
                with T.sblock("update"):
                    vk = T.axis.remap("R", [k])
                    C[0] = C[0] + (A[vk] << T.Cast(word, vk))

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (wb,), word, offset_factor=1, scope=TILE_SCOPE)
        C = T.match_buffer(c, (1,), word, offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:1], A[0:wb])
            T.writes(C[0:1])
            C[0] = C[0] + T.call_llvm_pure_intrin(
                word, "llvm.vector.reduce.add",
                A.vload([0], f"{word}x{wb}") << T.Ramp(T.Cast(word, 0), T.Cast(word, 1), wb))

    TensorIntrin.register(name, desc, impl)
    return name
