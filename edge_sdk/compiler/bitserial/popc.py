"""The fast unipolar bitserial conv: popcounts accumulated raw per bit-plane pair, combined late.

Why (Riptide's fast popcount): the per-term form `(2 * popcount(a & w) - popcount(a)) << (i + j)` in
int32 costs, per vector of words, a popcount widened to int32, a doubling, a subtraction, a shift and
an add. Split instead into

    popc[n, y, x, f, i, j] = sum over taps and words of popcount(a_i & w_j)   (narrow unsigned)
    apop[n, y, x, i]       = sum over taps and words of popcount(a_i)          (once per pixel tile:
                             a KxK box sum of pcnt, the popcount of each input pixel's words)
    conv[n, y, x, f]       = sum over i, j of (2 * popc - apop) << (i + j)     (late, in the epilogue)

and the inner loop is AND, popcount, add-accumulate. With uint16 words and uint16 accumulators that
is NEON `and` + `cnt` + `uadalp` per 128 bit-MACs (the add of the pairwise-summed byte counts into
the accumulator folds into one uadalp). apop does not depend on the output channel, so it is
computed once per pixel tile, outside the output-channel loop. The bound on the narrow accumulator:
popc <= KH*KW*ceil(C/W)*W bits, so uint16 holds any layer with KH*KW*C < 65536 (ResNet's largest
3x3x512 = 4608).

uint8 words (x86) count bytes in uint8 accumulators over chunks of <= 31 words (`popc8`, at most 8
per word) and widen once per chunk. The fused epilogue's bitpack is vectorized (`pack_planes`).

Exact for unipolar activations only (a padded tap reads code 0 = the value 0, as in the reference);
bipolar keeps the per-term form in ops/bitserial.py, whose padded taps are skipped.
"""
from __future__ import annotations

from edge_sdk.compiler.bitserial import popc_a53
from edge_sdk.compiler.bitserial.bitpack import PACK_INTRIN, TILE_SCOPE, pack_intrin, pack_planes  # noqa: F401
from edge_sdk.quant.bitserial import WORD_BITS



def acc_dtype(*, word: str, taps: int, words: int) -> str:
    """The narrowest unsigned accumulator that cannot overflow: uint16 when the bit count fits."""
    wb = WORD_BITS[word]
    return "uint16" if wb <= 16 and taps * words * wb < (1 << 16) else "uint32"


def _plane_popcounts(src, wgt, s, acc: str):
    """popc (N, OH, OW, A, B, O): popcount(a & w) per bit-plane pair, summed over the taps and words
    in `acc`; uint8 words are counted in uint8 over chunks of <= 31 words (<= 8 each), widened per chunk."""
    from tvm import te, tirx

    (oh, ow), k, cw, st = s.out_hw, s.kernel, s.cw, s.stride
    shape = (s.batch, oh, ow, s.a_bits, s.w_bits, s.filters)  # channels innermost: the vector lanes are contiguous
    r = [te.reduce_axis((0, k), "ry"), te.reduce_axis((0, k), "rx"), te.reduce_axis((0, cw), "rc")]
    if s.word != "uint8":
        return te.compute(shape, lambda n, y, x, i, j, f: te.sum(tirx.popcount(
            src[n, y * st + r[0], x * st + r[1], r[2], i] & wgt[r[0], r[1], r[2], j, f]).astype(acc), axis=r),
            name="popc")
    chunk = max(d for d in range(1, min(cw, 31) + 1) if cw % d == 0)
    rci = te.reduce_axis((0, chunk), "rci")
    popc8 = te.compute(
        (s.batch, oh, ow, k, k, cw // chunk, s.a_bits, s.w_bits, s.filters),
        lambda n, y, x, ky, kx, co, i, j, f: te.sum(tirx.popcount(
            src[n, y * st + ky, x * st + kx, co * chunk + rci, i]
            & wgt[ky, kx, co * chunk + rci, j, f]).astype("uint8"), axis=rci),
        name="popc8")
    r[2] = te.reduce_axis((0, cw // chunk), "rc")
    return te.compute(shape, lambda n, y, x, i, j, f: te.sum(
        popc8[n, y, x, r[0], r[1], r[2], i, j, f].astype(acc), axis=r), name="popc")


def unipolar_conv(src, wgt, s):
    """The int32 conv tensor (n, oh, ow, filters) from the zero-padded packed input `src`, for a
    kernels.ConvSpec `s`: 2 * sum_ij popc(a_i & w_j) << (i+j) - popcount(a) * (2^B - 1)."""
    from tvm import te, tirx

    (oh, ow), k, a_bits, w_bits = s.out_hw, s.kernel, s.a_bits, s.w_bits
    acc = acc_dtype(word=s.word, taps=k * k, words=s.cw)
    popc = _plane_popcounts(src, wgt, s, acc)
    rw = te.reduce_axis((0, s.cw), "rw")  # popcount(a) per input pixel once, then a KxK box sum of it
    pcnt = te.compute(tuple(int(d) for d in src.shape[:3]) + (a_bits,),
                      lambda n, y, x, i: te.sum(tirx.popcount(src[n, y, x, rw, i]).astype("int32"), axis=rw),
                      name="pcnt")
    r2 = [te.reduce_axis((0, k), "ry"), te.reduce_axis((0, k), "rx")]
    apop = te.compute(
        (s.batch, oh, ow, a_bits),
        lambda n, y, x, i: te.sum(pcnt[n, y * s.stride + r2[0], x * s.stride + r2[1], i], axis=r2), name="apop")

    # sum_ij popc << (i+j) fits the narrow accumulator when its bound does: combine there (one shift-add
    # per plane pair on 8 lanes a vector), widen once, and subtract the per-pixel apop term as one scalar
    bound = k * k * s.cw * WORD_BITS[s.word] * ((1 << a_bits) - 1) * ((1 << w_bits) - 1)
    if acc == "uint16" and bound < (1 << 16):
        def combine(n, y, x, f):
            p = sum((popc[n, y, x, i, j, f] << tirx.const(i + j, acc) if i + j else popc[n, y, x, i, j, f])
                    for i in range(a_bits) for j in range(w_bits))
            a = sum((apop[n, y, x, i] << i if i else apop[n, y, x, i]) for i in range(a_bits))
            return 2 * p.astype("int32") - a * ((1 << w_bits) - 1)

        return te.compute((s.batch, oh, ow, s.filters), combine, name="conv")

    def combine(n, y, x, f):
        total = None
        for i in range(a_bits):
            for j in range(w_bits):
                t = 2 * popc[n, y, x, i, j, f].astype("int32") - apop[n, y, x, i]
                t = t << (i + j) if i + j else t
                total = t if total is None else total + t
        return total

    return te.compute((s.batch, oh, ow, s.filters), combine, name="conv")


# ---- schedules --------------------------------------------------------------------------------

def named_loops(sch, blk, *, skip: int, extents: dict[str, int]) -> dict:
    """Name the loops compute_at made under `skip` outer loops (it drops unit-extent loops)."""
    from edge_sdk.errors import CompileError

    names = [k for k, e in extents.items() if e > 1]
    loops = sch.get_loops(blk)[skip:]
    got = [int(sch.get(lp).extent) for lp in loops]
    if got != [extents[k] for k in names]:
        raise CompileError(f"bitserial conv2d schedule: unexpected loop nest {got} for {extents}")
    return dict(zip(names, loops))


def has_block(sch, name: str) -> bool:
    from tvm.s_tir.schedule import ScheduleError

    try:
        sch.get_sblock(name)
    except ScheduleError:
        return False
    return True


def _shape(sch, name: str) -> list[int]:
    return [int(v) for v in sch.get(sch.get_sblock(name)).writes[0].source.shape]


def _schedule_pcnt(sch) -> None:
    """popcount(a) per input pixel: rows in parallel, one pass over the packed input."""
    pc = sch.get_sblock("pcnt")
    n, y, *_ = sch.get_loops(pc)
    sch.parallel(sch.fuse(n, y))


def _red(sch, name: str) -> dict[str, int]:
    from tvm import tirx

    iters = [iv for iv in sch.get(sch.get_sblock(name)).iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    return {k: int(iv.dom.extent) for k, iv in zip(("ry", "rx", "rc"), iters)}


def _schedule_popc(sch, *, skip: int, xt: int, fext: int, lanes: int, vectorize: bool, form: str = "ld1r",
                   pt: int | None = None) -> None:
    """The register tile under `skip` loops: taps/words outside, then xt pixels x bit planes (unrolled)
    x output channels (vector lanes, split into unrolled groups of `lanes`) inside. pt=1 (of
    a_bits > 1) takes the activation planes outside the reduction: one plane's tile at a time.
    form: "ld1r" (LLVM's broadcast loads), "chunks" (_activation_chunks) or "asm" (aarch64: the whole reduction
    as popc_a53's assembly kernel where one fits, else "ld1r")."""
    chunks, asm = form == "chunks", form == "asm"
    popc = sch.get_sblock("popc")
    _, _, _, a_bits, w_bits, _ = _shape(sch, "popc")
    red_ext = _red(sch, "popc")
    lp = named_loops(sch, popc, skip=skip, extents={"x": xt, "i": a_bits, "j": w_bits, "f": fext, **red_ext})
    red = [lp[k] for k in ("ry", "rx", "rc") if k in lp]
    split_planes = pt is not None and pt < a_bits and "i" in lp
    inner = [lp[k] for k in (("x", "j") if split_planes else ("x", "i", "j")) if k in lp]
    fo = fi = None
    if "f" in lp:
        if vectorize and fext > lanes and fext % lanes == 0:
            fo, fi = sch.split(lp["f"], [None, lanes])
        else:
            fi = lp["f"]
    outer = ([fo] if fo is not None else []) + ([lp["i"]] if split_planes else [])
    sch.reorder(*outer, *red, *inner, *([fi] if fi is not None else []))
    if asm and red and fi is not None and popc_a53.tensorize_popc(
            sch, popc, red[0], xt=xt, pt=1 if split_planes else a_bits, lanes=int(sch.get(fi).extent)):
        return
    for loop in inner + ([fo] if fo is not None else []):
        sch.unroll(loop)
    if fi is not None and vectorize:
        sch.vectorize(fi)
    if has_block(sch, "popc8"):
        _schedule_popc8(sch, parent=red[-1] if red else (fo if fo is not None else sch.get_loops(popc)[skip - 1]),
                        xt=xt, fext=fext if fi is None else int(sch.get(fi).extent), fo=fo, vectorize=vectorize)
    elif chunks and vectorize and "rc" in lp:
        outer = _activation_chunks(sch, popc, rc=lp["rc"], rc_ext=red_ext["rc"], a_bits=a_bits, inner=inner)
        red = [outer if lp_ is lp["rc"] else lp_ for lp_ in red]
    if red:
        sch.decompose_reduction(popc, red[0])


def _schedule_popc8(sch, *, parent, xt: int, fext: int, fo, vectorize: bool) -> None:
    """uint8 words: the byte-count tile of one chunk of words under `parent` (the innermost reduction
    loop of popc): words outside, then pixels x planes (unrolled) x channels (vector); the uint8
    accumulators then widen into popc once per chunk. Why: without a vector popcount (AVX2) a byte
    popcount is 6 instructions (nibble table, vpshufb) and the byte sums add with vpaddb; popcount of
    uint16 lanes also adds the byte pairs (3 more) every word."""
    blk = sch.get_sblock("popc8")
    sch.compute_at(blk, parent)
    sch.set_scope(blk, 0, TILE_SCOPE)
    a_bits, w_bits = _shape(sch, "popc8")[6:8]
    depth = 1 + [sch.get(lp).same_as(sch.get(parent)) for lp in sch.get_loops(blk)].index(True)
    loops = sch.get_loops(blk)[depth:]
    ext = [int(sch.get(lp).extent) for lp in loops]
    names = [k for k, e in (("x", xt), ("i", a_bits), ("j", w_bits), ("f", fext)) if e > 1]
    if fo is not None and len(loops) > len(names) + 1 and ext[0] == 1:
        loops = loops[1:]
    red = loops[len(names):]
    spatial = dict(zip(names, loops[:len(names)]))
    inner = [spatial[k] for k in ("x", "i", "j") if k in spatial]
    sch.reorder(*red, *inner, *([spatial["f"]] if "f" in spatial else []))
    for lp in inner:
        sch.unroll(lp)
    if "f" in spatial and vectorize:
        sch.vectorize(spatial["f"])
    if red:
        sch.decompose_reduction(blk, red[0])


def _activation_chunks(sch, popc, *, rc, rc_ext: int, a_bits: int, inner: list):
    """Per pixel, one vector load of the next `r` words x a_bits planes (contiguous in the packed
    layout) into a local tile, then each word is broadcast from its lane. Why: LLVM broadcast each
    word straight from memory with `ld1r`, which has no immediate offset, so every broadcast also
    cost an address `sub` (15 per 64 and/cnt/uadalp in layer2's loop); `dup v.8h, v.h[i]` from a
    loaded q register needs none."""
    src = next(i for i, r in enumerate(sch.get(popc).reads) if r.source.name not in ("weight", "popc"))
    word_bits = int(str(sch.get(popc).reads[src].source.dtype)[4:])
    r = max(d for d in range(1, rc_ext + 1) if rc_ext % d == 0 and d * a_bits * word_bits <= 128)
    if r * a_bits < 2:
        return rc
    outer = rc
    if r > 1:
        outer, rci = sch.split(rc, [None, r])
        sch.reorder(rci, *inner)
        sch.unroll(rci)
    cache = sch.cache_read(popc, src, "local", consumer_blocks=[popc])
    sch.compute_at(cache, outer)
    depth = 1 + [sch.get(lp).same_as(sch.get(outer)) for lp in sch.get_loops(popc)].index(True)
    loops = sch.get_loops(cache)[depth:]  # (pixels), (words), (planes); unit-extent ones are dropped
    tail, lanes = [], 1
    while loops and lanes < r * a_bits:
        tail.insert(0, loops.pop())
        lanes *= int(sch.get(tail[0]).extent)
    sch.vectorize(sch.fuse(*tail) if len(tail) > 1 else tail[0])
    for lp in loops:
        sch.unroll(lp)
    return outer  # the loop that now holds the reduction over words


def _schedule_apop(sch, *, skip: int, xt: int) -> None:
    apop = sch.get_sblock("apop")
    a_bits = _shape(sch, "apop")[3]
    lp = named_loops(sch, apop, skip=skip, extents={"x": xt, "i": a_bits, **_red(sch, "apop")})
    red = [lp[k] for k in ("ry", "rx") if k in lp]
    inner = [lp[k] for k in ("x", "i") if k in lp]
    sch.reorder(*red, *inner)
    for loop in inner:
        sch.unroll(loop)
    if red:
        sch.decompose_reduction(apop, red[0])


PAR_MIN_TASKS = 32  # fewer (row, pixel tile) tasks than this: channel groups are parallel tasks too


def _few_tasks(sch, *loops) -> bool:
    """Too few (n, y, pixel tile) tasks to balance four cores (7 rows: 2 rounds of 4, 7/8 busy): then the
    channel groups join them (apop is recomputed per group: 9 adds per pixel plane, beside a popc tile)."""
    import math

    return math.prod(int(sch.get(lp).extent) for lp in loops) < PAR_MIN_TASKS


def schedule_fused(sch, *, xt: int, lanes: int, chunks: bool = False, pt: int | None = None,
                   asm: bool = False) -> None:
    """Per (row, pixel tile, group of output words): the popc tile over `lanes` channels (as many
    whole output words as fit), then per word the glue (combine + shift/offset/clip + residual,
    vectorized over the word's channels) and the bitpack; apop once per pixel tile. All tiles are
    local to the loops that use them (bitpack fusion: only packed codes are written)."""
    pack, glue = sch.get_sblock("pack"), sch.get_sblock("glue")
    pn, py, px, pw, pb, pk = sch.get_loops(pack)
    o = _shape(sch, "conv")[3]
    wbits = WORD_BITS[str(sch.get(pack).writes[0].source.dtype)]
    nwords = -(-o // wbits)
    full = o % wbits == 0  # a partial last word leaves predicated (scalar) loops
    group = max(d for d in range(1, max(1, lanes // wbits) + 1) if nwords % d == 0) if full else 1
    pxo, pxi = sch.split(px, [None, xt])
    pwo, pwi = sch.split(pw, [None, group])
    sch.reorder(pn, py, pxo, pwo, pwi, pxi, pb, pk)
    planes = has_block(sch, "bits")  # pack_planes: whole words, a vector bitpack
    if not planes:
        sch.unroll(pk)
    few = _few_tasks(sch, pn, py, pxo)
    par = sch.fuse(pn, py, pxo, pwo) if few else sch.fuse(pn, py, pxo)
    sch.parallel(par)
    pxo, pwo = par, (par if few else pwo)
    fext = min(o, wbits)
    sch.compute_inline(sch.get_sblock("conv"))
    if planes:
        bits = sch.get_sblock("bits")
        sch.compute_at(bits, pwi)
        sch.set_scope(bits, 0, TILE_SCOPE)
    sch.compute_at(glue, pwi)
    sch.set_scope(glue, 0, TILE_SCOPE)
    popc, apop = sch.get_sblock("popc"), sch.get_sblock("apop")
    sch.compute_at(popc, pwo)
    sch.set_scope(popc, 0, TILE_SCOPE)
    sch.compute_at(apop, pxo)
    sch.set_scope(apop, 0, TILE_SCOPE)
    gskip = 2 if few else 3  # fused(n, y, pxo[, pwo]), [pwo], pwi
    gl = named_loops(sch, glue, skip=gskip, extents={"x": xt, "f": fext})
    if "f" in gl and full:
        sch.vectorize(gl["f"])
    if "x" in gl:
        sch.unroll(gl["x"])
    if planes:
        nbits = _shape(sch, "pack")[4]
        bl = named_loops(sch, bits, skip=gskip, extents={"x": xt, "b": nbits, "f": fext})
        sch.vectorize(bl["f"])
        for k in ("x", "b"):
            if k in bl:
                sch.unroll(bl[k])
        for lp in (pxi, pb):
            if int(sch.get(lp).extent) > 1:
                sch.unroll(lp)
        sch.decompose_reduction(pack, pk)
        sch.tensorize(pk, pack_intrin(str(sch.get(pack).writes[0].source.dtype)))
    _schedule_popc(sch, skip=gskip - 1, xt=xt, fext=fext * group, lanes=lanes, vectorize=full, pt=pt,
                   form="asm" if asm else "chunks" if chunks else "ld1r")
    _schedule_apop(sch, skip=1, xt=xt)
    _schedule_pcnt(sch)


def schedule_int32(sch, *, xt: int, lanes: int, chunks: bool = False, pt: int | None = None,
                   asm: bool = False) -> None:
    """int32 accumulators out (the unfused graph, shortcut convs): [n*y parallel], x tile, lane group:
    popc tile, then combine vectorized into the output; apop once per pixel tile."""
    conv = sch.get_sblock("conv")
    o = _shape(sch, "conv")[3]
    vec = max(d for d in range(1, min(o, lanes) + 1) if o % d == 0)
    n, y, x, f = sch.get_loops(conv)
    xo, xi = sch.split(x, [None, xt])
    fo, fi = sch.split(f, [None, vec])
    sch.reorder(n, y, xo, fo, xi, fi)
    few = _few_tasks(sch, n, y, xo)
    par = sch.fuse(n, y, xo, fo) if few else sch.fuse(n, y, xo)
    sch.parallel(par)
    xo, fo = par, (par if few else fo)
    popc, apop = sch.get_sblock("popc"), sch.get_sblock("apop")
    sch.compute_at(popc, fo)
    sch.set_scope(popc, 0, TILE_SCOPE)
    sch.compute_at(apop, xo)
    sch.set_scope(apop, 0, TILE_SCOPE)
    sch.vectorize(fi)
    sch.unroll(xi)
    _schedule_popc(sch, skip=1 if few else 2, xt=xt, fext=vec, lanes=lanes, vectorize=vec > 1, pt=pt,
                   form="asm" if asm else "chunks" if chunks else "ld1r")
    _schedule_apop(sch, skip=1, xt=xt)
    _schedule_pcnt(sch)
