"""The float 8x8 GEMM register tile for the Cortex-A53, in A64 assembly (ncnn's A53 load pattern).

C[8, 8] += A[K, 8]^T @ W[K, 8]: A is a packed row tile (8 pixels contiguous per reduction step, the
"AP" stage of conv2d.gemm), W a packed weight panel (8 channels contiguous per step), C the 8x8
accumulator tile (row stride given). 16 accumulators v16-v31, two register sets (v0-v3, v4-v7)
alternate: the 16 `fmla` of one step run on one set while the next step's 32 floats load into the other.

Why not LLVM's own code for the same loop: it loads the two weight vectors with `ldp q` and the 8
pixels with `ldp s`, and on the A53 neither pairs with a Q-form `fmla` (a53.py `vld_pairs_q_neon`,
NCNN): 8 issue cycles of loads per 16 `fmla` (1.5x the NEON floor of 1 `fmla.4s` a cycle, GCC
`cortex_a53_fp_mac_q` slot 0 only). Each 128-bit value here is one 64-bit `ldr d` (1 cycle, NCNN: "64bit
vector load cannot be dual issued with fmla, wait 1 cycle"), the other half by `ldr x` into a general
register beside an `fmla` (NCNN: "64bit integer load can be dual issued with fmla"), then
`ins v.d[1], x` beside the next `ldr d` (NCNN: "64bit vector load and 64bit vector insert can be dual
issued"); three `fmla` between, so `ldr x` -> `ins` (GCC bypass load -> r2f_cvt 3) and `ins` -> `fmla`
(GCC r2f_cvt 4) never stall. 4 loads per 16 `fmla`: 20 cycles a step, 1.25x the floor (pointer updates
and the loop counter pair with `fmla`, NCNN / GCC slot_any).

The kernel is an LLVM IR function whose body is one inline-asm statement, linked into the TVM module by
the `pragma_import_llvm` annotation (codegen_llvm HandleImport: always-inlined at each call) and called
with `call_extern` from the tensorized tile (`tensorize_tile`). aarch64 targets only.
"""
from __future__ import annotations

from tvm import s_tir
from tvm.script import tirx as T

NAME = "edge_a53_sgemm_8x8"
NAME_ODD = NAME + "_odd"
MR = NR = 8
_SETS = ((0, 1, 2, 3), (4, 5, 6, 7))  # per set: pixels 0-3, pixels 4-7, channels 0-3, channels 4-7
_GPR = ("x9", "x10", "x11", "x12")


def _acc(r: int, h: int) -> int:
    return 16 + 2 * r + h


def _fmlas(s: int) -> list[str]:
    a_lo, a_hi, w_lo, w_hi = _SETS[s]
    return [f"fmla v{_acc(r, h)}.4s, v{w}.4s, v{a_lo if r < 4 else a_hi}.s[{r % 4}]"
            for h, w in ((0, w_lo), (1, w_hi)) for r in range(8)]


def _step(s_use: int, s_load: int | None, off: int, pending: list, tail=()) -> tuple[list, list]:
    """One reduction step: 16 fmla on set s_use, the next step's loads into set s_load (None: none) from
    byte offset `off`; `pending` is the previous step's last `ins`. Returns (lines, the new pending)."""
    f = _fmlas(s_use)
    if s_load is None:
        return pending + f, []
    a_lo, a_hi, w_lo, w_hi = _SETS[s_load]
    regs = ((a_lo, "$0", off), (a_hi, "$0", off + 16), (w_lo, "$1", off), (w_hi, "$1", off + 16))
    out = []
    for i, ((v, p, o), g) in enumerate(zip(regs, _GPR)):
        out += [f"ldr d{v}, [{p}, #{o}]", *pending]
        pending = [f"ins v{v}.d[1], {g}"]
        out += [f[3 * i], f"ldr {g}, [{p}, #{o + 8}]", f[3 * i + 1], f[3 * i + 2]]
    for j, line in enumerate(f[12:]):
        out += [line, *tail[j:j + 1]]
    return out, pending


def acc(p: int, h: int) -> int:
    """The accumulator of pixel p, channels 4h..4h+3 (the epilogue's view, conv1x1_gemm_a53_epilogue)."""
    return _acc(p, h)


def c_lines(op: str) -> list[str]:
    """The accumulators from (op "ldp") or to (op "stp") the C tile at $3, rows $4 bytes apart."""
    lines = ["mov x13, $3"]
    for r in range(MR):
        lines += [f"{op} q{_acc(r, 0)}, q{_acc(r, 1)}, [x13]"] + (["add x13, x13, $4"] if r < MR - 1 else [])
    return lines


def kernel_lines(odd: bool = False, head: list[str] | None = None, tail: list[str] | None = None) -> list[str]:
    """The asm: $0 A, $1 W, $2 K (even, >= 2; all three advanced), $3 C, $4 C's row stride in bytes.
    `odd`: one more step after the K even ones (a K + 1 reduction; its operands by plain `ldp q`).
    `head` / `tail`: what sets the accumulators before the loop and takes them after it (default: load
    and store the C tile; conv1x1_gemm_a53_epilogue: bias in, epilogue out; they may use v4-v15)."""
    lines = list(c_lines("ldp") if head is None else head)
    lines += ["ldp q0, q1, [$0]", "ldp q2, q3, [$1]", "subs $2, $2, #2", "b.eq 2f", "1:"]
    a, pend = _step(0, 1, 32, [])
    b, pend = _step(1, 0, 64, pend, tail=("add $0, $0, #64", "add $1, $1, #64", "subs $2, $2, #2"))
    lines += a + b + pend + ["b.ne 1b", "2:"]
    a, pend = _step(0, 1, 32, [])
    b, _ = _step(1, None, 0, pend)
    lines += a + b + (["ldp q0, q1, [$0, #64]", "ldp q2, q3, [$1, #64]"] + _fmlas(0) if odd else [])
    return lines + (c_lines("stp") if tail is None else tail)


def llvm_ir(odd: bool = False) -> str:
    """`i32 edge_a53_sgemm_8x8(ptr C, ptr A, ptr W, i32 K, i32 c_stride_floats)`: the kernel as LLVM IR
    (`odd`: NAME_ODD, which reduces over K + 1 steps for an even K)."""
    text = "\\0A".join(kernel_lines(odd))
    clobbers = ",".join([f"~{{x{i}}}" for i in (9, 10, 11, 12, 13)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{NAME_ODD if odd else NAME}(ptr %c, ptr %a, ptr %w, i32 %k, i32 %ldc) {{\nentry:\n"
            "  %kk = sext i32 %k to i64\n  %ldc4 = mul i32 %ldc, 4\n  %s = sext i32 %ldc4 to i64\n"
            f"  %r = call {{ ptr, ptr, i64 }} asm sideeffect \"{text}\", \"=&r,=&r,=&r,r,r,0,1,2,{clobbers}\""
            "(ptr %c, i64 %s, ptr %a, ptr %w, i64 %kk)\n  ret i32 0\n}\n")


# Smallest K the tile is the rule for. Its fixed cost a tile (the row panel's scalar copy, 2 cycles a
# float, and the accumulators' round trip through the tile buffer, ~130) is paid once per 20 x K cycles;
# modelled pi3, 1 thread: 3136x64 -> 128 16.77 -> 13.63 M cycles, 12544x32 -> 64 16.23 -> 16.61 M (lost).
MIN_K = 64


# Rows of the tiles that share this module's intrinsic (intrin / tensorize_tile): 8, and 12
# (conv1x1_gemm_a53_12x8).
ROWS = (MR, 12)


def applies(simd, m: int, k: int, mr: int, nr: int, gate: bool, *, min_k: int = MIN_K) -> bool:
    """Whether a GEMM takes an assembly tile of mr rows (ROWS): NEON, 8 channels, an even K >= min_k, no
    gate stage, and rows padded to mr by at most a quarter (49 -> 56 rows yes, 9 -> 16 no)."""
    return (simd.isa == "neon" and mr in ROWS and nr == NR and k >= min_k and k % 2 == 0 and not gate
            and -(-m // mr) * mr * 4 <= 5 * m)


def intrin(k: int, mr: int = MR, kernel: str = NAME) -> str:
    """The tensor intrinsic for one K (registered once): C[mr, 8] += sum_k A[k, 0:mr]^T * W[k, 0:8], by a call
    of `kernel` (this module's 8x8 tile, or another tile with the same arguments: conv1x1_gemm_a53_12x8)."""
    from tvm.s_tir import TensorIntrin

    MR = mr  # noqa: N806 (the tile's rows, in the TVMScript below)
    name = f"{kernel}_k{k}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle) -> None:
        sa, sw, sc = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (k, MR), "float32", offset_factor=1, strides=[sa, 1])
        W = T.match_buffer(w, (k, NR), "float32", offset_factor=1, strides=[sw, 1])
        C = T.match_buffer(c, (MR, NR), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:MR, 0:NR], A[0:k, 0:MR], W[0:k, 0:NR])
            T.writes(C[0:MR, 0:NR])
            for kk, i, j in T.grid(k, MR, NR):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                    C[vi, vj] = C[vi, vj] + A[vk, vi] * W[vk, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle) -> None:
        sa, sw, sc = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (k, MR), "float32", offset_factor=1, strides=[sa, 1])
        W = T.match_buffer(w, (k, NR), "float32", offset_factor=1, strides=[sw, 1])
        C = T.match_buffer(c, (MR, NR), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:MR, 0:NR], A[0:k, 0:MR], W[0:k, 0:NR])
            T.writes(C[0:MR, 0:NR])
            T.evaluate(T.call_extern("int32", kernel, C.access_ptr("rw"), A.access_ptr("r"), W.access_ptr("r"),
                                     k, sc))

    TensorIntrin.register(name, desc, impl)
    return name


def tensorize_tile(sch: s_tir.Schedule, k_loop, k: int, outer_loop, init, *, tile=None) -> None:
    """Replace the accumulator block's (k, mr pixels, 8 channels) nest under `k_loop` by the kernel (its
    zeroing `init` block vectorized); the kernel's IR is linked through `outer_loop`'s pragma. `tile`: a
    module with MR, NAME and llvm_ir() (conv1x1_gemm_a53_12x8); None: this module's 8x8 tile."""
    mr, kernel, ir = (MR, NAME, llvm_ir()) if tile is None else (tile.MR, tile.NAME, tile.llvm_ir())
    sch.tensorize(k_loop, intrin(k, mr, kernel))
    sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(outer_loop, "pragma_import_llvm", ir)


def order_tile(sch: s_tir.Schedule, block, n_outer: int) -> list:
    """The accumulator block's (8 pixels, 8 channels, k) loops as (k, pixels, channels), the shape the
    intrinsic matches; returns [k]."""
    mi, ni, kk = sch.get_loops(block)[n_outer:]
    sch.reorder(kk, mi, ni)
    return [kk]
