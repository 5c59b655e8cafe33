"""Software prefetch (A64 `PRFM PLDL1KEEP`) for float kernels that stream more input rows than the
Cortex-A53's prefetcher follows.

Why: a 3x3 stride-1 depthwise row reads three input rows; the two older ones miss the L1 (they hit the
L2) and take the prefetcher's two streams (timing/a53.py `pf_streams = 2`, ASSUMED; `pf_window = 4`
lines, TRM), so every line of the new row is a demand miss from DRAM (`dram` 223.2 cycles, FIT). A PRFM
of the new row's line a tile or two ahead fills the L1 and the L2 without stalling the core (A53 TRM,
"Data prefetching"; the timing plugin: "software: PRFM PLD/PST [Xn, #imm] ... prefetched lines fill the
L1 and the L2 without a stall; their L2 misses are DRAM traffic"), so the line is a hit when the loads
reach it and its fill is counted as bandwidth, not as a stall.

How the plugin sees it: it prefetches the line of a + imm whenever a load of the same translation block
with the PRFM's base register accesses a. So each PRFM here comes with one load of its own base (`ldr
wzr, [x]`, a line the kernel reads in this tile anyway), and the pair sits in a block of its own (`b` in,
`b` out), so no other load that LLVM happens to base on the same register is prefetched by it: the model
prefetches exactly the lines the PRFMs name (on hardware the `ldr wzr` is a wasted L1-hit slot, and the
two `b` are predicted branches; the model charges all of them).

Unlike LLVM's `llvm.prefetch` (whose PRFM shares a base register with the kernel's own loads, so the
plugin prefetches ahead of every load through it: "the generous rule"; ops/prefetch_a53 used it until
e780ffd), a PRFM here fetches in the model what it fetches on hardware, one line, and nothing else;
ops/prefetch_a53's at_loop_top places the calls.

The prefetch is an LLVM IR function whose body is one inline-asm statement (as conv1x1_gemm_a53),
linked by the `pragma_import_llvm` annotation and called with `call_extern`. aarch64 targets only.
"""
from __future__ import annotations

import tvm

# An input this small stays in the L2 (half the Pi 3's 512 KB, targets.CacheConfig) and its rows are
# L2 hits: a prefetch only adds instructions (modelled pi3, 1 thread, priced alone: 7x7x1024 3x3 s1
# 1.08 -> 1.21 M cycles with it; 14x14x512, 400 KB, 3.41 -> 2.54 M).
MIN_INPUT_BYTES = 256 * 1024

# The largest byte offset `PRFM (immediate)` encodes (imm12 x 8).
MAX_OFFSET = 4095 * 8


def name_of(n: int, offset: int) -> str:
    """The function that prefetches n lines, `step` bytes apart from p, each `offset` bytes ahead."""
    return f"edge_a53_prfm_n{n}_o{offset}"


def llvm_ir(n: int, offset: int) -> str:
    """`i32 edge_a53_prfm_nN_oD(ptr p, i64 step)`: PRFM [p + i*step, #D], i < n, each with its load."""
    if not 0 < offset <= MAX_OFFSET or offset % 8:
        raise ValueError(f"prefetch offset {offset} is not a PRFM immediate (a multiple of 8, <= {MAX_OFFSET})")
    geps = "".join(f"  %q{i} = getelementptr i8, ptr %p, i64 %o{i}\n  %o{i + 1} = add i64 %o{i}, %step\n"
                   for i in range(n))
    body = ["b 1f", "1:"]
    for i in range(n):
        body += [f"prfm pldl1keep, [${i}, #{offset}]", f"ldr wzr, [${i}]"]
    body += ["b 2f", "2:"]
    text = "\\0A".join(body)
    cons = ",".join(["r"] * n + ["~{memory}"])
    args = ", ".join(f"ptr %q{i}" for i in range(n))
    return (f"define i32 @{name_of(n, offset)}(ptr %p, i64 %step) {{\nentry:\n  %o0 = add i64 0, 0\n{geps}"
            f"  call void asm sideeffect \"{text}\", \"{cons}\"({args})\n  ret i32 0\n}}\n")


def call(n: int, offset: int, ptr, step_bytes: int) -> tvm.tirx.Stmt:
    """The TIR statement that runs the prefetch (`ptr`: a handle, e.g. tirx.address_of(X[...]))."""
    return tvm.tirx.Evaluate(tvm.tirx.call_extern("int32", name_of(n, offset), ptr,
                                                  tvm.tirx.const(step_bytes, "int64")))


def ahead(tile_bytes: int, tiles: int = 2) -> int:
    """The byte offset `tiles` tiles ahead (fewer if that is past the immediate), 0 if one is too far."""
    for t in range(tiles, 0, -1):
        if t * tile_bytes <= MAX_OFFSET:
            return t * tile_bytes
    return 0
