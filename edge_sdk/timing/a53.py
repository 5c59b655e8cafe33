"""The Cortex-A53 constants of the timing model: one table, each value with where it comes from.

Sources (read, not remembered):
- GCC  = gcc/config/arm/cortex-a53.md (GCC 10, "Contributed by ARM Ltd."): issue slots, units,
         reservations, latencies and bypasses.
- LLVM = llvm/lib/Target/AArch64/AArch64SchedA53.td (llvm-project main, 2025): MispredictPenalty,
         the FMLA 8/4 accumulator forwarding, FP and integer ASIMD latencies measured on an A53.
- TRM  = ARM Cortex-A53 MPCore Technical Reference Manual (DDI 0500): cache geometry, 64-bit L1 read path,
         data prefetching and read allocate (write streaming) mode; where it gives no number, the
         sibling cores' manuals (Cortex-A7 FAQ ka16133, Cortex-A35 TRM 100236) that describe the same units.
- anchors = ../shared/anchors/README.md (facts collected for this project, with their sources).
- H&P  = Hennessy & Patterson, Computer Architecture: A Quantitative Approach, 6th ed., section 2.6
         (the A53's miss penalties, for an A53 at ~1.3 GHz).
- FIT  = fitted on ncnn's published Pi 3B+ MobileNetV1 and ResNet18 float32 one-thread figures only
         (edge_sdk/timing/calibrate.py); nothing else is fitted. Fitting l2_hit as well drove it to
         its 1-cycle bound (the two rows have few demand L2 hits): it takes H&P's value instead.
- NCNN = Tencent/ncnn docs/developer-guide/arm-a53-a55-dual-issue.md: pairings measured on an A53 by
         ncnn's developers (the rules its A53 kernels are written to).
- ASSUMED = no public figure found; stated here so it can be argued with.

Latency convention: cycles from an instruction's issue until a dependent instruction may issue
(0 = the two may dual-issue in the same cycle), as GCC's define_bypass numbers are.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class A53:
    # ---- issue (GCC: cortex_a53_slot0/slot1, final_presence_set slot1 -> slot0; LLVM IssueWidth 2)
    issue_width: int = 2
    # ---- integer latencies (GCC define_insn_reservation / define_bypass)
    alu_to_alu: int = 1            # GCC bypass 1 "cortex_a53_alu*" -> "cortex_a53_alu"
    alu_to_shift: int = 2          # GCC bypass 2 alu -> alu_shift (shifted/extended operand read early)
    alu_to_addr: int = 2           # NCNN: "add r0; fmla; ldr d1, [r0]" stalls not (GCC's default would be 3)
    alu_to_store_data: int = 0     # GCC bypass 0 alu -> store (data operand)
    alu_to_branch: int = 0         # GCC bypass 0 alu -> branch (flags / cbz register)
    alu_to_r2f: int = 0            # GCC bypass 0 alu -> r2f (fmov s, w)
    alu_to_r2f_cvt: int = 2        # GCC bypass 2 alu -> r2f_cvt (scvtf, dup/ins from a GP register)
    mul: int = 4                   # GCC cortex_a53_mul latency 4 (LLVM WriteIM32/64 4)
    mul_to_alu: int = 2            # GCC bypass 2 mul -> alu
    mul_to_mac_acc: int = 1        # GCC bypass 1 mul -> mul (aarch_accumulator_forwarding)
    div: int = 8                   # GCC (2013 version) cortex_a53_udiv 8; the 2020 file punts with 4
    div_busy: int = 7              # GCC (2013) idiv*7: the divider is not pipelined
    load: int = 4                  # GCC cortex_a53_load1 latency 4 (LLVM WriteLD 4)
    load_to_alu: int = 2           # GCC bypass 2 load1 -> alu
    load_to_shift: int = 3         # GCC bypass 3 load1 -> alu_shift
    load_to_addr: int = 3          # GCC bypass 3 load1 -> load/store address (pointer chasing)
    load_to_store_data: int = 1    # GCC bypass 1 load -> store data
    # ---- FP / Advanced SIMD latencies
    fp_alu: int = 4                # GCC cortex_a53_fpalu / advsimd_alu 4
    fp_const: int = 2              # GCC cortex_a53_fconst 2 (fmov imm, movi)
    fp_mul: int = 4                # GCC cortex_a53_fpmul / advsimd_mul 4; LLVM A53WriteVecQ_4
    fp_mac: int = 8                # LLVM A53WriteFMAC(Q) 8; GCC cortex_a53_fpmac 8; anchors
    fp_mac_acc_early: int = 4      # LLVM A53ReadFPMA4 / GCC bypass 4 fpmac -> fpmac: addend read 4 late
    vec_int_simple: int = 2        # LLVM A53WriteIVec*_2: ADD/SUB/NEG, halving add/sub (measured)
    vec_int_wide: int = 3          # LLVM A53WriteIVec*_3: ABS, ADDP, [SU]ABD, [SU]ADDLP, saturating, ADDV
    vec_recp_step: int = 8         # LLVM A53WriteFRecpStep: FRECPS/FRSQRTS (measured)
    vec_recp_est: int = 4          # LLVM A53WriteFRecpEst: FRECPE/FRSQRTE
    fdiv_s: int = 18               # LLVM A53WriteFDivSP latency 18, busy 14
    fdiv_s_busy: int = 14
    fdiv_d: int = 33               # LLVM A53WriteFDivDP latency 33, busy 29
    fdiv_d_busy: int = 29
    r2f: int = 2                   # GCC cortex_a53_r2f 2 (fmov s0, w0)
    r2f_cvt: int = 4               # GCC cortex_a53_r2f_cvt 4 (scvtf, dup/ins from GP: neon_from_gp)
    f2r: int = 4                   # GCC cortex_a53_f2r 4 (fmov w0, s0)
    f2r_cvt: int = 5               # GCC cortex_a53_f2r_cvt 5 (fcvtzs w, s; umov: neon_to_gp)
    f_load_64: int = 3             # GCC cortex_a53_f_load_64 3 (ldr s/d, ld1 lane, ld1r)
    f_load_128: int = 4            # GCC cortex_a53_f_load_many 4 (ldr q, ld1 .4s, ldp q); anchors ~4
    f_flags: int = 5               # GCC cortex_a53_f_flags 5 (fcmp -> b.cond)
    # ---- load/store pipe (GCC cortex_a53_ls_agen: two loads/stores cannot issue in one cycle;
    #      TRM + anchors: 64-bit L1 read path, so a load of B bytes holds the pipe ceil(B/8) cycles;
    #      GCC load_8 / f_load_many: its first cycle takes both slots, the next ones slot 0)
    load_path_bytes: int = 8
    vld_pairs_q_neon: bool = False  # NCNN: a 64/128-bit vector load cannot dual-issue with fmla
    ins_pairs_q_neon: bool = False  # NCNN: "fmla; ins v1.d[1], x23 // 1 cycle" (ins pairs with ldr d only)
    # NCNN also says "any vector load cannot be issued on the 4th cycle of each fmla"; read as "3 cycles
    # after an fmla issues" it would forbid the very pattern (a vector load after every three fmla) the
    # same page measures as free, so it is not modelled (0 = off).
    vld_after_fmla_blocked: int = 0
    store_path_bytes: int = 8      # GCC f_store_many: a 128-bit store holds the store pipe 2 cycles
    # ---- branches
    mispredict: int = 9            # LLVM MispredictPenalty 9 ("A53 Software Optimisation Spec"); anchors
    taken_branch: int = 1          # ASSUMED: one fetch bubble per taken branch (no public A53 figure)
    # ---- memory (TRM / anchors: BCM2837 L1D 32 KB 4-way, L1I 32 KB 2-way, L2 512 KB 16-way, 64 B)
    l2_hit: float = 13.0           # H&P: Hennessy & Patterson, 6th ed., 2.6: an A53's L1 miss penalty (L2 hit)
    dram: float = 223.2            # FIT: a demand L2 miss's stall, and per line streamed x line_fills_in_flight
    store_miss_stalls: bool = False  # ASSUMED: stores drain through the store buffer (TRM 6.4) unstalled
    # A stream gets at most line_fills_in_flight lines per `dram` cycles (Little's law: the prefetcher's
    # lines ahead, pf_depth, and one demand fill), and so do all cores together: the memory, not the core,
    # sets that rate (with dram fitted: 2.0 GB/s at 1.4 GHz, half the LPDDR2's 4.0 GB/s peak). ASSUMED.
    line_fills_in_flight: int = 5
    # ---- the cache model's prefetch and write-streaming rules (simulated in libtiming.so; qemu.py passes them)
    pf_trigger: int = 3            # TRM: A7/A35 TRMs: "a sequence of three data cache misses at a fixed stride"
    pf_window: int = 4             # TRM: A35 TRM: the stride "lies in four cache lines, plus or minus"
    pf_depth: int = 4              # ASSUMED: lines fetched ahead of a stream (the A5 allows 1-3, the A53's is not given)
    pf_streams: int = 2            # ASSUMED: streams tracked per core
    ws_l1: int = 3                 # TRM: read allocate mode after 3 consecutive full-line writes (A7 FAQ; A35 TRM)
    ws_l2: int = 128               # TRM: the L2's threshold (A7 FAQ: 127 lines; CPUACTLR.RADIS)
    # ---- threads
    fork_join: float = 2000.0      # ASSUMED (see timing/threads.py): cycles per parallel region


FITTED = ("dram",)
DEFAULT = A53()


def _sources() -> dict[str, str]:
    """name -> the source tag of its comment (GCC / LLVM / TRM / FIT / ASSUMED), read from this file."""
    import re
    from pathlib import Path

    out = {}
    for line in Path(__file__).read_text().splitlines():
        m = re.match(r"\s+(\w+): [\w.]+ = [^#]+#\s*(\w+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


SOURCES = _sources()
