"""The 8-bit int8 4x4x16 GEMM tile for the Cortex-A53 in A64 assembly: ncnn's A53 operand loads.

C[4, 4] = sum over NB 16-byte blocks of A[b, i, :] . W[b, j, :] (int8, dot products in int32): A a
packed row tile (4 pixels' 16-byte blocks per step, gemm_int8_smull_neon's a8), W a packed weight panel
(4 channels' blocks per step, its pack_weight8), C the tile's 4x4 int32 sums (row stride given). C is
stored, not added to: the tensor intrinsic describes the whole reduction (zeroing included) and the caller
(gemm_int8_smull_neon._tensorize_asm) drops the zeroing the call makes dead; a C round trip (ldr q, add: a
vector load beside no NEON op and a load-use chain per row) gone from every tile. Per
16-deep step and (pixel i, channel j) pair: `smull t, a.8b, w.8b; smlal2 t, a.16b, w.16b` (8 int16
lanes, two products each: weights in [-127, 127]) and `sadalp acc, t` (the first step `saddlp`: no
zeroing); 16 accumulators v16-v31, 4 temporaries v12-v15, A's rows in v8-v11 (each reloaded once its
4 pairs are done), W in two sets v0-v3 / v4-v7 (even / odd steps).

Why not LLVM's code for the same step (SMULL_4x4): it loads the 8 operands with `ldr q`, and on the
A53 a vector load does not pair with a Q-form NEON op (a53.py `vld_pairs_q_neon`, NCNN): 16 load
cycles beside the 48 multiply / accumulate ops (64 a step). Here each 128-bit operand is `ldr d`
(1 cycle, NCNN: "64bit vector load cannot be dual issued with fmla"), `ldr x` into a general register
beside a NEON op (NCNN: "64bit integer load can be dual issued with fmla") and `ins v.d[1], x` beside
the next `ldr d` (NCNN: "64bit vector load and 64bit vector insert can be dual issued"): 8 load cycles,
56 a step. The ops are software-pipelined (pair p's smull, p-1's smlal2, p-2's sadalp: GCC
neon_mul / neon_mla latency 4 between them, all in flight), the loop body is two steps.

The kernel is an LLVM IR function whose body is one inline-asm statement (as ops/conv1x1_gemm_a53),
linked by `pragma_import_llvm` and called with `call_extern` from the tensorized tile. aarch64 only.
"""
from __future__ import annotations

NAME = "edge_a53_i8gemm_4x4x16"
SCHEDULE_STEP = "ldr64"
_W = ((0, 1, 2, 3), (4, 5, 6, 7))    # weight sets by step parity
_A = (8, 9, 10, 11)                  # pixel rows
_T = (12, 13, 14, 15)                # int16 temporaries
_GPR = ("x9", "x10", "x11", "x12")
_HEAD = 20                           # slots before the loop: step 0 (saddlp) and its last four accumulates


def _acc(p: int) -> int:
    return 16 + p % 16


def _qops(s: int, nq: int, half_from: int | None = None) -> list[str]:
    """The NEON ops of slot s (nq pairs in all): pair s-4's accumulate, pair s-2's smlal2, pair s's smull.
    Two slots (~7 cycles) between a pair's ops: GCC's neon_mul latency is 4, LLVM's A53 model says 6; the
    accumulate first, so smull s may take the temporary it frees. Pairs from half_from on (the last step
    of a half tail) have no smlal2."""
    out = []
    for p, kind in ((s - 4, "acc"), (s - 2, "smlal2"), (s, "smull")):
        if not 0 <= p < nq or (kind == "smlal2" and half_from is not None and p >= half_from):
            continue
        i, w, t = p % 16 // 4, _W[p // 16 % 2][p % 4], f"v{_T[p % 4]}"
        if kind == "smull":
            out.append(f"smull {t}.8h, v{_A[i]}.8b, v{w}.8b")
        elif kind == "smlal2":
            out.append(f"smlal2 {t}.8h, v{_A[i]}.16b, v{w}.16b")
        else:
            out.append(f"{'saddlp' if p < 16 else 'sadalp'} v{_acc(p)}.4s, {t}.8h")
    return out


def _loads(nb: int) -> dict[int, tuple[int, str, int]]:
    """slot -> (vector register, pointer operand, byte offset from the start) of the loads of steps 1..nb-1:
    step k's weights in slots 16(k-1)+3..6 (their set's last use, step k-2's smlal2, is at 16(k-1)+1),
    its rows 0-2 in 16(k-1)+7, 10, 14 and row 3 in 16k+2, each the slot after its last smlal2 in step k-1."""
    out = {}
    for k in range(1, nb):
        s0 = 16 * (k - 1)
        for j in range(4):
            out[s0 + 3 + j] = (_W[k % 2][j], "$1", k * 64 + j * 16)
        for i, o in enumerate((7, 10, 14)):
            out[s0 + o] = (_A[i], "$0", k * 64 + i * 16)
        out[16 * k + 2] = (_A[3], "$0", k * 64 + 48)
    return out


def _slot(s: int, nq: int, load, seq: int, advance: int, pending: list, last_load: int,
          half_from: int | None = None) -> tuple[list, list]:
    """Slot s's lines (its NEON ops, its load if any, beside the previous load's ins: each ins waits for the
    next `ldr d` to pair with, or the slot after the last load); returns (lines, pending). A load of the
    half tail's step (offset in its last 64 bytes) is the `ldr d` alone: smull reads only the low half."""
    q = _qops(s, nq, half_from)
    if load is None:
        return (pending + q, []) if s > last_load else (q, pending)
    v, ptr, off = load
    g = _GPR[seq % 4]
    if half_from is not None and off >= half_from * 4:
        return [f"ldr d{v}, [{ptr}, #{off - advance}]", *pending, *q], []
    off -= advance
    lines = [f"ldr d{v}, [{ptr}, #{off}]", *pending, *q[:1], f"ldr {g}, [{ptr}, #{off + 8}]", *q[1:]]
    return lines, [f"ins v{v}.d[1], {g}"]


def kernel_lines(nb: int, half_tail: bool = False) -> list[str]:
    """The asm for NB 16-byte blocks: $0 A, $1 W (both advanced), $2 C, $3 C's row stride in bytes.
    half_tail: the last block's bytes 8..15 are zero weights (the 7x7x3 stem's 21 halves of 8 bytes in 11
    blocks): its step is smull alone, 16 smlal2 and 8 operand-high loads fewer (exact: those products are 0)."""
    nq, loads = 16 * nb, _loads(nb)
    half = 16 * (nb - 1) if half_tail and nb >= 2 else None
    order = sorted(loads) or [-1]
    seq = {s: n for n, s in enumerate(order)}
    n_loop = _loop_count(nb, loads)
    lines = ["ldp q0, q1, [$1]", "ldp q8, q9, [$0]", "ldp q2, q3, [$1, #32]", "ldp q10, q11, [$0, #32]"]
    pending: list[str] = []
    end = nq + 4
    head_end = _HEAD if n_loop else end
    for s in range(head_end):
        out, pending = _slot(s, nq, loads.get(s), seq.get(s, 0), 0, pending, order[-1], half)
        lines += out
    if n_loop:
        entry = list(pending)
        lines += [f"mov x13, #{n_loop}", "1:"]
        for s in range(_HEAD, _HEAD + 32):
            out, pending = _slot(s, nq, loads.get(s), seq.get(s, 0), 0, pending if s > _HEAD else entry,
                                 order[-1])
            lines += out
        assert pending == entry  # the back edge's ins is the one the body starts with
        lines += ["add $0, $0, #128", "add $1, $1, #128", "subs x13, x13, #1", "b.ne 1b"]
        adv = 128 * n_loop
        for s in range(_HEAD + 32 * n_loop, end):
            out, pending = _slot(s, nq, loads.get(s), seq.get(s, 0), adv, pending, order[-1], half)
            lines += out
    lines += pending
    return lines + _reduce_store()


def _loop_count(nb: int, loads: dict) -> int:
    """Iterations of the two-step loop body: each must hold all 16 loads of its period (its steps' next
    operands, none past the last step) and end before the last slot."""
    n = 0
    while _HEAD + 32 * (n + 1) <= 16 * nb + 4 and sum(s in loads for s in range(_HEAD + 32 * n, _HEAD + 32 * (n + 1))) == 16:
        n += 1
    return n


def _reduce_store() -> list[str]:
    """Each row's 4 accumulators -> its 4 channel sums (addp twice), stored as C's row (module doc: not added)."""
    out = []
    for i in range(4):
        a = [16 + 4 * i + j for j in range(4)]
        out += [f"addp v{a[0]}.4s, v{a[0]}.4s, v{a[1]}.4s", f"addp v{a[2]}.4s, v{a[2]}.4s, v{a[3]}.4s"]
    out.append("mov x14, $2")
    for i in range(4):
        a = 16 + 4 * i
        out += [f"addp v{a}.4s, v{a}.4s, v{a + 2}.4s", f"str q{a}, [x14]", "add x14, x14, $3"]
    return out


def func_name(nb: int, half_tail: bool = False) -> str:
    """The kernel's symbol (and tensor intrinsic's name) for one NB, "h" for a half tail."""
    return f"{NAME}_nb{nb}{'h' if half_tail and nb >= 2 else ''}"


def llvm_ir(nb: int, half_tail: bool = False) -> str:
    """`i32 NAME_nbN(ptr C, ptr A, ptr W, i32 c_stride_ints)`: the kernel for one NB as LLVM IR."""
    text = "\\0A".join(kernel_lines(nb, half_tail))
    clobbers = ",".join([f"~{{x{i}}}" for i in (9, 10, 11, 12, 13, 14)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{func_name(nb, half_tail)}(ptr %c, ptr %a, ptr %w, i32 %ldc) {{\nentry:\n"
            "  %ldc4 = mul i32 %ldc, 4\n  %s = sext i32 %ldc4 to i64\n"
            f"  %r = call {{ ptr, ptr }} asm sideeffect \"{text}\", \"=r,=r,r,r,0,1,{clobbers}\""
            "(ptr %c, i64 %s, ptr %a, ptr %w)\n  ret i32 0\n}\n")


def intrin(nb: int, half_tail: bool = False) -> str:
    """The tensor intrinsic for one NB (registered once): C[i, j] = sum_{b, t} A[b, i, t] * W[b, j, t], a whole
    reduction with its zeroing (the caller tensorizes the undecomposed block, then drops the outer block's
    zeroing: the kernel stores every sum and reads none).
    half_tail: the same description, valid only where W[nb - 1, :, 8:] is zero (the caller checks)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    name = func_name(nb, half_tail)
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        W = T.match_buffer(w, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        C = T.match_buffer(c, (4, 4), "int32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(A[0:nb, 0:4, 0:16], W[0:nb, 0:4, 0:16])
            T.writes(C[0:4, 0:4])
            with T.init():
                for i, j in T.grid(4, 4):
                    with T.sblock("init"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = 0
            for b, i, j, t in T.grid(nb, 4, 4, 16):
                with T.sblock("update"):
                    vi, vj, vb, vt = T.axis.remap("SSRR", [i, j, b, t])
                    C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vb, vi, vt]) * T.Cast("int32", W[vb, vj, vt])

    @T.prim_func(s_tir=True)
    def desc1(a: T.handle, w: T.handle, c: T.handle) -> None:  # one block: the schedule has no block loop
        sc = T.int32()
        A = T.match_buffer(a, (1, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        W = T.match_buffer(w, (1, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        C = T.match_buffer(c, (4, 4), "int32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(A[0, 0:4, 0:16], W[0, 0:4, 0:16])
            T.writes(C[0:4, 0:4])
            with T.init():
                for i, j in T.grid(4, 4):
                    with T.sblock("init"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        C[vi, vj] = 0
            for i, j, t in T.grid(4, 4, 16):
                with T.sblock("update"):
                    vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                    C[vi, vj] = C[vi, vj] + T.Cast("int32", A[0, vi, vt]) * T.Cast("int32", W[0, vj, vt])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        W = T.match_buffer(w, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        C = T.match_buffer(c, (4, 4), "int32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(A[0:nb, 0:4, 0:16], W[0:nb, 0:4, 0:16])
            T.writes(C[0:4, 0:4])
            T.evaluate(T.call_extern("int32", name, C.access_ptr("w"), A.access_ptr("r"), W.access_ptr("r"), sc))

    TensorIntrin.register(name, desc1 if nb == 1 else desc, impl)
    return name
