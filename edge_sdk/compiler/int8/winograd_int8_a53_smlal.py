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


def _set(k: int) -> tuple[int, int]:
    """(A, B) vector registers of step k."""
    r = k % 3
    return 2 * r, 2 * r + 1


def _qop(k: int, n: int) -> str:
    a, b = _set(k)
    i, hi = n // 2, n % 2
    mn = ("smull" if k == 0 else "smlal") + ("2" if hi else "")
    return f"{mn} v{16 + 2 * i + hi}.4s, v{b}.{'8h' if hi else '4h'}, v{a}.h[{i}]"


def _step(k: int, ci: int, adv: int, pending: str | None, extra: dict | None = None) -> tuple[list[str], str | None]:
    """Step k's lines (its 16 ops, the loads of step k+2 if any, offsets less `adv` bytes); pending: the
    `ins` of the previous step's B, issued beside this step's first `ldr d` (or alone first)."""
    extra = extra or {}
    q = [_qop(k, n) for n in range(16)]
    out: list[str] = []
    if k + 2 < ci:
        a, b = _set(k + 2)
        off = (k + 2) * 16 - adv
        out += [f"ldr d{a}, [$0, #{off}]"] + ([pending] if pending else [])
        out += [q[0], f"ldr x9, [$0, #{off + 8}]"] + q[1:8]
        out += [f"ldr d{b}, [$1, #{off}]", f"ins v{a}.d[1], x9", q[8], f"ldr x10, [$1, #{off + 8}]"]
        rest, nxt = q[9:], f"ins v{b}.d[1], x10"
    else:
        out += [pending] if pending else []
        out += q[:9]
        rest, nxt = q[9:], None
    for n, line in enumerate(rest, start=9):
        out.append(line)
        out += extra.get(n, [])
    return out, nxt


def kernel_lines(ci: int) -> list[str]:
    """The asm for CI steps: $0 A (V, 8 int16 a step), $1 B (U, 8 int16 a step), both advanced by the loop;
    $2 C, $5 / $6 C's tile / quad strides in bytes."""
    lines = ["ldr q0, [$0]", "ldr q1, [$1]"] + (["ldr q2, [$0, #16]", "ldr q3, [$1, #16]"] if ci > 1 else [])
    # the loop: steps HEAD .. HEAD + PERIOD * n - 1, each of which loads (k + 2 < ci)
    head = 1
    n_loop = max(0, (ci - 2 - head) // PERIOD)
    pending = None
    for k in range(min(head, ci)):
        out, pending = _step(k, ci, 0, pending)
        lines += out
    if n_loop:
        lines += [f"mov x11, #{n_loop}", "1:"]
        for m in range(PERIOD):
            last = m == PERIOD - 1
            extra = {10: [f"add $0, $0, #{16 * PERIOD}"], 12: [f"add $1, $1, #{16 * PERIOD}"],
                     13: ["subs x11, x11, #1"]} if last else None
            out, pending = _step(head + m, ci, 0, pending, extra)
            lines += out
        lines.append("b.ne 1b")
    adv = 16 * PERIOD * n_loop
    for k in range(head + PERIOD * n_loop, ci):
        out, pending = _step(k, ci, adv, pending)
        lines += out
    assert pending is None
    lines.append("mov x12, $2")
    for i in range(8):
        lines += [f"str q{16 + 2 * i}, [x12]", f"str q{17 + 2 * i}, [x12, $6]", "add x12, x12, $5"]
    return lines


def llvm_ir(ci: int) -> str:
    """`i32 NAME_ciN(ptr C, ptr A, ptr B, i32 s0_ints, i32 s1_ints)`: the kernel for one CI as LLVM IR."""
    text = "\\0A".join(kernel_lines(ci))
    clobbers = ",".join([f"~{{x{i}}}" for i in (9, 10, 11, 12)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{NAME}_ci{ci}(ptr %c, ptr %a, ptr %b, i32 %s0, i32 %s1) {{\nentry:\n"
            "  %s0b = mul i32 %s0, 4\n  %t = sext i32 %s0b to i64\n"
            "  %s1b = mul i32 %s1, 4\n  %q = sext i32 %s1b to i64\n"
            f"  %r = call {{ ptr, ptr }} asm sideeffect \"{text}\", \"=r,=r,r,0,1,r,r,{clobbers}\""
            "(ptr %c, ptr %a, ptr %b, i64 %t, i64 %q)\n  ret i32 0\n}\n")


def intrin(ci: int) -> str:
    """The tensor intrinsic for one CI (registered once): C[i, q, 0, l] = sum_k A[k, i] * B[k, 4q + l]."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    name = f"{NAME}_ci{ci}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        s0, s1, s2 = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (ci, 8), "int16", offset_factor=1)
        B = T.match_buffer(b, (ci, 8), "int16", offset_factor=1)
        C = T.match_buffer(c, (8, 2, 1, 4), "int32", offset_factor=1, strides=[s0, s1, s2, 1])
        with T.sblock("root"):
            T.reads(A[0:ci, 0:8], B[0:ci, 0:8])
            T.writes(C[0:8, 0:2, 0, 0:4])
            for i, q, lane, k in T.grid(8, 2, 4, ci):
                with T.sblock("update"):
                    vi, vq, vl, vk = T.axis.remap("SSSR", [i, q, lane, k])
                    T.reads(C[vi, vq, 0, vl], A[vk, vi], B[vk, vq * 4 + vl])
                    T.writes(C[vi, vq, 0, vl])
                    with T.init():
                        C[vi, vq, 0, vl] = 0
                    C[vi, vq, 0, vl] = C[vi, vq, 0, vl] + T.Cast("int32", A[vk, vi]) * T.Cast("int32", B[vk, vq * 4 + vl])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        s0, s1, s2 = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (ci, 8), "int16", offset_factor=1)
        B = T.match_buffer(b, (ci, 8), "int16", offset_factor=1)
        C = T.match_buffer(c, (8, 2, 1, 4), "int32", offset_factor=1, strides=[s0, s1, s2, 1])
        with T.sblock("root"):
            T.reads(A[0:ci, 0:8], B[0:ci, 0:8])
            T.writes(C[0:8, 0:2, 0, 0:4])
            T.evaluate(T.call_extern("int32", name, C.access_ptr("w"), A.access_ptr("r"), B.access_ptr("r"), s0, s1))

    TensorIntrin.register(name, desc, impl)
    return name
