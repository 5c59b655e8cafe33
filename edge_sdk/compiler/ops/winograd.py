"""Winograd F(m x m, 3 x 3) convolution, float32, NHWC, with the conv epilogue fused.

A 3x3 stride-1 conv computed per (m+2) x (m+2) input tile d as Y = A^T [(G g G^T) . (B^T d B)] A:
the 9 multiplies per output pixel and channel pair become (m+2)^2 / m^2 (4 for m=4, 2.25 for m=2).
Three stages in one PrimFunc:

1. input transform: V[e, n, p, c] = (B^T d_p B)[e, n] for every tile p, one channel vector at a time
   (two 1-D passes, the constant matrices fold into adds once the loops are unrolled);
2. (m+2)^2 independent GEMMs M[e, n] = V[e, n] (P x C) @ U[e, n] (C x K): on NEON with C >= 64
   (`packs`) the A53 assembly 8x8 tile (conv1x1_gemm_a53) over V packed in panels of 8 tiles, M stored
   tile-major; else the register tile of conv2d.gemm (mr tiles x nr channels over the C reduction).
   Modelled pi3, 1 thread, residual + ReLU, planar -> packed: 56x56x64 35.9 -> 27.0 M cycles,
   28x28x128 27.5 -> 22.2, 14x14x256 34.8 -> 25.6, 7x7x512 (m=2) 60.4 -> 32.8 (DRAM stall: the 8 row
   streams of V and the 36 planes of M defeat the two-stream prefetcher, a53.py pf_streams);
3. output transform Y = A^T M A per tile (two 1-D passes), then bias / residual / activation
   (common.apply_epilogue) in the same write; tail tiles past the output edge are not stored.

The weight transform U = G g G^T is done once at compile time in numpy (float64, then rounded).
Precision: B^T and A^T of F(4x4) have entries up to 5 and 8, so rounding grows: max error / max |y|
against float64 on random data 4e-6..1e-5 for F(4x4), ~1e-6 for F(2x2), ~1e-7 for the direct conv
(ResNet18's layers, 64..512 channels); tests/test_winograd.py bounds it per output.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te

from edge_sdk.compiler.ops import conv1x1_gemm_a53 as a53
from edge_sdk.compiler.ops import prefetch_a53 as pf
from edge_sdk.compiler.ops import prfm_pair_a53 as prfm
from edge_sdk.compiler.ops.common import ACC_SCOPE, NO_EPILOGUE, Epilogue, Simd, apply_epilogue, finish, pad_nhwc, pick_tile, round_up, tile_inner
from edge_sdk.targets import CacheConfig

# Lavin & Gray's matrices (points 0, +-1, +-2, infinity for m=4; 0, +-1, infinity for m=2).
_MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype="float64"),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], dtype="float64"),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype="float64")),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype="float64"),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], dtype="float64"),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]], dtype="float64")),
}

# Winograd tile size m per vector ISA: the first row whose minimum output pixels (OH*OW) the layer
# reaches wins; no row = direct conv. Measured on ResNet18's 3x3 stride-1 layers (C -> C, residual +
# ReLU epilogue), direct / F(2x2) / F(4x4):
#   host (EPYC, AVX2, 1 thread, best process-CPU ms of 7, same process):  56x56x64 2.60 / 1.55 /
#     0.86,  28x28x128 2.59 / 1.22 / 0.73,  14x14x256 2.69 / 1.24 / 1.23,  7x7x512 3.18 / 2.15 / 2.43
#     (14x14: a tie, F(2x2) is the more precise and its U the smaller);
#   pi3 (A53 instructions per call under qemu, deterministic):  56x56x64 46.6 / 23.0 / 14.6 M,
#     28x28x128 46.6 / 21.8 / 13.0 M,  14x14x256 46.5 / 21.0 / 15.9 M,  7x7x512 46.3 / 29.6 / 15.7 M.
# At 7x7 on the A53, F(4x4)'s U is 4x the weights (37.7 MB per 512-channel conv, DRAM 39.5 MB per
# call vs 19.9 MB for F(2x2) and 10.0 MB direct, qemu cache model): bench.emulate's A53 cycle model
# gives 77.4 / 63.4 ms (F(4x4) / F(2x2)) vs 68.6 ms direct, so 7x7 keeps F(2x2).
# Few channels still win on the host (56x56x8: 0.076 / 0.048 / 0.031 ms); below 8 is untested.
# avx512 is assumed to behave like avx2 (not measured: no such machine here); sse/scalar: direct.
_TABLE: dict[str, tuple[tuple[int, int], ...]] = {
    "avx2": ((28 * 28, 4), (1, 2)),
    "avx512": ((28 * 28, 4), (1, 2)),
    "neon": ((14 * 14, 4), (1, 2)),
}
# Fewest channels (min of Cin, Cout) a Winograd schedule is offered at (compile/choice prices it) and taken
# at by default where _MIN_CHANNELS has no row.
OFFERED_MIN_CHANNELS = 8
# The A53 (pi3, modelled cycles of each 3x3 stride-1 C -> C conv alone, ReLU, trained7's table in
# docs/BENCHMARKS.md "2026-12-03 trained7"): with 8 channels the direct conv is the cheapest at every size
# measured (14x14 0.067 M vs F(4x4) 0.101, 56x56 0.85 vs 1.49, fer's 62x62 VALID 0.97 vs 2.52): the
# transforms cost more than the multiplies they save. Below this many channels the direct conv is kept.
_MIN_CHANNELS = {"neon": 16}
# F(4x4) on the A53 pays while its V and M buffers, 36 x tiles x (Cin + Cout) floats, stay in the L2 (16 ch:
# 28x28, 226 KB, 0.49 M vs 0.84 M direct; 56x56, 903 KB, 4.43 M vs 3.27 M direct), or from this many channels
# on, where its 4x fewer multiplies outweigh the misses (32 ch at 56x56, 1.8 MB: 11.9 M vs 14.9 M direct;
# ResNet18's 64..256). Otherwise the direct conv. The L2 is the target table's (targets.CacheConfig: the Pi 3's
# 512 KB, A53 TRM 7.1), the one of the NEON rows whose caches it knows (the Pi 4's A72 has 1 MB: the rule is
# conservative there, not measured); x86 has no working-set rule (its table above is measured as is).
_ANY_WORKING_SET_CHANNELS = 32
_WORKING_SET_BYTES = {"neon": CacheConfig().l2_bytes}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3), float64."""
    return _MATRICES[m]


def working_set_bytes(m: int, out_hw, ci: int, cout: int) -> int:
    """Bytes of F(m x m)'s V and M buffers for an (OH, OW) output: (m+2)^2 x tiles x (Cin + Cout) float32."""
    tiles = -(-out_hw[0] // m) * -(-out_hw[1] // m)
    return (m + 2) ** 2 * tiles * (ci + cout) * 4


def choose_m(simd: Simd, shape, kernel, strides, cout: int, *, pad=None) -> int | None:
    """Winograd tile size for this conv on this ISA, or None to keep the direct conv. `pad` (top, left,
    bottom, right): the output's size for the working-set rule; None = SAME (the input's size)."""
    if tuple(kernel) != (3, 3) or tuple(strides) != (1, 1) or shape[0] != 1:
        return None
    channels = min(shape[3], cout)
    if channels < _MIN_CHANNELS.get(simd.isa, OFFERED_MIN_CHANNELS):
        return None
    pixels = shape[1] * shape[2]  # the table's rows are by input pixels (SAME padding: the output's)
    m = next((m for least, m in _TABLE.get(simd.isa, ()) if pixels >= least), None)
    cache = _WORKING_SET_BYTES.get(simd.isa)
    if m == 4 and cache is not None and channels < _ANY_WORKING_SET_CHANNELS:
        pt, pl, pb, pr = (1, 1, 1, 1) if pad is None else tuple(pad[:4])
        out_hw = (shape[1] + pt + pb - 2, shape[2] + pl + pr - 2)
        if working_set_bytes(4, out_hw, shape[3], cout) > cache:
            return None
    return m


def transform_weight(w_hwio: np.ndarray, m: int, nr: int) -> np.ndarray:
    """(3, 3, CI, CO) -> U packed (alpha, alpha, ceil(CO/nr), CI, nr), zero-padded channels."""
    _, g, _ = matrices(m)
    u = np.einsum("ei,ijck,nj->enck", g, w_hwio.astype("float64"), g)
    alpha, ci, co = m + 2, w_hwio.shape[2], w_hwio.shape[3]
    cpad = round_up(co, nr)
    up = np.zeros((alpha, alpha, ci, cpad), dtype="float64")
    up[..., :co] = u
    up = up.reshape(alpha, alpha, ci, cpad // nr, nr).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(up.astype("float32"))


def _dot(mat: np.ndarray, row, term) -> tvm.tirx.PrimExpr:
    """sum_j mat[row, j] * term(j) for a loop variable `row`: one Select arm per row holding only its
    nonzero terms (+-1 as add / subtract), so once the row loop is unrolled the Select folds to
    exactly that arm (a 0 * x term would stay: x + 0.0 is not foldable in IEEE float)."""
    arms = []
    for r in range(mat.shape[0]):
        expr = None
        for j in np.flatnonzero(mat[r]):
            c, t = float(mat[r, j]), term(int(j))
            if expr is None:
                expr = t if c == 1 else tvm.tirx.const(c, "float32") * t
            elif abs(c) == 1:
                expr = expr + t if c > 0 else expr - t
            else:
                expr = expr + tvm.tirx.const(c, "float32") * t
        arms.append(expr)
    out = arms[-1]
    for r in range(len(arms) - 2, -1, -1):
        out = tvm.tirx.Select(row == r, arms[r], out)
    return out


def packs(simd: Simd, tiles: int, ci: int, nr: int, schedule: str = "default") -> bool:
    """Whether the batched GEMMs run on the A53 assembly tile (conv1x1_gemm_a53) over packed V panels
    (8 tiles contiguous per input channel) with M stored tile-major; "planar" keeps LLVM's tile over
    tile-rows of V and transform-point planes of M."""
    return schedule != "planar" and a53.applies(simd, tiles, ci, a53.MR, nr, False)


def conv2d_winograd(shape, padding, cpad: int, m: int, simd: Simd, *, epi: Epilogue = NO_EPILOGUE,
                    nr=None, name="edge_winograd") -> tvm.tirx.PrimFunc:
    """NHWC 3x3 stride-1 conv over U from `transform_weight` (alpha, alpha, cpad/nr, CI, nr);
    padding = (top, left, bottom, right). Output (1, OH, OW, cpad). Batch 1 only (choose_m checks).
    The GEMM's tiles are padded to a multiple of mr; the tail rows re-read the last tile. Packed V
    and the assembly tile where `packs`."""
    return _winograd(shape, padding, cpad, (m, "default"), simd, epi, nr, name)


def conv2d_winograd_planar(shape, padding, cpad: int, m: int, simd: Simd, *, epi: Epilogue = NO_EPILOGUE,
                           nr=None, name="edge_winograd") -> tvm.tirx.PrimFunc:
    """conv2d_winograd with LLVM's tile over V's tile rows and M's transform-point planes everywhere."""
    return _winograd(shape, padding, cpad, (m, "planar"), simd, epi, nr, name)


def _winograd(shape, padding, cpad: int, plan: tuple[int, str], simd: Simd, epi: Epilogue, nr, name: str):
    (m, schedule), (act, residual) = plan, (epi.act, epi.residual)
    n, h, w_, ci = shape
    pt, pl, pb, pr = padding
    oh, ow = h + pt + pb - 2, w_ + pl + pr - 2
    alpha = m + 2
    th, tw = -(-oh // m), -(-ow // m)
    tiles = th * tw
    bt, _, at = matrices(m)
    nr = nr or simd.nr
    asm = packs(simd, tiles, ci, nr, schedule)
    mr = a53.MR if asm else pick_tile(tiles, simd.mr_max)
    tp = round_up(tiles, mr)
    x = te.placeholder(shape, "float32", name="X")
    u = te.placeholder((alpha, alpha, cpad // nr, ci, nr), "float32", name="U")
    b = epi.bias(cpad)
    r = te.placeholder((n, oh, ow, cpad), "float32", name="R") if residual else None
    # every tile reads a full alpha x alpha window: pad bottom/right up to th*m+2, tw*m+2
    xp = pad_nhwc(x, (pt, pl, th * m + 2 - h - pt, tw * m + 2 - w_ - pl), tvm.tirx.const(0.0, "float32"))
    t1 = te.compute((tiles, alpha, alpha, ci), lambda p, e, j, c: _dot(
        bt, e, lambda i: xp[0, (p // tw) * m + i, (p % tw) * m + j, c]), name="T1")
    row = (lambda p: te.min(p, tiles - 1)) if tp != tiles else (lambda p: p)
    rc = te.reduce_axis((0, ci), name="rc")
    if asm:  # V panels (alpha, alpha, tp/8, CI, 8): the tile's A operand, one forward stream
        v = te.compute((alpha, alpha, tp // mr, ci, mr), lambda e, v_, po, c, pi: _dot(
            bt, v_, lambda j: t1[row(po * mr + pi), e, j, c]), name="V")
        vread = lambda e, v_, p: v[e, v_, p // mr, rc, p % mr]  # noqa: E731
    else:
        v = te.compute((alpha, alpha, tiles, ci), lambda e, v_, p, c: _dot(
            bt, v_, lambda j: t1[p, e, j, c]), name="V")
        vread = lambda e, v_, p: v[e, v_, row(p), rc]  # noqa: E731
    mm = te.compute((alpha, alpha, tp, cpad), lambda e, v_, p, k: te.sum(
        vread(e, v_, p) * u[e, v_, k // nr, rc, k % nr], axis=rc), name="M")
    z = te.compute((alpha, tiles, m, cpad), lambda e, p, bx, k: _dot(
        at, bx, lambda j: mm[e, j, p, k]), name="Z")
    out = te.compute((n, oh, ow, cpad), lambda a, y, xx, k: apply_epilogue(
        _dot(at, y % m, lambda e: z[e, (y // m) * tw + xx // m, xx % m, k]), b[k], act,
        r[a, y, xx, k] if residual else None, simd, epi.alpha(b, cpad, k)), name="out")
    args = [x, u, b] + ([r] if residual else []) + [out]
    sch = s_tir.Schedule(workload := te.create_prim_func(args))
    _schedule_input(sch, simd, ci, asm)
    if asm:
        _schedule_gemm_asm(sch, ci, tp > cpad)
    else:
        _schedule_gemm(sch, mr, nr, ci)
    _schedule_output(sch, simd, m)
    plan = _prefetch(sch, (m, tw, tp), simd.lanes) if asm else []
    return _with_prefetch(finish(sch, name, workload=workload), plan)


def _vec_split(sch, loop, extent: int, lanes: int):
    f = lanes if extent % lanes == 0 else 1
    return sch.split(loop, [None, f])


def _schedule_input(sch, simd: Simd, ci: int, packed: bool) -> None:
    """Per tile and channel vector: the 36 (or 16) V vectors from the alpha x alpha window, through
    a local T1 (first 1-D pass); tiles in parallel (`packed`: tile panels of 8, V's 5-D layout)."""
    from tvm.s_tir.schedule import ScheduleError  # tvm 0.27 has no tvm.error.TVMError

    try:
        pblock = sch.get_sblock("pad")
    except ScheduleError:  # no padding at all
        pblock = None
    vb = sch.get_sblock("V")
    if packed:
        e, v_, po, c, pi = sch.get_loops(vb)
        sch.reorder(po, pi, e, v_, c)
        p = sch.fuse(po, pi)
    else:
        e, v_, p, c = sch.get_loops(vb)
    co, cv = _vec_split(sch, c, ci, simd.lanes)
    sch.reorder(p, co, e, v_, cv)
    sch.compute_at(sch.get_sblock("T1"), co)
    sch.set_scope(sch.get_sblock("T1"), 0, "local")
    sch.unroll(e)
    sch.unroll(v_)
    sch.vectorize(cv)
    t_loops = sch.get_loops(sch.get_sblock("T1"))[2:]
    for lp in t_loops[:-1]:
        sch.unroll(lp)
    sch.vectorize(t_loops[-1])
    sch.parallel(p)
    if pblock is not None:
        pa, py, pz, pc = sch.get_loops(pblock)
        sch.parallel(sch.fuse(pa, py))
        if ci % simd.lanes == 0:
            _, pcv = sch.split(pc, [None, simd.lanes])
            sch.vectorize(pcv)


def _schedule_gemm(sch, mr: int, nr: int, ci: int) -> None:
    """conv2d.gemm's register tile per transform point t: mr tiles x nr channels, swept over Cin."""
    acc = sch.get_sblock("M")
    wb = sch.cache_write(acc, 0, "local")  # acc accumulates in registers, wb stores the tile
    e, v_, p, k = sch.get_loops(wb)
    t = sch.fuse(e, v_)
    po, pi = sch.split(p, [None, mr])
    ko, ki = sch.split(k, [None, nr])
    sch.reorder(t, ko, po, pi, ki)
    sch.unroll(pi)
    sch.vectorize(ki)
    sch.compute_at(acc, po)
    (ck,) = tile_inner(sch, acc, 3, [mr, nr], [ci], vec=True)
    sch.parallel(t)
    sch.decompose_reduction(acc, ck)


def _schedule_gemm_asm(sch, ci: int, tiles_outer: bool) -> None:
    """The A53 assembly 8x8 tile per transform point t over packed V panels and U panels; M stored
    tile-major (tp, alpha, alpha, cpad) so the output transform reads each tile's 36 x cpad floats as
    one forward stream (256-byte stride, the prefetcher's window) instead of 36 planes 0.05-0.5 MB apart.
    `tiles_outer`: the V panel stays in L1 across the output-channel panels (U[t] re-read from L1/L2);
    else U's panel stays while the V panels stream."""
    acc = sch.get_sblock("M")
    wb = sch.cache_write(acc, 0, ACC_SCOPE)  # the tile's C: a compacted stack buffer (common.ACC_SCOPE)
    e, v_, p, k = sch.get_loops(wb)
    t = sch.fuse(e, v_)
    po, pi = sch.split(p, [None, a53.MR])
    ko, ki = sch.split(k, [None, a53.NR])
    sch.reorder(t, *((po, ko) if tiles_outer else (ko, po)), pi, ki)
    sch.unroll(pi)
    sch.vectorize(ki)
    sch.compute_at(acc, sch.get_loops(wb)[2])
    (ck,) = a53.order_tile(sch, acc, 3)
    sch.parallel(t)
    init = sch.decompose_reduction(acc, ck)
    a53.tensorize_tile(sch, ck, ci, t, init)
    sch.transform_layout(wb, ("write", 0), lambda e_, j, pp, kk: (pp, e_, j, kk))


def _schedule_output(sch, simd: Simd, m: int) -> None:
    """Per tile and channel vector: Z (first 1-D pass, local), then the m x m outputs through the
    epilogue, rows of tiles in parallel; a tail tile's rows/columns past OH/OW are not stored."""
    ob = sch.get_sblock("out")
    a, y, x, k = sch.get_loops(ob)
    yo, yi = sch.split(y, [None, m])
    xo, xi = sch.split(x, [None, m])
    ko, ki = sch.split(k, [None, simd.lanes])
    sch.reorder(a, yo, xo, ko, yi, xi, ki)
    sch.parallel(yo)
    sch.compute_at(sch.get_sblock("Z"), ko)
    sch.set_scope(sch.get_sblock("Z"), 0, "local")
    sch.unroll(yi)
    sch.unroll(xi)
    sch.vectorize(ki)
    z_loops = sch.get_loops(sch.get_sblock("Z"))[4:]
    for lp in z_loops[:-1]:
        sch.unroll(lp)
    sch.vectorize(z_loops[-1])


def _prefetch(sch, geo, lanes: int) -> list:
    """PRFM PLDL1KEEP pairs (prfm_pair_a53: each PRFM fetches one line, in the model as on the core)
    for the output transform's streams, one tile ahead, at the top of each channel-vector step and
    spread over the steps so that a tile's steps together fetch exactly the lines the next tile reads:
    its M (tile-major, alpha^2 / 4 consecutive lines a step; LLVM issues a step's 36 loads, 256 bytes
    apart, out of address order, so the stride prefetcher, a53.py pf_window, does not follow them)
    and the epilogue's m rows of R (m / 4 lines a row a step). The input transform's rows are left to
    the hardware prefetcher: a PRFM pair per row cost more than it saved (56x56 res 22.78 -> 23.06 M,
    14x14 no res 23.63 -> 27.09: its fills' bandwidth is charged to the pair's own small block).
    Returns [(loop var, statement)] for at_loop_top; annotates the prefetch functions' IR."""
    m, tw, tp = geo
    plan, irs = [], {}

    def add(var, n, offset, ptr, step):
        irs[prfm.name_of(n, offset)] = prfm.llvm_ir(n, offset)
        plan.append((var, prfm.call(n, offset, ptr, step)))

    _, yo, xo, ko = sch.get_loops(sch.get_sblock("out"))[:4]
    yv, xv, kv = (pf.loop_var(sch, lp) for lp in (yo, xo, ko))
    mb = pf.read_buffer(sch, "Z", "M")
    cpad, alpha = int(mb.shape[3]), m + 2
    tile, lines = alpha * alpha * cpad, alpha * alpha // 4  # floats a tile, lines a step (cpad / lanes steps)
    ahead = min(tile * 4, prfm.MAX_OFFSET // 64 * 64)
    if tp >= 2:
        nxt = tvm.tirx.min(yv * tw + xv + 1, tp - 1)
        add(kv, lines, ahead, _addr(mb, [0, 0, 0, nxt * tile + kv * (lines * 16) - ahead // 4]), 64)
    if len(sch.mod["main"].params) == 5:  # X, U, bias, R, out: the next tile's m x m x cpad floats
        r = pf.read_buffer(sch, "out", "R")
        oh, ow = int(r.shape[1]), int(r.shape[2])
        if oh >= m and ow >= m and m * cpad * 4 <= prfm.MAX_OFFSET:
            at = [0, tvm.tirx.min(yv * m, oh - m), tvm.tirx.min(xv * m, ow - m), kv * (m * lanes)]
            add(kv, m, m * cpad * 4, _addr(r, at), ow * cpad * 4)
    if plan:
        sch.annotate(yo, "pragma_import_llvm", "\n".join(irs.values()))
    return plan


def _addr(buf, indices):
    """The address of buf[indices] (a flat index past the last axis is allowed, as TIR flattens)."""
    return tvm.tirx.address_of(tvm.tirx.BufferLoad(buf, list(indices)))


def _with_prefetch(func, plan):
    """`func` with each planned statement at the top of its loop (prefetch_a53.at_loop_top)."""
    for var, stmt in plan:
        func = pf.at_loop_top(func, var, [stmt])
    return func
