"""The int8 Winograd F(2x2, 3x3) multiply step for the Cortex-A53 in A64 assembly: one position's M block.

C[i, j] = sum over CI of V[k, i] * U[k, j] (int16 x int16 -> int32; V 8 tiles, U 8 channels, 16 bytes a
step each), written into M's (tile, channel quad, position, lane) layout: C[i, q, 0, l] at i * s0 + q * s1
ints. Per step 16 by-lane `smlal` / `smlal2` (accumulators v16-v31, tile i's channels 0-3 / 4-7 in
v16+2i / v17+2i; step 0 `smull` / `smull2`, so nothing is zeroed and M is written, not read).

Why not LLVM's code for the same step (gemm_int8_widen16's SMLAL_8x8, tensorized): it loads both operands
with `ldp q` right before their multiplies; on the A53 a vector load does not pair with a Q-form NEON op
(a53.py `vld_pairs_q_neon`, NCNN) and a 128-bit load holds the load pipe two cycles (TRM: 64-bit L1 read
path), so each 16-op step took 20 modelled cycles. Here each operand is `ldr d` (1 cycle) + `ldr x` into a
general register beside a `smlal` (NCNN: "64bit integer load can be dual issued with fmla") + `ins v.d[1],
x` beside the other operand's `ldr d` (NCNN: "64bit vector load and 64bit vector insert can be dual
issued"): two non-NEON cycles a step, 18. The operands are loaded two steps ahead (three register sets,
v0-v5: A in v0/v2/v4, the by-lane operand, which must be in v0-v15; B in v1/v3/v5), so every `smlal`
reads registers whose load / `ins` issued >= 9 cycles earlier (GCC: load 3-4, neon_from_gp 4) and each
accumulator is updated once every 18 cycles (GCC neon_mla 4).

The kernel is an LLVM IR function whose body is one inline-asm statement (as gemm_int8_a53_ldr64), linked
by `pragma_import_llvm` and called with `call_extern` from the tensorized M block. aarch64 only.
"""
from __future__ import annotations

NAME = "edge_a53_wino_smlal_8x8"
PERIOD = 3  # steps in the loop body: one turn of the three operand sets


def _set(s: int) -> tuple[int, int]:
    """(A, B) vector registers of step s."""
    r = s % 3
    return 2 * r, 2 * r + 1


def _qop(s: int, first: bool, n: int) -> str:
    a, b = _set(s)
    i, hi = n // 2, n % 2
    mn = ("smull" if first else "smlal") + ("2" if hi else "")
    return f"{mn} v{16 + 2 * i + hi}.4s, v{b}.{'8h' if hi else '4h'}, v{a}.h[{i}]"


def _step(s: int, ci: int, total: int, adv: int, pending: str | None, extra: dict | None = None,
          stores: dict | None = None) -> tuple[list[str], str | None]:
    """Step s's lines (of `total` steps, `ci` a position: its 16 ops, the loads of step s+2 if any, offsets
    less `adv` bytes); pending: the `ins` of the previous step's B, issued beside this step's first `ldr d`
    (or alone first); extra / stores: lines after / before op n."""
    extra, stores = extra or {}, stores or {}
    q = [_qop(s, s % ci == 0, n) for n in range(16)]
    pre = [stores.get(n, []) for n in range(16)]
    post = [extra.get(n, []) for n in range(16)]
    out: list[str] = []

    def op(n):
        return [*pre[n], q[n], *post[n]]

    if s + 2 < total:
        a, b = _set(s + 2)
        off = (s + 2) * 16 - adv
        out += [f"ldr d{a}, [$0, #{off}]"] + ([pending] if pending else [])
        out += [*pre[0], q[0], f"ldr x9, [$0, #{off + 8}]", *post[0]]
        for n in range(1, 8):
            out += op(n)
        out += [f"ldr d{b}, [$1, #{off}]", f"ins v{a}.d[1], x9", *pre[8], q[8], f"ldr x10, [$1, #{off + 8}]", *post[8]]
        nxt = f"ins v{b}.d[1], x10"
    else:
        out += [pending] if pending else []
        out += op(0)
        for n in range(1, 9):
            out += op(n)
        nxt = None
    for n in range(9, 16):
        out += op(n)
    return out, nxt


def _creg(p: int) -> str:
    return "x14" if p % 2 else "x15"


def _stores(p: int) -> dict:
    """Position p's 16 accumulators to C (_creg(p) = C + 16 p, set in its last step), each just before the op
    that overwrites it (the next position's smull)."""
    r = _creg(p)
    return {n: [f"str q{16 + n}, [{r}]"] if n % 2 == 0 else [f"str q{16 + n}, [{r}, $6]", f"add {r}, {r}, $5"]
            for n in range(16)}


def kernel_lines(ci: int, npos: int = 1) -> list[str]:
    """The asm for npos positions of CI steps each: $0 A (V, 8 int16 a step, positions one after another),
    $1 B (U, the same), both advanced; $2 C, $5 / $6 C's tile / quad strides in bytes, a position 16 bytes."""
    total = ci * npos
    lines = ["ldr q0, [$0]", "ldr q1, [$1]"] + (["ldr q2, [$0, #16]", "ldr q3, [$1, #16]"] if total > 1 else [])
    pending, adv, label = None, 0, 0
    for p in range(npos):
        s0, s_end = p * ci, (p + 1) * ci
        head = 1
        # the loop: steps s0 + head .. s0 + head + PERIOD n - 1, each loading (s + 2 < total), one step left after
        n_loop = max(0, (min(s_end - 1, total - 2) - s0 - head) // PERIOD)
        set_c = {12: [f"add {_creg(p)}, $2, #{16 * p}"]}
        for s in range(s0, min(s0 + head, s_end)):
            out, pending = _step(s, ci, total, adv, pending, set_c if s == s_end - 1 else None,
                                 stores=_stores(p - 1) if p else None)
            lines += out
        if n_loop:
            label += 1
            lines += [f"mov x11, #{n_loop}", f"{label}:"]
            for m in range(PERIOD):
                last = m == PERIOD - 1
                extra = {10: [f"add $0, $0, #{16 * PERIOD}"], 12: [f"add $1, $1, #{16 * PERIOD}"],
                         13: ["subs x11, x11, #1"]} if last else None
                out, pending = _step(s0 + head + m, ci, total, adv, pending, extra)
                lines += out
            lines.append(f"b.ne {label}b")
            adv += 16 * PERIOD * n_loop
        for s in range(s0 + head + PERIOD * n_loop, s_end):
            out, pending = _step(s, ci, total, adv, pending, set_c if s == s_end - 1 else None)
            lines += out
    assert pending is None
    for _n, st in sorted(_stores(npos - 1).items()):
        lines += st
    return lines


def llvm_ir(ci: int, npos: int = 1) -> str:
    """`i32 NAME(ptr C, ptr A, ptr B, i32 s0_ints, i32 s1_ints)`: the kernel for one (CI, npos) as LLVM IR."""
    text = "\\0A".join(kernel_lines(ci, npos))
    clobbers = ",".join([f"~{{x{i}}}" for i in (9, 10, 11, 14, 15)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{_name(ci, npos)}(ptr %c, ptr %a, ptr %b, i32 %s0, i32 %s1) {{\nentry:\n"
            "  %s0b = mul i32 %s0, 4\n  %t = sext i32 %s0b to i64\n"
            "  %s1b = mul i32 %s1, 4\n  %q = sext i32 %s1b to i64\n"
            f"  %r = call {{ ptr, ptr }} asm sideeffect \"{text}\", \"=r,=r,r,0,1,r,r,{clobbers}\""
            "(ptr %c, ptr %a, ptr %b, i64 %t, i64 %q)\n  ret i32 0\n}\n")


def _name(ci: int, npos: int) -> str:
    return f"{NAME}_ci{ci}_p{npos}"


def intrin(ci: int, npos: int = 1) -> str:
    """The tensor intrinsic for one (CI, npos) (registered once): C[i, q, p, l] = sum_k A[p, k, i] * B[p, k, 4q + l]."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    name = _name(ci, npos)
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        A = T.match_buffer(a, (npos, ci, 8), "int16", offset_factor=1)
        B = T.match_buffer(b, (npos, ci, 8), "int16", offset_factor=1)
        C = T.match_buffer(c, (8, 2, npos, 4), "int32", offset_factor=1, strides=[s0, s1, 4, 1])
        with T.sblock("root"):
            T.reads(A[0:npos, 0:ci, 0:8], B[0:npos, 0:ci, 0:8])
            T.writes(C[0:8, 0:2, 0:npos, 0:4])
            for i, q, p, lane, k in T.grid(8, 2, npos, 4, ci):
                with T.sblock("update"):
                    vi, vq, vp, vl, vk = T.axis.remap("SSSSR", [i, q, p, lane, k])
                    T.reads(C[vi, vq, vp, vl], A[vp, vk, vi], B[vp, vk, vq * 4 + vl])
                    T.writes(C[vi, vq, vp, vl])
                    with T.init():
                        C[vi, vq, vp, vl] = 0
                    C[vi, vq, vp, vl] = C[vi, vq, vp, vl] + T.Cast("int32", A[vp, vk, vi]) * T.Cast("int32", B[vp, vk, vq * 4 + vl])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        A = T.match_buffer(a, (npos, ci, 8), "int16", offset_factor=1)
        B = T.match_buffer(b, (npos, ci, 8), "int16", offset_factor=1)
        C = T.match_buffer(c, (8, 2, npos, 4), "int32", offset_factor=1, strides=[s0, s1, 4, 1])
        with T.sblock("root"):
            T.reads(A[0:npos, 0:ci, 0:8], B[0:npos, 0:ci, 0:8])
            T.writes(C[0:8, 0:2, 0:npos, 0:4])
            T.evaluate(T.call_extern("int32", name, C.access_ptr("w"), A.access_ptr("r"), B.access_ptr("r"), s0, s1))

    TensorIntrin.register(name, desc, impl)
    return name


# ---- channels-last V: the by-lane operand over 8 input channels (V of a tile is 8 contiguous channels) ----
#
# C[i, q, p, l] = sum_k A[p, k // 8, i, k % 8] * B[p, k, 4q + l]: per 8-channel block kb of position p, V_i = A[p, kb, i]
# (v0-v7, tile i) and U_k = B[p, kb + j] (v8-v11, step j), 8 steps of 16 by-lane ops: smlal acc(2i+h) +=
# U_j.{4h,8h} * V_i.h[j]. V in this layout is computed by channel vectors (contiguous NHWC taps, no
# gathers). Loads: U two steps ahead (as above); V_i of the next block in the block's last step, right
# after V_i's last use there (ldr d / ldr x / ins, each ins beside a later ldr d), V7 in the next block's first
# step. One call: a tile block's 16 positions; positions 1-14 one loop body, a loop over the middle blocks.
NAME_CL = "edge_a53_wino_smlal_cl"
_VG = ("x10", "x11", "x13")  # V_i's general register: _VG[i % 3]


def _qop_cl(j: int, u: int, first: bool, n: int) -> str:
    i, hi = n // 2, n % 2
    mn = ("smull" if first else "smlal") + ("2" if hi else "")
    return f"{mn} v{16 + n}.4s, v{u}.{'8h' if hi else '4h'}, v{i}.h[{j}]"


def _position_cl(ci: int, *, prev: bool, nxt: bool, first_call: bool, last_call: bool) -> list[str]:
    """One position's code (pointers at the position's start: $0 its V rows, $1 its U rows)."""
    nkb = ci // 8
    n_it = max(0, nkb - 2)
    out: list[str] = []
    for kb in ([0] + ([1] if n_it else []) + ([nkb - 1] if nkb >= 2 else [])):
        looped = n_it and kb == 1
        adv_a = adv_b = 128 * max(0, kb - 1)
        last_block = kb == nkb - 1
        if looped:
            out += [f"mov x16, #{n_it}", "2:"]
        for j in range(8):
            s = kb * 8 + j  # step within the position
            u = 8 + (s % 4)
            pre: dict[int, list[str]] = {n: [] for n in range(16)}
            post: dict[int, list[str]] = {n: [] for n in range(16)}
            load_u = not (last_call and last_block and j >= 6)
            if load_u:  # U of step s + 2 (maybe the next position's first steps)
                off = (s + 2) * 16 - adv_b
                pre[0] += [f"ldr d{8 + (s + 2) % 4}, [$1, #{off}]"]
                post[0] += [f"ldr x9, [$1, #{off + 8}]"]
            if not (s == 0 and first_call) and not (last_call and s + 1 >= 8 * nkb):  # U(s + 1)'s high half
                pre[0] += [f"ins v{8 + (s + 1) % 4}.d[1], x9"]
            if j == 0 and not (kb == 0 and first_call):  # V7 of this block; V5, V6 of the last one's loads
                off = kb * 128 + 7 * 16 - adv_a
                pre[0] += [f"ldr d7, [$0, #{off}]", f"ins v5.d[1], {_VG[5 % 3]}"]
                post[1] += [f"ldr {_VG[7 % 3]}, [$0, #{off + 8}]"]
                pre[2] += [f"ins v6.d[1], {_VG[6 % 3]}"]
                pre[5] += [f"ins v7.d[1], {_VG[7 % 3]}"]
            if j == 7 and not (last_call and last_block):  # V0-V6 of the next block (maybe the next position's)
                for i in range(7):
                    off = ((kb + 1) * 128 if not last_block else 16 * ci) + i * 16 - adv_a
                    pre[2 * i + 2] += [f"ldr d{i}, [$0, #{off}]"] + ([f"ins v{i - 2}.d[1], {_VG[(i - 2) % 3]}"] if i >= 2 else [])
                    post[2 * i + 2] += [f"ldr {_VG[i % 3]}, [$0, #{off + 8}]"]
            if j == 0 and kb == 0 and prev:  # the last position's sums, each before the smull that reuses it
                for n in range(16):
                    pre[n] = ([f"str q{16 + n}, [x15]"] if n % 2 == 0 else
                              [f"str q{16 + n}, [x15, $6]", "add x15, x15, $5"]) + pre[n]
                post[15] += ["sub x15, x15, x12"]
            if looped and j == 7:
                post[3] += ["add $1, $1, #128"]
                post[13] += ["subs x16, x16, #1"]
                post[15] += ["add $0, $0, #128"]
            if last_block and j == 7 and nxt:
                post[15] += [f"add $0, $0, #{16 * ci - 128 * n_it}", f"add $1, $1, #{16 * ci - 128 * n_it}"]
            for n in range(16):
                out += pre[n] + [_qop_cl(j, u, kb == 0 and j == 0, n)] + post[n]
        if looped:
            out.append("b.ne 2b")
    return out


def kernel_lines_cl(ci: int, npos: int = 16) -> list[str]:
    """The asm (CI a multiple of 8, npos >= 3 positions): $0 A (V by 8-channel blocks, each 8 tiles x 8 channels
    int16: one stream), $1 B (U, CI x 8 int16 a position), both advanced; $2 C, $5 / $6 C's tile / quad strides in bytes."""
    assert ci % 8 == 0 and npos >= 3
    lines = ["lsl x12, $5, #3", "sub x12, x12, #16", "mov x15, $2"]
    lines += [f"ldp q{i}, q{i + 1}, [$0, #{i * 16}]" for i in range(0, 8, 2)] + ["ldp q8, q9, [$1]"]
    lines += _position_cl(ci, prev=False, nxt=True, first_call=True, last_call=False)
    lines += [f"mov x17, #{npos - 2}", "3:"]
    lines += _position_cl(ci, prev=True, nxt=True, first_call=False, last_call=False)
    lines += ["subs x17, x17, #1", "b.ne 3b"]
    lines += _position_cl(ci, prev=True, nxt=False, first_call=False, last_call=True)
    for n in range(16):
        lines += [f"str q{16 + n}, [x15]"] if n % 2 == 0 else [f"str q{16 + n}, [x15, $6]", "add x15, x15, $5"]
    return lines


def llvm_ir_cl(ci: int, npos: int = 16) -> str:
    """`i32 NAME_CL_ciN(ptr C, ptr A, ptr B, i32 s0_ints, i32 s1_ints)` as LLVM IR (kernel_lines_cl)."""
    text = "\\0A".join(kernel_lines_cl(ci, npos))
    clobbers = ",".join([f"~{{x{i}}}" for i in range(9, 18)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{NAME_CL}_ci{ci}_p{npos}(ptr %c, ptr %a, ptr %b, i32 %s0, i32 %s1) {{\nentry:\n"
            "  %s0b = mul i32 %s0, 4\n  %t = sext i32 %s0b to i64\n"
            "  %s1b = mul i32 %s1, 4\n  %q = sext i32 %s1b to i64\n"
            f"  %r = call {{ ptr, ptr }} asm sideeffect \"{text}\", \"=r,=r,r,0,1,r,r,{clobbers}\""
            "(ptr %c, ptr %a, ptr %b, i64 %t, i64 %q)\n  ret i32 0\n}\n")


def intrin_cl(ci: int, npos: int = 16) -> str:
    """The tensor intrinsic (registered once): C[i, q, p, l] = sum_k A[p, k // 8, i, k % 8] * B[p, k, 4q + l]."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    name = f"{NAME_CL}_ci{ci}_p{npos}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        A = T.match_buffer(a, (npos, ci // 8, 8, 8), "int16", offset_factor=1)
        B = T.match_buffer(b, (npos, ci, 8), "int16", offset_factor=1)
        C = T.match_buffer(c, (8, 2, npos, 4), "int32", offset_factor=1, strides=[s0, s1, 4, 1])
        with T.sblock("root"):
            T.reads(A[0:npos, 0:ci // 8, 0:8, 0:8], B[0:npos, 0:ci, 0:8])
            T.writes(C[0:8, 0:2, 0:npos, 0:4])
            for i, q, p, lane, k in T.grid(8, 2, npos, 4, ci):
                with T.sblock("update"):
                    vi, vq, vp, vl, vk = T.axis.remap("SSSSR", [i, q, p, lane, k])
                    T.reads(C[vi, vq, vp, vl], A[vp, vk // 8, vi, vk % 8], B[vp, vk, vq * 4 + vl])
                    T.writes(C[vi, vq, vp, vl])
                    with T.init():
                        C[vi, vq, vp, vl] = 0
                    C[vi, vq, vp, vl] = C[vi, vq, vp, vl] + T.Cast("int32", A[vp, vk // 8, vi, vk % 8]) * T.Cast("int32", B[vp, vk, vq * 4 + vl])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        s0, s1 = T.int32(), T.int32()
        A = T.match_buffer(a, (npos, ci // 8, 8, 8), "int16", offset_factor=1)
        B = T.match_buffer(b, (npos, ci, 8), "int16", offset_factor=1)
        C = T.match_buffer(c, (8, 2, npos, 4), "int32", offset_factor=1, strides=[s0, s1, 4, 1])
        with T.sblock("root"):
            T.reads(A[0:npos, 0:ci // 8, 0:8, 0:8], B[0:npos, 0:ci, 0:8])
            T.writes(C[0:8, 0:2, 0:npos, 0:4])
            T.evaluate(T.call_extern("int32", name, C.access_ptr("w"), A.access_ptr("r"), B.access_ptr("r"), s0, s1))

    TensorIntrin.register(name, desc, impl)
    return name
