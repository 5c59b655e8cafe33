"""What every scheduled op needs: the target's SIMD shape and the PrimFunc finishing touches.

The schedules pick register tiles from a small table keyed by the vector ISA, read from the TVM
target (mtriple/mcpu/mattr), so one compute definition serves NEON (Cortex-A53) and AVX2/AVX-512.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir, te

from edge_sdk.compiler.ops.activation import activate


@dataclass(frozen=True)
class Simd:
    """The register file a micro-kernel can use: `lanes` fp32 per vector, `regs` vector registers; `vnni`:
    the int32 lanes of the target's u8 x s8 dot step vpdpbusd (16: AVX-512 VNNI, 8: AVX-VNNI, 0: none)."""

    isa: str
    lanes: int
    regs: int
    vnni: int = 0

    @property
    def nr(self) -> int:
        """Output channels per GEMM register tile (two vectors wide)."""
        return 2 * self.lanes

    @property
    def mr_max(self) -> int:
        """Rows (pixels) per GEMM register tile (mr x 2 vectors of accumulators). Measured: with
        AVX2's 16 registers, 7 rows (14 accumulators) makes LLVM keep them on the stack; 6 fits."""
        return {"avx2": 6, "sse": 6, "avx512": 12, "neon": 8}.get(self.isa, 4)


def has_feature(target: tvm.target.Target, feature: str) -> bool:
    """Whether an LLVM target (its -mcpu / -mattr) has a CPU feature, e.g. "avx512vbmi"."""
    from tvm.target import codegen

    return bool(codegen.target_has_features(feature, target))


def simd_of(target: tvm.target.Target) -> Simd:
    """Read the vector ISA from the target; a target without SIMD still gets a (scalar) Simd."""
    triple = str(target.attrs.get("mtriple", ""))
    if triple.startswith("aarch64") or triple.startswith("arm64"):
        return Simd("neon", 4, 32)
    if has_feature(target, "avx512f"):
        return Simd("avx512", 16, 32, 16 if has_feature(target, "avx512vnni") else 0)
    if has_feature(target, "avx2") or has_feature(target, "avx"):
        return Simd("avx2", 8, 16, 8 if has_feature(target, "avxvnni") else 0)
    if triple.startswith("x86_64"):
        return Simd("sse", 4, 16)
    return Simd("scalar", 1, 16)


def largest_divisor(n: int, limit: int) -> int:
    """The largest d <= limit dividing n: register tiles divide their loop, so no tail predicates."""
    for d in range(min(limit, n), 0, -1):
        if n % d == 0:
            return d
    return 1


# Scope of the register-tile accumulators (set_scope after compute_at). TVM 0.27 keeps a small constant
# allocation as a stack alloca only in "global" scope; a "local" one becomes a TVMBackendAllocWorkspace
# per parallel task, which LLVM cannot promote to registers: the accumulators then round-trip through
# memory at every branch (A53, per call: depthwise 5x5 28x28x120 1.41 -> 1.21 M instructions, GEMM
# 12544x16 -> 64 7.08 -> 6.23 M). The compacted tile is allocated inside the parallel loop either way.
ACC_SCOPE = "global"


def vector_width(n: int, limit: int) -> int:
    """The largest power of two <= limit dividing n: the channels one vectorized step handles.
    Measured (AVX-512, depthwise 28x28x120 5x5): a 24-wide step ran 0.71 GMAC/s, an 8-wide one 30.7;
    LLVM scalarizes the guarded loads of a vector whose width is not a power of two."""
    d = 1
    while d * 2 <= limit and n % (d * 2) == 0:
        d *= 2
    return d


def pick_tile(n: int, limit: int) -> int:
    """Tile size t <= limit for a loop of n: the padded work round_up(n, t), weighed by the per-tile
    overhead (weight vectors loaded once per t rows). The kernels compute a padded tail tile on
    clamped inputs and store only the valid rows, so t need not divide n."""
    return min(range(1, min(limit, n) + 1), key=lambda t: (round_up(n, t) * (1 + 2 / t), -t))


def round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def pad_nhwc(x, padding, fill):
    """NHWC input padded by (top, left, bottom, right) with `fill`, as a compute named "pad" (or x itself).

    `fill`: a PrimExpr, or one float per channel (an input affine folded into a conv's weights pads
    with the value the affine maps to 0: the stem's -shift/scale per RGB channel)."""
    if not any(padding[:4]):
        return x
    pt, pl, pb, pr = padding[:4]
    n, h, w, c = (int(d) for d in x.shape)

    def border(k):
        if not isinstance(fill, (tuple, list)):
            return fill
        value = tvm.tirx.const(float(fill[-1]), "float32")
        for ch in range(len(fill) - 2, -1, -1):
            value = tvm.tirx.Select(k == ch, tvm.tirx.const(float(fill[ch]), "float32"), value)
        return value

    return te.compute(
        (n, h + pt + pb, w + pl + pr, c),
        lambda a, y, z, k: tvm.tirx.if_then_else(
            tvm.tirx.all(y >= pt, y < h + pt, z >= pl, z < w + pl), x[a, y - pt, z - pl, k], border(k)),
        name="pad")


@dataclass(frozen=True)
class Epilogue:
    """What a float kernel fuses around its main loop. After the bias: a residual input R (one more
    argument, same shape as the output), then the activation `act` (ops/activation.py: ("none",),
    ("relu",), ("clip", lo, hi), ("sigmoid",), ("swish",), ("hswish",)). Before it, for a GEMM only:
    `gate`, a per-input-channel vector G (one more argument, after the bias) that scales the input
    rows, i.e. squeeze-excite's broadcast multiply folded into the 1x1 conv that consumes it.
    ("prelu",) reads its per-channel slope from the bias argument: bias_rows 2, the slopes after the biases
    (one argument, so the kernels' signatures and the shipped choice workloads' argument lists stay)."""

    act: tuple = ("none",)
    residual: bool = False
    gate: bool = False

    @property
    def bias_rows(self) -> int:
        """Vectors in the kernel's bias argument: the bias, then (PRELU) the slopes."""
        return 2 if self.act[0] == "prelu" else 1

    def bias(self, n: int):
        """The kernel's bias placeholder for n (padded) output channels."""
        return te.placeholder((n * self.bias_rows,), "float32", name="bias")

    def alpha(self, b, n: int, channel):
        """The PRELU slope of `channel` in the bias argument `b` of n channels (None: no PRELU)."""
        return b[n + channel] if self.bias_rows == 2 else None


NO_EPILOGUE = Epilogue()


def apply_epilogue(value, bias, act: tuple, residual=None, simd: Simd | None = None, alpha=None):
    """bias add, residual add, then the activation: the ops we fold into a kernel's output write.
    `alpha`: the channel's PRELU slope (Epilogue.alpha), the activation's parameter when act is ("prelu",)."""
    value = value + bias if bias is not None else value
    if residual is not None:
        value = value + residual
    return activate(value, act + ((alpha,) if alpha is not None else ()), simd.isa if simd is not None else None)


# The attribute under which a scheduled kernel carries its unscheduled PrimFunc (the same compute and
# buffer layouts, no schedule): the tuning workload `edge-sdk tune` searches over and the key its
# records match on. compile_relax (lower.apply_tuning) drops it before codegen.
WORKLOAD_ATTR = "edge_sdk.workload"


def mark_scheduled(func: tvm.tirx.PrimFunc, name: str) -> tvm.tirx.PrimFunc:
    """The attributes every finished kernel has, whoever scheduled it (we, or a tuning record)."""
    return func.with_attrs({"global_symbol": name, "tirx.is_scheduled": True, "op_pattern": 8,
                            "tirx.noalias": True})


def drop_init_of_storing_call(sch: s_tir.Schedule, block) -> None:
    """Remove the zeroing (T.init) of a tensorized reduction block whose body is one call that writes every
    element of the block's write region and reads none of it (an assembly kernel that stores its sums): the
    zeroing is dead, and LLVM keeps it (the call is opaque to it). The caller guarantees the kernel stores."""
    blk = sch.get(block)
    if blk.init is None:
        return
    reads = {r.source.name for r in blk.reads}
    if any(w.source.name in reads for w in blk.writes):
        raise ValueError(f"{blk.name_hint}: the block reads what it writes; its zeroing is not dead")
    new = s_tir.SBlock(blk.iter_vars, blk.reads, blk.writes, blk.name_hint, blk.body, None, blk.alloc_buffers,
                       blk.match_buffers, blk.annotations)
    sch.state.replace(sch.get_sref(block), new, {blk: new})


def finish(sch: s_tir.Schedule, name: str, *, workload: tvm.tirx.PrimFunc | None = None) -> tvm.tirx.PrimFunc:
    """Mark the scheduled PrimFunc so no later pass (dlight, fusion) re-schedules or merges it.

    `workload`: the unscheduled PrimFunc the schedule started from (`te.create_prim_func(args)`),
    kept on the kernel so `edge-sdk tune` can search schedules for it and compile can swap in a
    tuned one (edge_sdk/tune/records.py). Kernels without one are simply never tuned."""
    func = mark_scheduled(sch.mod["main"], name)
    if workload is not None:
        func = func.with_attr(WORKLOAD_ATTR, workload)
    return func


def tile_inner(sch: s_tir.Schedule, block, n_outer: int, spatial: list[int], red: list[int], *,
               vec: bool) -> list:
    """Order a computed-at accumulator block: reduction loops outside, then pixels (unrolled) and
    lanes (vectorized when `vec`) innermost. `spatial`/`red` are the loop extents below the
    compute_at point; compute_at drops unit loops, so those are skipped. Returns the reduction loops."""
    inner = sch.get_loops(block)[n_outer:]
    kinds = [("s", e) for e in spatial if e > 1] + [("r", e) for e in red if e > 1]
    assert len(kinds) == len(inner), (kinds, len(inner))
    s_loops = [lp for lp, (k, _) in zip(inner, kinds) if k == "s"]
    r_loops = [lp for lp, (k, _) in zip(inner, kinds) if k == "r"]
    if r_loops:
        sch.reorder(*r_loops, *s_loops)
    if s_loops and vec and spatial[-1] > 1:
        sch.vectorize(s_loops[-1])
        s_loops = s_loops[:-1]
    for loop in s_loops:
        sch.unroll(loop)
    return r_loops
