"""The A53 popc register tile in A64 assembly: and/cnt/uadalp with ncnn's A53 load pattern.

popc[x, i, j, f] += sum over (ry, rx, rc) of popcount(A[ry, x*st + rx, rc, i] & W[ry, rx, rc, j, f]) for one
tile of xt pixels x pt activation planes x wb weight planes x L = 8q output channels (popc.py's register
tile, schedule.pop_tile), the whole (ry, rx, rc) reduction in one call. A is the packed (padded) input,
one uint16 word per (pixel, word, plane); W the tile's weights in the grouped layout (ConvSpec.w_group = L:
contiguous across the whole reduction, K = q*wb 128-bit registers a word step).

Why not LLVM's code for the same loop (popc._schedule_popc, vectorized): it loads each 128-bit weight with
`ldr q` (a 128-bit load holds the load pipe 2 cycles and takes both issue slots in its first: GCC
f_load_many, a53.py load_path_bytes) and spaces and -> cnt -> uadalp by less than their 4-cycle latency
(GCC cortex_a53_fpalu 4; a53.py fp_alu): the layer1 hot block was 134 modelled cycles against its 100-cycle
NEON bound. Here every Q-form op (and, cnt, uadalp: slot 0 only, one a cycle, GCC advsimd_alu_q) is
spaced 4 Q ops from its producer by rotating the three stages over temporaries (and m, cnt m-1, uadalp
m-2); each weight register is one 64-bit `ldr d` (NCNN: a vector load does not dual-issue with a Q op),
its high half by `ldr x` beside a Q op (NCNN: "64bit integer load can be dual issued with fmla") and `ins`
beside the next vector load (NCNN: "64bit vector load and 64bit vector insert can be dual issued"); each
activation word is one `ld1r` broadcast (post-indexed: no address op). Loads for the next word step are
issued as soon as this step's last `and` reading the register has issued, so no `and` waits for a load.
Per word step: 3*M Q ops + nB + K vector-load cycles (M = accumulators, nB = xt*pt broadcasts).

The kernel is an LLVM IR function whose body is one inline-asm statement (like ops/conv1x1_gemm_a53.py),
linked by the `pragma_import_llvm` annotation and called with call_extern from the tensorized tile.
aarch64 targets only (schedule.schedule_conv2d's arch gate).
"""
from __future__ import annotations

from dataclasses import dataclass

PREFIX = "edge_a53_popc"
_PIX = 9       # pixel pointers x9.. (at most 8)
_SKIP = "x17"  # post-index of a pixel's last plane load when pt < a_bits
_GPR = ("x19", "x20", "x21", "x22")  # ldr x temporaries (high weight halves)
_CNT, _W = "x23", "x24"
_CADDR = ("x25", "x26", "x27")
_CLOBBER_X = tuple(range(9, 18)) + tuple(range(19, 28))


# Where the kernel is the rule (each layer priced alone under qemu + libtiming, modelled pi3, 1 thread, LLVM's
# tile -> this one): its fixed cost a call (zeroing, the first loads, the rotation's tail, the accumulators'
# stores: ~90 cycles) against ~4 cycles a word step saved, so at least MIN_STEPS steps: 3x3 64 -> 64 @56 (36
# steps) 8.05 -> 8.00 M, 128 @28 7.44 -> 7.21, 256 @14 7.25 -> 6.89, 1x1 512 @14 (32) 3.74 -> 3.71; lost: 1x1
# 256 @28 (16) 4.01 -> 4.23, 1x1 64 -> 128 stride 2 (4) 0.95 -> 1.08. And at least 3 weight registers a step
# (the ldr d + ldr x + ins pattern): the 7-wide tiles (7 px x 2 q, weights by ldr q) were no better than
# LLVM's, 3x3 512 @7 7.15 -> 7.10, 1x1 1024 @7 (64 steps) 3.37 -> 3.47.
MIN_STEPS = 32
MIN_WEIGHT_REGS = 3


@dataclass(frozen=True)
class AsmTile:
    """One kernel: the register tile (xt, pt, wb, q) and the reduction's static shape."""

    xt: int
    pt: int
    wb: int
    q: int
    kh: int
    steps: int      # word steps per kernel row: KW * Cw (a row of taps is contiguous in the packed input)
    a_bits: int     # planes per input word (the packed input's innermost extent)

    @property
    def nb(self) -> int:
        return self.xt * self.pt

    @property
    def k(self) -> int:
        return self.q * self.wb

    @property
    def m(self) -> int:
        return self.nb * self.k

    @property
    def rotation(self) -> tuple[int, int]:
        """(temporaries T, spacing d) of the and -> cnt -> uadalp rotation: group m issues and m, cnt m-d,
        uadalp m-2d, so a consumer issues >= 3d + 1 cycles after its producer; T > 2d registers, dividing M
        so the rotation is the same every word step. d = 2 where the registers allow (7 cycles: GCC's
        fpalu latency is 4, LLVM's A53 model, which llvm-mca uses, charges more), else d = 1 (4 cycles)."""
        free = 16 - self.nb - self.k
        for d in (2, 1):
            t = next((t for t in range(2 * d + 1, free + 1) if self.m % t == 0), 0)
            if t:
                return t, d
        return 0, 1

    @property
    def temps(self) -> int:
        return self.rotation[0]

    @property
    def name(self) -> str:
        return (f"{PREFIX}_x{self.xt}p{self.pt}w{self.wb}q{self.q}_k{self.kh}s{self.steps}a{self.a_bits}")


def fits(t: AsmTile) -> bool:
    """Whether the kernel exists for this tile: <= 16 accumulators (v16-v31), <= 8 pixels, the broadcasts,
    weights and a temporary rotation in v0-v15."""
    return t.m <= 16 and t.xt <= 8 and t.temps >= 3 and t.steps >= 1 and t.kh >= 1


def _acc(t: AsmTile, b: int, k: int) -> int:
    return 16 + b * t.k + k


def _bv(b: int) -> int:
    return b


def _wv(t: AsmTile, k: int) -> int:
    return t.nb + k


def _tv(t: AsmTile, s: int) -> int:
    return t.nb + t.k + s % t.temps


def _order(t: AsmTile) -> list[tuple[int, int]]:
    """(b, k) per accumulator step m: weight-major (a weight register dies after its nb `and`s, so the next
    step's load follows early), broadcast-major when one weight register serves the whole step."""
    if t.k >= 2:
        return [(b, k) for k in range(t.k) for b in range(t.nb)]
    return [(b, k) for b in range(t.nb) for k in range(t.k)]


def _bload(t: AsmTile, b: int) -> str:
    p, i = divmod(b, t.pt)
    post = _SKIP if (i == t.pt - 1 and t.pt < t.a_bits) else "#2"
    return f"ld1r {{v{_bv(b)}.8h}}, [x{_PIX + p}], {post}"


def _last_q(t: AsmTile) -> bool:
    """The step's last weight register by one `ldr q` (2 load cycles) when K <= 2: its first `and` in the
    next step comes right after that step's first vector load, so a deferred `ins` (4 cycles to its
    consumer, GCC r2f_cvt) would stall it (modelled: 55 -> 53 cycles a step for 7 pixels x 2 q)."""
    return t.k <= 2


def _step(t: AsmTile, loads: bool, adjust: bool) -> list[str]:
    """One word step: the 3-stage Q-op rotation over the M accumulators (and m, cnt m-1, uadalp m-2, the
    last two of the previous step finishing in this one); with `loads`, the next step's registers as soon
    as they are dead (`adjust`: the pixel pointers first move to the next kernel row). The last weight's
    high half (ldr x) and its `ins` are issued in the step after its `ldr d`, beside this step's first Q op
    and first vector load: at the end of a step there is no Q op left to pair the ldr x with."""
    order, m_all, last = _order(t), t.m, t.k - 1
    last_w = {k: max(m for m, (_b, kk) in enumerate(order) if kk == k) for k in range(t.k)}
    last_b = {b: max(m for m, (bb, _k) in enumerate(order) if bb == b) for b in range(t.nb)}
    step_bytes = t.k * 16
    out = [f"add x{_PIX + p}, x{_PIX + p}, $3" for p in range(t.xt)] if adjust else []
    carry = not _last_q(t)
    # ldr x waiting for a Q op to pair with; the carried one after the second (the previous step's last
    # `add` of the weight pointer is 2 cycles from an address read: a53.py alu_to_addr)
    late = ["", f"ldr {_GPR[last % 4]}, [{_W}, #{16 * last + 8}]"] if carry else []
    pending = [f"ins v{_wv(t, last)}.d[1], {_GPR[last % 4]}"] if carry else []  # waiting for a vector load
    for m, (b, k) in enumerate(order):
        pm, ppm = (m - t.rotation[1]) % m_all, (m - 2 * t.rotation[1]) % m_all
        qops = [f"and v{_tv(t, m)}.16b, v{_bv(b)}.16b, v{_wv(t, k)}.16b",
                f"cnt v{_tv(t, pm)}.16b, v{_tv(t, pm)}.16b",
                f"uadalp v{_acc(t, *order[ppm])}.8h, v{_tv(t, ppm)}.16b"]
        for qop in qops:
            out += [qop] + [ln for ln in late[:1] if ln]
            late = late[1:]
        if not loads:  # no vector load to pair the ins with: alone, one group after its ldr x
            out, pending = out + pending, []
            continue
        vl = [(_bload(t, b), None)] if last_b[b] == m else []
        if last_w[k] == m:  # after the broadcast: the step's last `ins` waits for the next step's first load
            off = step_bytes + k * 16
            if k == last and not carry:
                vl.append((f"ldr q{_wv(t, k)}, [{_W}, #{off}]", None))
            else:
                vl.append((f"ldr d{_wv(t, k)}, [{_W}, #{off}]", k if k != last else None))
        for vld, k_gpr in vl:
            out.append(vld)
            out += pending
            pending = []
            if k_gpr is not None:
                late.append(f"ldr {_GPR[k_gpr % 4]}, [{_W}, #{step_bytes + k_gpr * 16 + 8}]")
                pending = [f"ins v{_wv(t, k_gpr)}.d[1], {_GPR[k_gpr % 4]}"]
    out += late + pending
    if loads:
        out.append(f"add {_W}, {_W}, #{step_bytes}")
    return out


def _c_pass(t: AsmTile, op: str) -> list[str]:
    """Load (ldp/ldr) or store (stp/str) the accumulators: C + p*cx + i*ci + j*cj + 16*qk."""
    ca, ci, cj = _CADDR
    out = [f"mov {ca}, $0"]
    for p in range(t.xt):
        out.append(f"mov {ci}, {ca}")
        for i in range(t.pt):
            out.append(f"mov {cj}, {ci}")
            for j in range(t.wb):
                regs = [_acc(t, p * t.pt + i, j * t.q + qk) for qk in range(t.q)]
                for r in range(0, t.q - 1, 2):
                    out.append(f"{op}p q{regs[r]}, q{regs[r + 1]}, [{cj}, #{16 * r}]")
                if t.q % 2:
                    out.append(f"{op}r q{regs[-1]}, [{cj}, #{16 * (t.q - 1)}]")
                out.append(f"add {cj}, {cj}, $7")
            out.append(f"add {ci}, {ci}, $6")
        out.append(f"add {ca}, {ca}, $5")
    return out


def _prologue(t: AsmTile) -> list[str]:
    # C = the sum (the intrinsic's init zeroes it): accumulators and the temporaries the first step's carried
    # cnt / uadalp read start at 0, beside the pointer setup (ALU ops pair with movi, GCC slot_any)
    zero = [f"movi v{r}.16b, #0" for r in [_acc(t, b, k) for b in range(t.nb) for k in range(t.k)]
            + [_tv(t, s) for s in range(t.temps)]]
    setup = [f"mov {_W}, $2", f"mov x{_PIX}, $1"] + [f"add x{_PIX + p}, x{_PIX + p - 1}, $4" for p in range(1, t.xt)]
    out = [ln for pair in zip(zero, setup + [""] * len(zero)) for ln in pair if ln]
    if t.pt < t.a_bits:
        out.append(f"mov {_SKIP}, #{2 * (t.a_bits - t.pt + 1)}")
    for k in range(t.k if _last_q(t) else t.k - 1):
        out.append(f"ldr q{_wv(t, k)}, [{_W}, #{16 * k}]")
    if not _last_q(t):  # its high half by the first step's carried ldr x and ins
        out.append(f"ldr d{_wv(t, t.k - 1)}, [{_W}, #{16 * (t.k - 1)}]")
    out += [_bload(t, b) for b in range(t.nb)]
    return out


def _loop(label: int, body: list[str], n: int) -> list[str]:
    """n copies of body: two a loop iteration (its taken branch costs a fetch bubble, a53.py taken_branch,
    once per two steps), an odd one before."""
    head = list(body) if n % 2 else []
    if n < 4:
        return head + body * (n // 2 * 2)
    return head + [f"mov {_CNT}, #{n // 2}", f"{label}:", *body, *body, f"subs {_CNT}, {_CNT}, #1", f"b.ne {label}b"]


def kernel_lines(t: AsmTile) -> list[str]:
    """The asm: $0 C, $1 A (the tile's first pixel, first plane), $2 W, $3 the pixel pointers' move to the
    next kernel row (bytes), $4 pixel step (bytes), $5-$7 C's x, i, j strides (bytes)."""
    lines = _prologue(t)
    pipe = _step(t, True, False)
    for ry in range(t.kh):
        last = ry == t.kh - 1
        lines += _loop(ry + 1, pipe, t.steps - 1)
        lines += _step(t, loads=not last, adjust=not last)
    # the rotation's tail: the last d accumulators' cnt, the last 2d uadalp
    order, m_all, d = _order(t), t.m, t.rotation[1]
    for m in range(m_all, m_all + 2 * d):
        if m - d < m_all:
            lines.append(f"cnt v{_tv(t, m - d)}.16b, v{_tv(t, m - d)}.16b")
        lines.append(f"uadalp v{_acc(t, *order[m - 2 * d])}.8h, v{_tv(t, m - 2 * d)}.16b")
    return lines + _c_pass(t, "st")


def llvm_ir(t: AsmTile) -> str:
    """`i32 NAME(ptr C, ptr A, ptr W, i32 row_words, i32 pixel_step_words, i32 cx, i32 ci, i32 cj)` (strides
    in uint16 elements; row_words: the input's row stride, the pointers' move is row - steps * a_bits)."""
    text = "\\0A".join(kernel_lines(t))
    clobbers = ",".join([f"~{{x{i}}}" for i in _CLOBBER_X] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    back = t.steps * t.a_bits
    conv = "".join(f"  %{n}w = sext i32 %{n} to i64\n  %{n}b = mul i64 %{n}w, 2\n" for n in ("row", "pix", "cx", "ci", "cj"))
    return (f"define i32 @{t.name}(ptr %c, ptr %a, ptr %w, i32 %row, i32 %pix, i32 %cx, i32 %ci, i32 %cj) {{\n"
            f"entry:\n{conv}  %adj = sub i64 %rowb, {2 * back}\n"
            f"  call void asm sideeffect \"{text}\", \"r,r,r,r,r,r,r,r,{clobbers}\""
            "(ptr %c, ptr %a, ptr %w, i64 %adj, i64 %pixb, i64 %cxb, i64 %cib, i64 %cjb)\n  ret i32 0\n}\n")


def _script(t: AsmTile, *, kw: int, cw: int, stride: int, impl: bool) -> str:
    """TVMScript of the intrinsic's description (or implementation): the target's loop nest has no
    unit-extent loops (compute_at drops them), so neither may the description's."""
    kh, xt, pt, wb, lanes = t.kh, t.xt, t.pt, t.wb, 8 * t.q
    win = (xt - 1) * stride + kw
    axes = [("ry", kh, "reduce"), ("rx", kw, "reduce"), ("rc", cw, "reduce"), ("x", xt, "spatial"),
            ("i", pt, "spatial"), ("j", wb, "spatial"), ("f", lanes, "spatial")]
    head = ["@T.prim_func(s_tir=True)", "def func(a: T.handle, w: T.handle, c: T.handle) -> None:",
            "    sa0, sa1, sa2, sc0, sc1, sc2 = T.int32(), T.int32(), T.int32(), T.int32(), T.int32(), T.int32()",
            f"    A = T.match_buffer(a, ({kh}, {win}, {cw}, {pt}), 'uint16', offset_factor=1, strides=[sa0, sa1, sa2, 1])",
            f"    W = T.match_buffer(w, ({kh}, {kw}, {cw}, {wb}, {lanes}), 'uint16', offset_factor=1)",
            f"    C = T.match_buffer(c, ({xt}, {pt}, {wb}, {lanes}), 'uint16', offset_factor=1, strides=[sc0, sc1, sc2, 1])",
            "    with T.sblock('root'):",
            f"        T.reads(A[0:{kh}, 0:{win}, 0:{cw}, 0:{pt}],"
            f" W[0:{kh}, 0:{kw}, 0:{cw}, 0:{wb}, 0:{lanes}])",
            f"        T.writes(C[0:{xt}, 0:{pt}, 0:{wb}, 0:{lanes}])"]
    if impl:
        return "\n".join(head + [f"        T.evaluate(T.call_extern('int32', '{t.name}', C.access_ptr('rw'),"
                                  f" A.access_ptr('r'), W.access_ptr('r'), sa0, sa1 * {stride}, sc0, sc1, sc2))"]) + "\n"
    loops = [(n, e) for n, e, _k in axes if e > 1]
    body = [f"        for {', '.join(n for n, _e in loops)} in T.grid({', '.join(str(e) for _n, e in loops)}):",
            "            with T.sblock('update'):"]
    ext = {n: e for n, e, _k in axes}  # the block's iterators: the non-unit ones, spatial first (as the target's)
    body += [f"                v{n} = T.axis.{k}({e}, {n})" for n, e, k in axes[3:] + axes[:3] if e > 1]
    v = {n: (f"v{n}" if e > 1 else "0") for n, e in ext.items()}
    c, a = f"C[{v['x']}, {v['i']}, {v['j']}, {v['f']}]", f"A[{v['ry']}, {v['x']} * {stride} + {v['rx']}, {v['rc']}, {v['i']}]"
    w = f"W[{v['ry']}, {v['rx']}, {v['rc']}, {v['j']}, {v['f']}]"
    body += [f"                T.reads({c}, {a}, {w})", f"                T.writes({c})",
             "                with T.init():", f"                    {c} = T.uint16(0)"]
    body.append(f"                {c} = {c} + T.popcount({a} & {w})")
    return "\n".join(head + body) + "\n"


def intrin(t: AsmTile, *, kw: int, cw: int, stride: int) -> str:
    """The tensor intrinsic for one kernel (registered once): C[x, i, j, f] += sum over (ry, rx, rc) of
    popcount(A[ry, x*stride + rx, rc, i] & W[ry, rx, rc, j, f])."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import from_source
    from tvm.script import tirx as T

    name = f"{t.name}_kw{kw}c{cw}s{stride}"
    if TensorIntrin.get(name, allow_missing=True) is None:
        desc, impl = (from_source(_script(t, kw=kw, cw=cw, stride=stride, impl=i), extra_vars={"T": T})
                      for i in (False, True))
        TensorIntrin.register(name, desc, impl)
    return name


def _src_and_stride(sch, popc_block):
    """(the packed input buffer the tile reads, the conv's stride: v_x's coefficient in its width index)."""
    from tvm.sym.pattern import detect_linear_equation

    blk = sch.get(popc_block)
    read = next(r for r in blk.reads if r.source.name not in ("weight", "popc"))
    x_var = blk.iter_vars[2].var
    coef = detect_linear_equation(read.region[2].min, [x_var])
    return read.source, (int(coef[0]) if len(coef) == 2 else 0)


def tensorize_popc(sch, popc_block, red0, *, xt: int, pt: int, lanes: int) -> bool:
    """Replace the popc tile's reduction nest under `red0` (ry, rx, rc, then pixels, planes, lanes) by the
    kernel when one fits; False (nothing changed) otherwise. The caller has ordered the loops; the weights
    must be in the tile's lane groups (ConvSpec.w_group == lanes) and the input a compact packed tensor."""
    from tvm import tirx

    blk = sch.get(popc_block)
    red = [int(iv.dom.extent) for iv in blk.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    wgt = next((r.source for r in blk.reads if r.source.name == "weight"), None)
    src, stride = _src_and_stride(sch, popc_block)
    _, _, _, a_bits, wb, _ = (int(d) for d in blk.writes[0].source.shape)
    shape = [int(d) for d in src.shape]
    if (wgt is None or len(wgt.shape) != 6 or int(wgt.shape[5]) != lanes or len(red) != 3 or stride < 1
            or str(src.dtype) != "uint16" or len(shape) != 5 or shape[3:] != [red[2], a_bits] or lanes % 8):
        return False
    kh, kw, cw = red
    t = AsmTile(xt=xt, pt=pt, wb=wb, q=lanes // 8, kh=kh, steps=kw * cw, a_bits=a_bits)
    if not fits(t) or kh * kw * cw < MIN_STEPS or t.k < MIN_WEIGHT_REGS:
        return False
    outer = sch.get_loops(popc_block)[0]
    sch.tensorize(red0, intrin(t, kw=kw, cw=cw, stride=stride))
    sch.annotate(outer, "pragma_import_llvm", llvm_ir(t))
    return True
