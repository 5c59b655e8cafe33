"""The float GEMM on the A53 assembly tiles with its epilogue in the tile: bias in, activation and residual out.

    func = gemm_a53_epilogue(m, k, npad, simd, epi=..., order="rows_outer", tile=a53_12x8)

conv2d.gemm runs an assembly tile (conv1x1_gemm_a53, conv1x1_gemm_a53_12x8) as a tensorized update of an
accumulator tile in memory: the tile is zeroed (its init block), the kernel loads it, accumulates and stores
it, and the epilogue (bias, residual, activation) is a separate pass that reads it again and writes the
output. Here the kernel does all of it from its registers: the accumulators start as the bias (2 x mr
`mov`), and after the reduction the residual row is added, the activation clamps (fmax / fmin against
two `dup`'d bounds) and the row goes straight to the output, rows past m not stored (the row tail). Per
tile that removes the zeroing (mr x 2 vector stores), the kernel's loads and stores of the tile (4 x mr
128-bit accesses: ldp / stp of 32 bytes hold the A53's 64-bit load/store path 4 cycles, a53.py
load_path_bytes / store_path_bytes) and the epilogue pass's loads, stores and loop.

The PrimFunc is written by hand (TVMScript): the row panels (conv2d's AP stage, 12 or 8 pixels
contiguous per reduction step) packed per row tile where the rows stay outermost (the panel in L1), else
all of A first; then one call of the kernel per tile, in conv2d.gemm's loop orders (GEMM_ORDERS).
Activations: none, relu, clip(lo, hi) (relu6). Gated GEMMs keep conv2d.gemm. `rule` is conv2d.gemm's
"default" wherever the tiles apply.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

import tvm
from tvm.script import tirx as T

from edge_sdk.compiler.ops import conv1x1_gemm_a53 as a53
from edge_sdk.compiler.ops import conv1x1_gemm_a53_12x8 as a53_12x8
from edge_sdk.compiler.ops.common import Epilogue, Simd, mark_scheduled, round_up

# conv2d.gemm's schedule suffixes for the tiles ("rows_outer+a53_12x8_epilogue")
TILES = {"a53_8x8_epilogue": a53, "a53_12x8_epilogue": a53_12x8}

_INF = float("inf")


def clamp_of(act: tuple) -> tuple[float, float] | None | bool:
    """(lo, hi) for an activation this kernel applies, None for none, False for one it does not."""
    kind = act[0] if act else "none"
    if kind in ("none", "identity"):
        return None
    if kind == "relu":
        return (0.0, _INF)
    if kind == "clip" and len(act) == 3:
        return (float(act[1]), float(act[2]))
    return False


# Smallest K the epilogue tiles are offered for (conv1x1_gemm_a53.MIN_K is the accumulator-tile path's: its
# fixed cost a tile, the tile's round trip through memory, is what this path removes). An even K >= 2 runs.
MIN_K = 16


def applies(epi: Epilogue) -> bool:
    """Whether the epilogue runs in the tile: no gate, an activation clamp_of knows (PRELU's per-channel
    slopes: no)."""
    return not epi.gate and clamp_of(epi.act) is not False


# Weight bytes that stay in the A53's L2 (512 KB, TRM; half of it) while the row tiles sweep them: the
# epilogue tiles' rule keeps the rows outermost below it (each row panel packed once, in L1; each output
# row written whole, one write miss per line) and sweeps pairs of weight panels over all rows above it.
_L2_BUDGET = {"neon": 256 << 10}
# The assembly tiles' loop, modelled cycles per fmla (timing/pipeline.block_cycles of kernel_lines' loop):
# 8x8 41 per 32, 12x8 58 per 48.
_LOOP_COST = {a53.MR: 41 / 32, a53_12x8.MR: 58 / 48}


# Where the accumulator tile stays the rule: few rows and a long K (measured alone, modelled pi3: 49 rows,
# K 576 / 960 / 1024 priced 1-2 % above it, e.g. 49 x 1024 -> 1024 20.51 vs 20.20 M cycles; K 320 / 512
# below it). A rule of thumb until the choice records are re-made with these candidates.
_FEW_ROWS, _LONG_K = 96, 512


def rule(m: int, k: int, npad: int, nr: int, simd: Simd, epi: Epilogue) -> str | None:
    """The rule's schedule on the epilogue tiles (this module), or None where they do not apply:
    the tile with the fewest modelled loop cycles for the padded rows (196 rows: 12x8, 204 x 58/48 < 200 x
    41/32; 49 rows: 8x8, 56 x 41/32 < 60 x 58/48), rows outer while the weights fit _L2_BUDGET, else pairs of
    weight panels outer where the output is at least a quarter of the weights (m x N >= K x N / 4; measured:
    196 x 512 -> 512 pairs 17.87 vs 18.34 M, 49 x 1024 -> 1024 pairs 20.71 vs the 8x8 tile's 20.20), else
    single panels. Measured alone (modelled pi3, 1 thread, vs the 8x8 tile's best order, mbf9's
    BENCHMARKS table): 3136 x 128 -> 128 21.71 -> 20.07 M cycles, 196 x 512 -> 512 19.79 -> 17.87 M."""
    if simd.isa != "neon" or not applies(epi):
        return None
    fits = [mr for mr in _LOOP_COST if a53.applies(simd, m, k, mr, nr, epi.gate, min_k=MIN_K)]
    if not fits:
        return None
    if m < _FEW_ROWS and k > _LONG_K:
        return None
    mr = min(fits, key=lambda r: (round_up(m, r) * _LOOP_COST[r], r))
    tile = next(name for name, mod in TILES.items() if mr == mod.MR)
    if k * npad * 4 <= _L2_BUDGET[simd.isa]:
        order = "rows_outer"
    else:  # pairs save one write miss per output line, and re-read weight panels that no longer stay in L1
        order = "panel_blocks" if 4 * m >= k and (npad // nr) % 2 == 0 else "panels_outer"
    return f"{order}+{tile}"


def _bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def head_lines(tile) -> list[str]:
    """The accumulators set to the bias ($5, 8 channels): its two vectors, then one `mov` per accumulator."""
    b0, b1 = (5, 6) if tile.MR == 12 else (4, 5)  # registers the tile's prologue does not load
    lines = [f"ldp q{b0}, q{b1}, [$5]"]
    for p in range(tile.MR):
        lines += [f"mov v{tile.acc(p, 0)}.16b, v{b0}.16b", f"mov v{tile.acc(p, 1)}.16b, v{b1}.16b"]
    return lines


def tail_lines(tile, clamp: bool, residual: bool) -> list[str]:
    """Each row: + the residual row ($9, rows $4 bytes apart), the clamp (lo ${7:w}, hi ${8:w} as float
    bits), stored to the output ($3, rows $4 apart); only the first $6 rows are stored."""
    lines = ["mov x13, $3", "mov x14, $6"] + (["mov x15, $9"] if residual else [])
    if clamp:
        lines += ["dup v6.4s, ${7:w}", "dup v7.4s, ${8:w}"]
    for p in range(tile.MR):
        c0, c1 = tile.acc(p, 0), tile.acc(p, 1)
        if residual:
            lines += ["ldp q0, q1, [x15]", f"fadd v{c0}.4s, v{c0}.4s, v0.4s", f"fadd v{c1}.4s, v{c1}.4s, v1.4s"]
            lines += ["add x15, x15, $4"] if p < tile.MR - 1 else []
        if clamp:
            lines += [f"fmax v{c0}.4s, v{c0}.4s, v6.4s", f"fmax v{c1}.4s, v{c1}.4s, v6.4s",
                      f"fmin v{c0}.4s, v{c0}.4s, v7.4s", f"fmin v{c1}.4s, v{c1}.4s, v7.4s"]
        lines.append(f"stp q{c0}, q{c1}, [x13]")
        if p < tile.MR - 1:
            lines += ["subs x14, x14, #1", "b.eq 3f", "add x13, x13, $4"]
    return lines + ["3:"]


def kernel_name(tile, clamp: bool, residual: bool) -> str:
    return f"{tile.NAME}_bias{'_residual' if residual else ''}{'_clamp' if clamp else ''}"


def llvm_ir(tile, clamp: bool, residual: bool) -> str:
    """`i32 NAME(ptr out, ptr A, ptr W, i32 K, i32 ldc_floats, ptr bias, i32 rows, i32 lo_bits, i32 hi_bits,
    ptr residual)`: the tile with head_lines / tail_lines as LLVM IR (always-inlined at each call). The asm
    advances A, W and K (outputs tied to them) before it has read every input, so they are early-clobber
    ("=&r"): an input of the same value (K = 96 and a 96-byte output row) must not share their register."""
    body = tile.kernel_lines(head=head_lines(tile), tail=tail_lines(tile, clamp, residual))
    text = "\\0A".join(body)
    clobbers = ",".join([f"~{{x{i}}}" for i in (9, 10, 11, 12, 13, 14, 15)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    name = kernel_name(tile, clamp, residual)
    return (f"define i32 @{name}(ptr %c, ptr %a, ptr %w, i32 %k, i32 %ldc, ptr %b, i32 %rows, i32 %lo, i32 %hi, "
            "ptr %r) {\nentry:\n"
            "  %kk = sext i32 %k to i64\n  %ldc4 = mul i32 %ldc, 4\n  %s = sext i32 %ldc4 to i64\n"
            "  %nr = sext i32 %rows to i64\n"
            f"  %x = call {{ ptr, ptr, i64 }} asm sideeffect \"{text}\", \"=&r,=&r,=&r,r,r,r,r,r,r,r,0,1,2,{clobbers}\""
            "(ptr %c, i64 %s, ptr %b, i64 %nr, i32 %lo, i32 %hi, ptr %r, ptr %a, ptr %w, i64 %kk)\n"
            "  ret i32 0\n}\n")


def gemm_a53_epilogue(m: int, k: int, npad: int, *, epi: Epilogue, order: str, tile, nb: int = 1,
                      name: str = "edge_gemm") -> tvm.tirx.PrimFunc:
    """A (m, k) @ Wp (npad/8, k, 8) + bias (npad,) [+ R (m, npad)] -> act -> (m, npad), on `tile`
    (conv1x1_gemm_a53 or conv1x1_gemm_a53_12x8) with the epilogue in the tile. `order`: "rows_outer"
    (each row panel packed under its row tile, weight panels inner), "panels_outer" (all of A packed,
    then weight panels outer), "panel_blocks" (all of A packed; blocks of `nb` weight panels outer)."""
    mr, nr = tile.MR, a53.NR
    nt, npn = round_up(m, mr) // mr, npad // nr
    bounds = clamp_of(epi.act)
    clamp = bounds is not None
    lo, hi = (_bits(bounds[0]), _bits(bounds[1])) if clamp else (0, 0)
    kname = kernel_name(tile, clamp, epi.residual)
    ir = llvm_ir(tile, clamp, epi.residual)
    res = epi.residual
    shape, call = _Shape(m, k, npad, mr, nt, npn), _Call(kname, ir, lo, hi)
    if order == "rows_outer":
        func = _rows_outer(shape, call, res)
    else:
        func = _packed_first(shape, call, res, nb if order == "panel_blocks" else 1)
    return mark_scheduled(func, name)


class _Shape(NamedTuple):
    """The GEMM's sizes: m rows, k depth, npad padded columns; mr rows a tile, nt row tiles, npn weight panels."""
    m: int
    k: int
    npad: int
    mr: int
    nt: int
    npn: int


class _Call(NamedTuple):
    """The assembly tile to call: its name, its LLVM IR, and the clamp's bounds as float bits."""
    kname: str
    ir: str
    lo: int
    hi: int


def _rows_outer(shape: _Shape, call: _Call, res):
    """Each row tile: its panel packed (in L1), then every weight panel."""
    m, k, npad, mr, nt, npn = shape
    kname, ir, lo, hi = call
    nr = a53.NR

    if res:
        @T.prim_func(s_tir=True)
        def f(A: T.Buffer((m, k), "float32"), W: T.Buffer((npn, k, nr), "float32"), B: T.Buffer((npad,), "float32"),
              R: T.Buffer((m, npad), "float32"), O: T.Buffer((m, npad), "float32")):
            for io in T.parallel(nt, annotations={"pragma_import_llvm": ir}):
                AP = T.alloc_buffer((k, mr), "float32")
                for ii, kk in T.grid(mr, k):
                    AP[kk, ii] = A[T.min(io * mr + ii, m - 1), kk]
                for jo in range(npn):
                    T.evaluate(T.call_extern(
                        "int32", kname, T.address_of(O[io * mr, jo * nr]), T.address_of(AP[0, 0]),
                        T.address_of(W[jo, 0, 0]), k, npad, T.address_of(B[jo * nr]), T.min(mr, m - io * mr), lo, hi,
                        T.address_of(R[io * mr, jo * nr])))
        return f

    @T.prim_func(s_tir=True)
    def g(A: T.Buffer((m, k), "float32"), W: T.Buffer((npn, k, nr), "float32"), B: T.Buffer((npad,), "float32"),
          O: T.Buffer((m, npad), "float32")):
        for io in T.parallel(nt, annotations={"pragma_import_llvm": ir}):
            AP = T.alloc_buffer((k, mr), "float32")
            for ii, kk in T.grid(mr, k):
                AP[kk, ii] = A[T.min(io * mr + ii, m - 1), kk]
            for jo in range(npn):
                T.evaluate(T.call_extern(
                    "int32", kname, T.address_of(O[io * mr, jo * nr]), T.address_of(AP[0, 0]),
                    T.address_of(W[jo, 0, 0]), k, npad, T.address_of(B[jo * nr]), T.min(mr, m - io * mr), lo, hi,
                    T.address_of(B[jo * nr])))
    return g


def _packed_first(shape: _Shape, call: _Call, res, nb: int):
    """All of A packed first (in parallel), then blocks of nb weight panels outer, row tiles, the block's panels."""
    m, k, npad, mr, nt, npn = shape
    kname, ir, lo, hi = call
    nr = a53.NR
    nbo = npn // nb

    if res:
        @T.prim_func(s_tir=True)
        def f(A: T.Buffer((m, k), "float32"), W: T.Buffer((npn, k, nr), "float32"), B: T.Buffer((npad,), "float32"),
              R: T.Buffer((m, npad), "float32"), O: T.Buffer((m, npad), "float32")):
            AP = T.alloc_buffer((nt, k, mr), "float32")
            for io in T.parallel(nt):
                for ii, kk in T.grid(mr, k):
                    AP[io, kk, ii] = A[T.min(io * mr + ii, m - 1), kk]
            for jb in T.parallel(nbo, annotations={"pragma_import_llvm": ir}):
                for io, ji in T.grid(nt, nb):
                    T.evaluate(T.call_extern(
                        "int32", kname, T.address_of(O[io * mr, (jb * nb + ji) * nr]), T.address_of(AP[io, 0, 0]),
                        T.address_of(W[jb * nb + ji, 0, 0]), k, npad, T.address_of(B[(jb * nb + ji) * nr]),
                        T.min(mr, m - io * mr), lo, hi, T.address_of(R[io * mr, (jb * nb + ji) * nr])))
        return f

    @T.prim_func(s_tir=True)
    def g(A: T.Buffer((m, k), "float32"), W: T.Buffer((npn, k, nr), "float32"), B: T.Buffer((npad,), "float32"),
          O: T.Buffer((m, npad), "float32")):
        AP = T.alloc_buffer((nt, k, mr), "float32")
        for io in T.parallel(nt):
            for ii, kk in T.grid(mr, k):
                AP[io, kk, ii] = A[T.min(io * mr + ii, m - 1), kk]
        for jb in T.parallel(nbo, annotations={"pragma_import_llvm": ir}):
            for io, ji in T.grid(nt, nb):
                T.evaluate(T.call_extern(
                    "int32", kname, T.address_of(O[io * mr, (jb * nb + ji) * nr]), T.address_of(AP[io, 0, 0]),
                    T.address_of(W[jb * nb + ji, 0, 0]), k, npad, T.address_of(B[(jb * nb + ji) * nr]),
                    T.min(mr, m - io * mr), lo, hi, T.address_of(B[(jb * nb + ji) * nr])))
    return g
