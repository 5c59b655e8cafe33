"""Schedules of the bitserial conv2d and dense (kernels.py's computes) for x86 and aarch64.

One CpuSchedule per architecture: tile sizes, the packing word a network uses, the popcount kernel's
(popc.py) tile and load form. schedule_conv2d picks the path from the blocks the compute made: the
unipolar popcount kernel (fused bitpack or int32 out), or the bipolar per-term form (fused or int32).
"""
from __future__ import annotations

from dataclasses import dataclass

from edge_sdk.compiler.bitserial import popc
from edge_sdk.errors import CompileError
from edge_sdk.quant.bitserial import WORD_BITS


@dataclass(frozen=True)
class CpuSchedule:
    """Per target family. Bipolar (per-term int32 form): `vec` channels x `xt` pixels per tile.
    Unipolar (bitserial/popc.py): uint16 `word`s and accumulators, a tile of pop_xt pixels x
    a_bits planes x pop_bits (32 channels): 2 x 2 x 4 NEON q registers (ld1r, and, cnt, uadalp), 2 x 2
    x 2 AVX2 ymm. x86 packs uint8 words, counted in uint8 per chunk of words (popc `popc8`):
    10-19% faster per layer on znver3 than uint16 (uint64 measured the same as uint16).
    chunk_loads: one vector load of a pixel's next words, each broadcast by lane (`dup`): aarch64's
    `ld1r` has no immediate offset, so a broadcast load per word also cost an address `sub`.
    """

    vec: int
    xt: int
    word: str = "uint16"
    pop_xt: int = 2
    pop_bits: int = 512
    chunk_loads: bool = False
    tile_budget: int = 0


# aarch64: the popc tile is chosen per layer by its A53 issue cost (pop_tile); broadcasts by ld1r
SCHEDULES = {"aarch64": CpuSchedule(vec=8, xt=4, tile_budget=16),
             "x86_64": CpuSchedule(vec=8, xt=4, word="uint8")}


@dataclass(frozen=True)
class PopTile:
    """A popc register tile: xt pixels x pt activation planes x `lanes` output channels (x all weight planes)."""

    xt: int
    pt: int
    lanes: int


def pop_tile(*, ow: int, o: int, a_bits: int, w_bits: int, out_bits: int, budget: int) -> PopTile | None:
    """The A53 tile (None: no whole-q-register tile fits o) with the fewest overhead cycles per popcount.
    Per word of the reduction an xt x pt x (lanes/8 q registers) x w_bits tile issues 3 Q-form NEON ops
    (and, cnt, uadalp: one a cycle, slot 0) per accumulator, one broadcast (ld1r: a vector load, which
    does not pair with a Q op, 1 cycle) per pixel plane, and two cycles per 128-bit weight load (the
    64-bit load path). So the overhead per popcount is (xt*pt + 2*q*w_bits) / (xt*pt*q*w_bits), with
    at most `budget` accumulators (32 NEON registers: the weights, a broadcast and 3 temporaries too).
    Planes split (pt = 1) when a prime width (7) leaves no other pixel tile. Fused outputs need whole
    output words (16 channels) per tile."""
    step = 16 if out_bits else 8
    if o % step:
        return None
    best = None
    for xt in (d for d in range(1, min(ow, 8) + 1) if ow % d == 0):
        for pt in sorted({1, a_bits}):
            for lanes in range(step, o + 1, step):
                q = lanes // 8
                acc = xt * pt * q * w_bits
                if o % lanes or acc > budget:
                    continue
                key = ((xt * pt + 2 * q * w_bits) / acc, -acc, -pt)
                if best is None or key < best[0]:
                    best = (key, PopTile(xt, pt, lanes))
    return best[1] if best else None


def weight_group(spec: dict, *, arch: str) -> int:
    """The lanes of the popc tile _model_tile will pick for a conv of these ConvSpec fields (0: none), which
    is the ConvSpec.w_group its weights are stored in (each tile's weights contiguous)."""
    from edge_sdk.quant.bitserial import conv_out_size, pad4

    cfg = arch_schedule(arch)
    word, k = spec.get("word", "uint32"), spec["kernel"]
    cw = -(-spec["channels"] // WORD_BITS[word])
    if (not cfg.tile_budget or spec.get("mode", "unipolar") != "unipolar" or word == "uint8"
            or popc.acc_dtype(word=word, taps=k * k, words=cw) != "uint16"):
        return 0
    out_bits = 0
    if spec.get("glue_out_bits") is not None:
        if spec["filters"] % WORD_BITS[spec.get("out_word", "uint32")]:
            return 0  # a partial output word: the scalar bitpack, no model tile
        out_bits = 1
    _, l, _, r = pad4(spec.get("padding", 0))
    ow = conv_out_size(spec["width"], k, spec.get("stride", 1), l, r)
    tile = pop_tile(ow=ow, o=spec["filters"], a_bits=spec["a_bits"], w_bits=spec["w_bits"], out_bits=out_bits,
                    budget=cfg.tile_budget)
    return tile.lanes if tile else 0


def network_word(arch: str) -> str:
    """The packing word type a whole network uses on `arch` (weights, activations, outputs)."""
    return arch_schedule(arch).word


def _divisor(n: int, at_most: int) -> int:
    """Largest factor of n not above at_most: tiles stay exact, so no predicated (scalar) tails."""
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def arch_schedule(arch: str) -> CpuSchedule:
    try:
        return SCHEDULES[arch]
    except KeyError:
        raise CompileError(f"bitserial ops: no schedule for architecture '{arch}' "
                           f"(have {sorted(SCHEDULES)})") from None


def schedule_conv2d(func, *, arch: str):
    """Tile, vectorize over output channels, parallelize over rows; returns the scheduled PrimFunc."""
    from tvm import s_tir

    cfg = arch_schedule(arch)
    sch = s_tir.Schedule(func)
    if popc.has_block(sch, "weight_view"):  # grouped weights (ConvSpec.w_group): index the stored layout
        sch.compute_inline(sch.get_sblock("weight_view"))
    conv = sch.get_sblock("conv")
    _, _, ow, o = (int(v) for v in sch.get(conv).writes[0].source.shape)
    xt = _divisor(ow, cfg.xt)
    if popc.has_block(sch, "pad"):  # unipolar with padding: a cheap pass over the small packed input
        pl = sch.get_loops(sch.get_sblock("pad"))
        sch.parallel(sch.fuse(pl[0], pl[1]))
    tile = _model_tile(sch, cfg, ow=ow, o=o)
    if tile is not None:
        fused = popc.has_block(sch, "pack")
        (popc.schedule_fused if fused else popc.schedule_int32)(  # the assembly tile on aarch64 only
            sch, xt=tile.xt, lanes=tile.lanes, chunks=False, pt=tile.pt, asm=arch == "aarch64")
    elif popc.has_block(sch, "popc"):  # unipolar: raw popcounts per bit-plane pair, combined late
        lanes = cfg.pop_bits // int(str(sch.get(sch.get_sblock("popc")).writes[0].source.dtype)[4:])
        xt = _divisor(ow, cfg.pop_xt)
        lanes *= cfg.pop_xt // xt  # a prime width (7) gets 1-pixel tiles: widen the channel group instead
        _, _, _, pa, pw, _ = (int(v) for v in sch.get(sch.get_sblock("popc")).writes[0].source.shape)
        if pa * pw == 1 and xt == cfg.pop_xt:  # one plane pair (w1a1): twice the channels, the same
            # accumulator count per tile (2 x 1 x 8 q registers); 1-pixel tiles are already widened
            lanes *= 2
        if popc.has_block(sch, "pack"):
            popc.schedule_fused(sch, xt=xt, lanes=lanes, chunks=cfg.chunk_loads)
        else:
            popc.schedule_int32(sch, xt=xt, lanes=lanes, chunks=cfg.chunk_loads)
    elif popc.has_block(sch, "pack"):
        _schedule_fused(sch, conv, o=o, xt=xt, cfg=cfg)
    else:
        _schedule_int32(sch, conv, o=o, xt=xt, cfg=cfg)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)


def _model_tile(sch, cfg: CpuSchedule, *, ow: int, o: int) -> PopTile | None:
    """pop_tile for a unipolar uint16-accumulator conv on a target with a tile budget, else None."""
    if not cfg.tile_budget or not popc.has_block(sch, "popc") or popc.has_block(sch, "popc8"):
        return None  # popc8: uint8 words, counted per chunk in uint8 (x86's form)
    blk = sch.get(sch.get_sblock("popc"))
    if str(blk.writes[0].source.dtype) != "uint16":
        return None
    _, _, _, pa, pw, _ = (int(v) for v in blk.writes[0].source.shape)
    out_bits = 1 if popc.has_block(sch, "pack") else 0
    if out_bits and not popc.has_block(sch, "bits"):  # a partial output word: the scalar bitpack path
        return None
    return pop_tile(ow=ow, o=o, a_bits=pa, w_bits=pw, out_bits=out_bits, budget=cfg.tile_budget)


def _schedule_int32(sch, conv, *, o: int, xt: int, cfg: CpuSchedule) -> None:
    """[n*y parallel], xo, fo, ry, rx, rc, ib, jb, xi (unrolled), fi (vector): an xt x vec register tile."""
    vec = _divisor(o, cfg.vec)
    cache = sch.cache_write(conv, 0, "local")
    n, y, x, f, *red = sch.get_loops(conv)
    xo, xi = sch.split(x, [None, xt])
    fo, fi = sch.split(f, [None, vec])
    sch.reorder(n, y, xo, fo, *red, xi, fi)
    sch.parallel(sch.fuse(n, y))
    sch.reverse_compute_at(cache, fo)
    copy = sch.get_loops(cache)[3:]  # under fused(n, y), xo, fo; unit loops are dropped, so maybe none:
    if copy:  # vectorizing fo itself (o prime, a 1x1 output) computed wrong sums (found by hypothesis)
        sch.vectorize(copy[-1])
    sch.unroll(xi)
    sch.vectorize(fi)
    sch.decompose_reduction(conv, red[0])


def _schedule_fused(sch, conv, *, o: int, xt: int, cfg: CpuSchedule) -> None:
    """Per output word: the (xt, W) int32 conv tile, its glue (vectorized, once, not per bit plane),
    then the bitpack; all three tiles are local to the word loop (bitpack fusion)."""
    pack, glue = sch.get_sblock("pack"), sch.get_sblock("glue")
    pn, py, px, pw, pb, pk = sch.get_loops(pack)
    pxo, pxi = sch.split(px, [None, xt])
    sch.reorder(pn, py, pxo, pw, pxi, pb, pk)
    sch.parallel(sch.fuse(pn, py))
    wbits = WORD_BITS[str(sch.get(pack).writes[0].source.dtype)]
    sch.compute_at(glue, pw)
    sch.compute_at(conv, pw)
    sch.set_scope(conv, 0, "local")
    sch.set_scope(glue, 0, "local")
    full_words = o % wbits == 0  # a partial last word leaves predicated (scalar) loops
    gl = popc.named_loops(sch, glue, skip=3, extents={"x": xt, "f": min(o, wbits)})
    if "f" in gl and full_words:
        sch.vectorize(gl["f"])
    loops = popc.named_loops(sch, conv, skip=3, extents={"x": xt, "f": min(o, wbits), **_red_extents(sch, conv)})
    vec = _divisor(min(o, wbits), cfg.vec) if full_words else 1
    red = [loops[k] for k in ("ry", "rx", "rc", "ib", "jb") if k in loops]
    inner = [loops["x"]] if "x" in loops else []
    if inner:
        sch.unroll(inner[0])
    if "f" in loops:
        fo, fi = sch.split(loops["f"], [None, vec])
        sch.reorder(fo, *red, *inner, fi)
        if vec > 1:
            sch.vectorize(fi)
            # accumulate in an (xt, vec) register tile per fo, copied out to the word's (xt, W) tile:
            # indexing the word tile by the fo loop kept the accumulators in memory (2.5x slower)
            cache = sch.cache_write(conv, 0, "local")
            sch.reverse_compute_at(cache, fo)
            sch.vectorize(sch.get_loops(cache)[-1])
    elif red:
        sch.reorder(*red, *inner)
    if red:
        sch.decompose_reduction(conv, red[0])


def _red_extents(sch, blk) -> dict[str, int]:
    """Extents of the conv's reduction iterators (ry, rx, rc, ib, jb) from its block."""
    from tvm import tirx

    iters = [iv for iv in sch.get(blk).iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    return {k: int(iv.dom.extent) for k, iv in zip(("ry", "rx", "rc", "ib", "jb"), iters)}


def schedule_dense(func, *, arch: str):
    """Vectorize over output units, parallel over unit tiles, accumulate in registers."""
    from tvm import s_tir

    cfg = arch_schedule(arch)
    sch = s_tir.Schedule(func)
    blk = sch.get_sblock("dense")
    units = int(sch.get(blk).writes[0].source.shape[1])
    vec = _divisor(units, cfg.vec)
    n, o, rc, ib, jb = sch.get_loops(blk)
    oo, oi = sch.split(o, [None, vec])
    sch.reorder(oo, n, rc, ib, jb, oi)
    sch.parallel(oo)
    sch.vectorize(oi)
    sch.decompose_reduction(blk, rc)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)
