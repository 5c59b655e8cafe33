"""The float 12x8 GEMM register tile for the Cortex-A53, in A64 assembly (ncnn / Arm's A53 sgemm interleave).

C[12, 8] += A[K, 12]^T @ W[K, 8]: as conv1x1_gemm_a53 (same arguments, same intrinsic, row panels of 12
pixels instead of 8). 24 accumulators v8-v31 (pixel p, channels 4h..4h+3: v(8 + 2p + h)); per reduction
step 24 `fmla` by element read 3 pixel vectors (v0-v2, pixels 0-3 / 4-7 / 8-11) and 2 channel vectors
(v3-v4 and v5-v6, alternating steps).

Why a bigger tile: the A53 issues one Q-form `fmla` a cycle (GCC `cortex_a53_fp_mac_q`, slot 0 only), and a
128-bit operand costs one more cycle, its `ldr d` (NCNN: "64bit vector load cannot be dual issued with
fmla, wait 1 cycle"), the other half by `ldr x` beside an `fmla` and `ins` beside the next `ldr d` (NCNN;
a53.py vld_pairs_q_neon / ins_pairs_q_neon). The 8x8 tile loads 4 operands per 16 `fmla` (20 cycles a
step, 1.25x the floor); this one 5 per 24 (29 cycles, 1.21x), the shape of ncnn's and Arm Compute
Library's A53 sgemm (8x12, 24 accumulators). The step's fmla run in three groups of 8, one per pixel
vector; a pixel vector is reloaded for the next step as soon as its group is done (v0 after group 0, v1
after group 1), the third one (v2) at the start of the step that uses it, 16 `fmla` ahead; the channel
vectors alternate between two sets. Three `fmla` separate each `ldr d` / `ldr x` / `ins`, so `ldr x` ->
`ins` (GCC bypass load -> r2f_cvt 3) and `ins` -> `fmla` (GCC r2f_cvt 4) never stall.

The tile rounds the rows up to 12 (conv2d.gemm: the tail tile re-reads row m - 1 and stores nothing past
row m), so it is a per-layer candidate (compile/choice, conv2d.TILE_12X8) beside the 8x8 tile, priced.
"""
from __future__ import annotations

NAME = "edge_a53_sgemm_12x8"
MR, NR = 12, 8
_A = (0, 1, 2)                 # pixel vectors: pixels 0-3, 4-7, 8-11
_W = ((3, 4), (5, 6))          # channel vectors (channels 0-3, 4-7), by step parity
_GPR = ("x9", "x10")


def _acc(p: int, h: int) -> int:
    return 8 + 2 * p + h


def _fmlas(ws: tuple[int, int]) -> list[str]:
    """One step's 24 fmla: group g (pixels 4g..4g+3) reads pixel vector v{g}."""
    return [f"fmla v{_acc(p, h)}.4s, v{ws[h]}.4s, v{_A[p // 4]}.s[{p % 4}]"
            for g in range(3) for p in range(4 * g, 4 * g + 4) for h in (0, 1)]


def _step(ws: tuple[int, int], loads: list[tuple[int, str, int, int]], pending: list, tail=()) -> tuple[list, list]:
    """One reduction step: 24 fmla on channel set `ws`; `loads`: (vector, pointer, byte offset, first fmla)
    with each load's `ldr d` just before fmla number `first fmla` (its `ldr x` after the next one);
    `pending`: the previous load's `ins`. `tail`: lines paired one by one with the fmla before the last one
    (the loop's pointer updates and counter; the branch after the last fmla dual-issues with it). Returns
    (lines, the new pending `ins`)."""
    f = _fmlas(ws)
    at = {first: (v, ptr, off) for v, ptr, off, first in loads}
    out, gi = [], 0
    for i, line in enumerate(f):
        if i in at:
            v, ptr, off = at[i]
            g = _GPR[gi % 2]
            gi += 1
            out += [f"ldr d{v}, [{ptr}, #{off}]", *pending, line, f"ldr {g}, [{ptr}, #{off + 8}]"]
            pending = [f"ins v{v}.d[1], {g}"]
            continue
        out.append(line)
    if tail:  # beside the fmla before the last one: the loop's branch then pairs with the last fmla
        n = len(tail) + 1
        last = out[-n:]
        out = out[:-n]
        for line, extra in zip(last, tail):
            out += [line, extra]
        out.append(last[-1])
    return out, pending


def _loads(a_base: int, w_base: int, ws_next: tuple[int, int], last: bool) -> list:
    """A step's loads, A and W offsets of the step's own k at a_base / w_base: the step's third pixel vector,
    then (unless `last`) the next step's channel vectors and first two pixel vectors (after their groups)."""
    out = [(_A[2], "$0", a_base + 32, 0)]
    if not last:
        out += [(ws_next[0], "$1", w_base + 32, 3), (ws_next[1], "$1", w_base + 48, 6),
                (_A[0], "$0", a_base + 48, 9), (_A[1], "$0", a_base + 64, 16)]
    return out


def acc(p: int, h: int) -> int:
    """The accumulator of pixel p, channels 4h..4h+3 (the epilogue's view, conv1x1_gemm_a53_epilogue)."""
    return _acc(p, h)


def c_lines(op: str) -> list[str]:
    """The accumulators from (op "ldp") or to (op "stp") the C tile at $3, rows $4 bytes apart."""
    lines = ["mov x13, $3"]
    for p in range(MR):
        lines += [f"{op} q{_acc(p, 0)}, q{_acc(p, 1)}, [x13]"] + (["add x13, x13, $4"] if p < MR - 1 else [])
    return lines


def kernel_lines(head: list[str] | None = None, tail: list[str] | None = None) -> list[str]:
    """The asm: $0 A (12 floats a step), $1 W (8 a step), $2 K (even, >= 2; all three advanced), $3 C, $4 C's
    row stride in bytes. The loop's last `ins` (pixels 4-7 of the next step) goes beside the next
    iteration's first `ldr d`, so the prologue loads that vector the same way (its `ins` left pending).
    `head` / `tail`: what sets the accumulators before the loop and takes them after it (default: load
    and store the C tile; conv1x1_gemm_a53_epilogue: bias in, epilogue out; they may use v0-v7)."""
    lines = list(c_lines("ldp") if head is None else head)
    carried = [f"ins v{_A[1]}.d[1], {_GPR[0]}"]  # the last load of a step (5 loads: x9, x10, x9, x10, x9)
    lines += [f"ldr q{_A[0]}, [$0]", f"ldr d{_A[1]}, [$0, #16]", f"ldr {_GPR[0]}, [$0, #24]",
              f"ldp q{_W[0][0]}, q{_W[0][1]}, [$1]", "subs $2, $2, #2", "b.eq 2f", "1:"]
    a, pend = _step(_W[0], _loads(0, 0, _W[1], False), carried)
    b, pend = _step(_W[1], _loads(48, 32, _W[0], False), pend,
                    tail=("add $0, $0, #96", "add $1, $1, #64", "subs $2, $2, #2"))
    assert pend == carried
    lines += a + b + ["b.ne 1b", "2:"]
    a, pend = _step(_W[0], _loads(0, 0, _W[1], False), carried)
    b, pend = _step(_W[1], _loads(48, 32, _W[0], True), pend)
    # the last step's one load (v2, read from its fmla 16 on): its ins after the step's fmla 3
    lines += a + b[:7] + pend + b[7:]
    return lines + (c_lines("stp") if tail is None else tail)


def llvm_ir() -> str:
    """`i32 edge_a53_sgemm_12x8(ptr C, ptr A, ptr W, i32 K, i32 c_stride_floats)`: the kernel as LLVM IR."""
    text = "\\0A".join(kernel_lines())
    clobbers = ",".join([f"~{{x{i}}}" for i in (9, 10, 13)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{NAME}(ptr %c, ptr %a, ptr %w, i32 %k, i32 %ldc) {{\nentry:\n"
            "  %kk = sext i32 %k to i64\n  %ldc4 = mul i32 %ldc, 4\n  %s = sext i32 %ldc4 to i64\n"
            f"  %r = call {{ ptr, ptr, i64 }} asm sideeffect \"{text}\", \"=&r,=&r,=&r,r,r,0,1,2,{clobbers}\""
            "(ptr %c, i64 %s, ptr %a, ptr %w, i64 %kk)\n  ret i32 0\n}\n")
