"""The int8 requantize of a strip's sums (gemm_int8_a53_strip, rows outer) in A64 assembly for the Cortex-A53.

out[i, j] = clamp(srshl(sqadd(h, (h & -s) >> 31), -s) + zp, lo, hi), h = sqrdmulh(C[i, j] + bias[j], mult[j]),
s = rshift[j]: fixedpoint.mbqm32_neon exactly (TFLite's NEON MultiplyByQuantizedMultiplier), for 4 rows x 4NT
channels (C (4, NT, 4) int32, rows 16 NT bytes apart; out int8 rows `os` bytes apart).

Why: LLVM's code for the same loop (4 rows unrolled, 4 lanes) is dependency-bound on the A53 in the model: ~213
cycles for ~125 instructions (NEON bound ~95), the ResNet18 stem's requantize 3.9 M modelled cycles. Here each
group of 8 channels runs its 8 vectors (4 rows x 2) through each op in turn: 8 independent ops between a value and
its next use (GCC: neon_mul 4 for SQRDMULH, a53.py vec_int_wide 3 for SQADD / SRSHL, vec_int_simple 2), and the
next group's operands load during this group's ops into the registers they free (params after their last use,
C into the fixup temporaries after SQADD), as ncnn's A53 loads: `ldr d`, `ldr x` beside a NEON op, `ins` beside
the next `ldr d` (a53.py vld_pairs_q_neon / ins_pairs_q_neon, NCNN). Two groups a loop body (the register banks
v0-v7 / v8-v15 swap data and temporaries), NT a multiple of 4.
"""
from __future__ import annotations

NAME = "edge_a53_requant_rows"
_B, _M, _S, _LO, _ZP, _HI = (24, 25), (26, 27), (28, 29), 23, 30, 31
_CROWS = ("$0", "x9", "x10", "x11")
_OROWS = ("$4", "x12", "x13", "x14")
_GPR = ("x15", "x16")


def _bank(p: int) -> tuple[list[int], list[int]]:
    """(data, temporaries) vector registers of a group of parity p."""
    lo, hi = list(range(0, 8)), list(range(8, 16))
    return (lo, hi) if p == 0 else (hi, lo)


def _loads_of(g_next: int, p_next: int) -> dict[str, list[tuple[int, str, int]]]:
    """The next group's loads by when they may issue: (vector register, base, byte offset from the body's start)."""
    d, _ = _bank(p_next)
    o = 32 * g_next
    params = [(_B[0], "$1", o), (_B[1], "$1", o + 16), (_M[0], "$2", o), (_M[1], "$2", o + 16)]
    cs = [(d[2 * r + h], _CROWS[r], o + 16 * h) for r in range(4) for h in range(2)]
    return {"bm": params, "c": cs, "s": [(_S[0], "$3", o), (_S[1], "$3", o + 16)]}


def _group(g: int, p: int, nxt: bool) -> list[str]:
    """One group's lines (g: its index in the loop body, 0 or 1; p its parity); nxt: load the next group's operands."""
    d, t = _bank(p)
    stages = [
        [f"add v{d[k]}.4s, v{d[k]}.4s, v{_B[k % 2]}.4s" for k in range(8)],
        [f"sqrdmulh v{d[k]}.4s, v{d[k]}.4s, v{_M[k % 2]}.4s" for k in range(8)],
        [f"and v{t[k]}.16b, v{d[k]}.16b, v{_S[k % 2]}.16b" for k in range(8)],
        [f"sshr v{t[k]}.4s, v{t[k]}.4s, #31" for k in range(8)],
        [f"sqadd v{d[k]}.4s, v{d[k]}.4s, v{t[k]}.4s" for k in range(8)],
        [f"srshl v{d[k]}.4s, v{d[k]}.4s, v{_S[k % 2]}.4s" for k in range(8)],
        [f"add v{d[k]}.4s, v{d[k]}.4s, v{_ZP}.4s" for k in range(8)],
        [f"smin v{d[k]}.4s, v{d[k]}.4s, v{_HI}.4s" for k in range(8)],
        [f"smax v{d[k]}.4s, v{d[k]}.4s, v{_LO}.4s" for k in range(8)],
        [x for r in range(4) for x in (f"xtn v{d[2 * r]}.4h, v{d[2 * r]}.4s",)]
        + [x for r in range(4) for x in (f"xtn2 v{d[2 * r]}.8h, v{d[2 * r + 1]}.4s",)]
        + [f"xtn v{d[2 * r]}.8b, v{d[2 * r]}.8h" for r in range(4)],
    ]
    # the next group's loads, each from the stage its register is free in: bias / mult after sqrdmulh (stage 1),
    # C into the temporaries after sqadd (stage 4), the shifts after srshl (stage 5); one load every two NEON ops
    queue = []
    if nxt:
        got = _loads_of(g + 1, 1 - p)
        queue = [(2, x) for x in got["bm"]] + [(5, x) for x in got["c"]] + [(6, x) for x in got["s"]]
    out: list[str] = []
    pending: list[str] = []
    k = 0
    for si, ops in enumerate(stages):
        if si == 9 and nxt:  # the next shifts negated once loaded
            ops = [f"neg v{_S[0]}.4s, v{_S[0]}.4s", f"neg v{_S[1]}.4s, v{_S[1]}.4s", *ops]
        for n, op in enumerate(ops):
            if queue and queue[0][0] <= si and n % 2 == 0:
                _, (v, base, off) = queue.pop(0)
                gp = _GPR[k % 2]
                k += 1
                out += [f"ldr d{v}, [{base}, #{off}]", *pending, op, f"ldr {gp}, [{base}, #{off + 8}]"]
                pending = [f"ins v{v}.d[1], {gp}"]
            else:
                out.append(op)
        if si == 8:  # the shifts' last ins before their neg
            out += pending
            pending = []
    assert not queue, "every next-group load placed"
    out += pending
    out += [f"str d{d[2 * r]}, [{_OROWS[r]}, #{8 * g}]" for r in range(4)]
    return out


def kernel_lines(nt: int) -> list[str]:
    """The asm for 4 rows x 4nt channels: $0 C, $1 bias, $2 mult, $3 rshift (all advanced), $4 out (advanced),
    $5 C's row stride, $6 out's row stride (bytes); w lo, zp, hi in the last three operands as 32-bit values."""
    if nt % 4 or nt < 4:
        raise ValueError(f"requant_int8_a53_rows: nt {nt} must be a multiple of 4")
    pairs = nt // 4  # loop bodies of two groups of 8 channels
    out = ["add x9, $0, $5", "add x10, x9, $5", "add x11, x10, $5",
           "add x12, $4, $6", "add x13, x12, $6", "add x14, x13, $6",
           "dup v23.4s, ${7:w}", "dup v30.4s, ${8:w}", "dup v31.4s, ${9:w}",
           "ldp q24, q25, [$1]", "ldp q26, q27, [$2]", "ldp q28, q29, [$3]",
           "ldp q0, q1, [$0]", "ldp q2, q3, [x9]", "ldp q4, q5, [x10]", "ldp q6, q7, [x11]",
           "neg v28.4s, v28.4s", "neg v29.4s, v29.4s"]
    adv = ["add $0, $0, #64", "add x9, x9, #64", "add x10, x10, #64", "add x11, x11, #64",
           "add $1, $1, #64", "add $2, $2, #64", "add $3, $3, #64",
           "add $4, $4, #16", "add x12, x12, #16", "add x13, x13, #16", "add x14, x14, #16"]
    body = _group(0, 0, True) + _group(1, 1, True)
    if pairs > 1:
        out += ["mov x17, #" + str(pairs - 1), "1:", *body, *adv, "subs x17, x17, #1", "b.ne 1b"]
    out += _group(0, 0, True) + _group(1, 1, False)
    return out


def func_name(nt: int, zp: int, lo: int, hi: int) -> str:
    tag = lambda v: f"m{-v}" if v < 0 else str(v)  # noqa: E731
    return f"{NAME}_nt{nt}_z{tag(zp)}_{tag(lo)}_{tag(hi)}"


def llvm_ir(nt: int, zp: int, lo: int, hi: int) -> str:
    """`i32 NAME(ptr C, ptr bias, ptr mult, ptr rshift, ptr out, i32 c_row_ints, i32 out_row_bytes)` as LLVM IR."""
    text = "\\0A".join(kernel_lines(nt))
    clobbers = ",".join([f"~{{x{i}}}" for i in range(9, 18)] + [f"~{{v{i}}}" for i in range(32)] + ["~{memory}", "~{cc}"])
    return (f"define i32 @{func_name(nt, zp, lo, hi)}(ptr %c, ptr %b, ptr %m, ptr %r, ptr %o, i32 %cs, i32 %os) {{\n"
            "entry:\n  %cs4 = mul i32 %cs, 4\n  %csb = sext i32 %cs4 to i64\n  %osb = sext i32 %os to i64\n"
            f"  %x = call {{ ptr, ptr, ptr, ptr, ptr }} asm sideeffect \"{text}\", "
            f"\"=r,=r,=r,=r,=r,r,r,r,r,r,0,1,2,3,4,{clobbers}\""
            f"(i64 %csb, i64 %osb, i32 {lo}, i32 {zp}, i32 {hi}, ptr %c, ptr %b, ptr %m, ptr %r, ptr %o)\n"
            "  ret i32 0\n}\n")


def intrin(nt: int, zp: int, lo: int, hi: int) -> str:
    """The tensor intrinsic (registered once): OUT[i, 4t + j] = clamp(mbqm32_neon(ACC[i, t, j] + BIAS[4t + j], MULT,
    RSHIFT) + zp, lo, hi) over 4 rows and nt channel tiles: the out block of gemm_int8_smull_neon's rows-outer strip."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    name = func_name(nt, zp, lo, hi)
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    n = 4 * nt

    @T.prim_func(s_tir=True)
    def desc(c: T.handle, b: T.handle, m: T.handle, r: T.handle, o: T.handle) -> None:
        sc, so = T.int32(), T.int32()
        ACC = T.match_buffer(c, (4, nt, 4), "int32", offset_factor=1, strides=[sc, 4, 1])
        BIAS = T.match_buffer(b, (n,), "int32", offset_factor=1)
        MULT = T.match_buffer(m, (n,), "int32", offset_factor=1)
        RSH = T.match_buffer(r, (n,), "int32", offset_factor=1)
        OUT = T.match_buffer(o, (4, n), "int8", offset_factor=1, strides=[so, 1])
        with T.sblock("root"):
            T.reads(ACC[0:4, 0:nt, 0:4], BIAS[0:n], MULT[0:n], RSH[0:n])
            T.writes(OUT[0:4, 0:n])
            for t, i, j in T.grid(nt, 4, 4):
                with T.sblock("out"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(n, t * 4 + j)
                    OUT[vi, vj] = T.Cast("int8", T.max(T.min(T.call_llvm_pure_intrin(
                        "int32", "llvm.aarch64.neon.srshl", T.call_llvm_pure_intrin(
                            "int32", "llvm.aarch64.neon.sqadd", T.call_llvm_pure_intrin(
                                "int32", "llvm.aarch64.neon.sqrdmulh", ACC[vi, vj // 4, vj % 4] + BIAS[vj], MULT[vj]),
                            (T.call_llvm_pure_intrin("int32", "llvm.aarch64.neon.sqrdmulh", ACC[vi, vj // 4, vj % 4]
                                                     + BIAS[vj], MULT[vj]) & 0 - RSH[vj]) >> 31),
                        0 - RSH[vj]) + zp, hi), lo))

    @T.prim_func(s_tir=True)
    def impl(c: T.handle, b: T.handle, m: T.handle, r: T.handle, o: T.handle) -> None:
        sc, so = T.int32(), T.int32()
        ACC = T.match_buffer(c, (4, nt, 4), "int32", offset_factor=1, strides=[sc, 4, 1])
        BIAS = T.match_buffer(b, (n,), "int32", offset_factor=1)
        MULT = T.match_buffer(m, (n,), "int32", offset_factor=1)
        RSH = T.match_buffer(r, (n,), "int32", offset_factor=1)
        OUT = T.match_buffer(o, (4, n), "int8", offset_factor=1, strides=[so, 1])
        with T.sblock("root"):
            T.reads(ACC[0:4, 0:nt, 0:4], BIAS[0:n], MULT[0:n], RSH[0:n])
            T.writes(OUT[0:4, 0:n])
            T.evaluate(T.call_extern("int32", name, ACC.access_ptr("r"), BIAS.access_ptr("r"), MULT.access_ptr("r"),
                                     RSH.access_ptr("r"), OUT.access_ptr("w"), sc, so))

    TensorIntrin.register(name, desc, impl)
    return name
