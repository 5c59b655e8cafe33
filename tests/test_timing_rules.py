"""The A53 timing model's pipeline rules, proved on microkernels whose answers are known.

Known answers (a53.py cites the sources): a dependent fmla chain through the accumulator issues one
fmla per 4 cycles (8-cycle latency, 4-cycle accumulator forwarding) and through a multiplicand one
per 8; independent 128-bit fmla issue one per cycle (one Q-form NEON op a cycle); a stream of
128-bit loads takes two cycles a load (64-bit load path) and 64-bit loads one; independent 64-bit
integer adds dual-issue (two a cycle). ncnn's measured A53 pairings: a 64-bit integer load and a
pointer update pair with fmla, a 64-bit vector load does not, and pairs with an insert instead.

Two levels: the scheduler alone on instruction text (fast), and the whole path - tiny aarch64
programs (inline asm) run under qemu with libtiming.so, disassembled by llvm-mc-14 and priced per
loop iteration (run with 3000 iterations minus run with 1000, over 2000).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from edge_sdk.timing import isa, pipeline
from edge_sdk.timing.a53 import DEFAULT

LOOP = ["subs x0, x0, #1", "b.ne #-64"]


def per_iteration(lines: list[str]) -> int:
    ops = [isa.decode(t) for t in lines]
    return pipeline.block_cycles(ops, ops, DEFAULT)


def test_dependent_fmla_chain_is_latency_bound():
    assert per_iteration(["fmla v0.4s, v1.4s, v2.4s"] * 16 + LOOP) == 16 * 4  # accumulator: 4 cycles
    assert per_iteration(["fmla v0.4s, v0.4s, v2.4s"] * 16 + LOOP) == 16 * 8  # multiplicand: 8 cycles


def test_independent_q_fmla_issue_one_per_cycle():
    body = [f"fmla v{i % 8}.4s, v20.4s, v21.4s" for i in range(16)]
    assert 16 <= per_iteration(body + LOOP) <= 17  # the loop's branch may cost the slot-0 cycle
    d_form = [f"fmla v{i % 8}.2s, v20.2s, v21.2s" for i in range(16)]
    assert per_iteration(d_form + LOOP) == 9  # 64-bit ones pair: 16 / 2, + the loop's two


def test_128_bit_load_stream_takes_two_cycles_a_load():
    q = [f"ldr q{i}, [x1, #{16 * i}]" for i in range(16)]
    assert 32 <= per_iteration(q + LOOP) <= 33
    d = [f"ldr d{i}, [x1, #{8 * i}]" for i in range(16)]
    assert 16 <= per_iteration(d + LOOP) <= 17  # one load a cycle, never two


def test_64_bit_integer_ops_dual_issue():
    adds = [f"add x{i}, x{i}, #1" for i in range(2, 18)]
    assert per_iteration(adds + LOOP) == 9  # 18 instructions, two a cycle
    chain = ["add x2, x2, #1"] * 16
    assert per_iteration(chain + LOOP) == 16  # dependent: one a cycle (ALU forwarding)


def test_ncnn_pairings_of_loads_with_fmla():
    def cycles(lines):
        ops = [isa.decode(t) for t in lines]
        return pipeline.block_cycles(ops, None, DEFAULT)

    fmla = "fmla v8.4s, v4.4s, v0.s[0]"
    assert cycles([fmla, "ldr x25, [x2, #8]"]) == 1  # integer load pairs
    assert cycles([fmla, "add x2, x2, #16"]) == 1  # pointer update pairs
    assert cycles([fmla, "ldr d5, [x3]"]) == 2  # 64-bit vector load does not
    assert cycles(["ldr d5, [x3]", "mov v1.d[1], x21"]) == 1  # ...but pairs with an insert
    assert cycles([fmla, "ldr q5, [x3]", "fmla v9.4s, v4.4s, v0.s[0]"]) == 4  # ldr q: two cycles alone


def test_decode_roles_and_bytes():
    op = isa.decode("fmla v0.4s, v1.4s, v2.s[1]")
    assert (op.cls, op.q, op.dsts) == ("fp_mac", True, ("v0",)) and ("v0", isa.FP_ACC) in op.reads
    op = isa.decode("ld1 { v0.4s, v1.4s }, [x25], #32")
    assert (op.load_bytes, op.wb, op.dsts) == (32, "r25", ("v0", "v1", "r25"))
    op = isa.decode("stp q2, q3, [x5, #-32]")
    assert (op.cls, op.store_bytes, op.wb) == ("store", 32, None)
    op = isa.decode("add x0, x1, x2, lsl #2")
    assert ("r2", isa.SHIFT) in op.reads and ("r1", isa.ALU) in op.reads
    assert isa.decode("b.ne #-8").target == -8 and isa.decode("ret").branch == "ret"
    assert isa.decode("ldrsw x0, [x1, x2, lsl #2]").load_bytes == 4


# ---------------------------------------------------------------- the whole path, under qemu
KERNELS_C = r"""
#include <stdlib.h>
static float buf[4096] __attribute__((aligned(64)));
int main(int argc, char **argv) {
  long n = atol(argv[1]);
  char k = argv[2][0];
  float *p = buf;
  if (k == 'd') {
    __asm__ volatile("movi v0.4s, #0\n movi v1.4s, #0\n movi v2.4s, #0\n"
      "1:\n .rept 16\n fmla v0.4s, v1.4s, v2.4s\n .endr\n subs %0, %0, #1\n b.ne 1b\n"
      : "+r"(n) :: "v0", "v1", "v2", "cc");
  } else if (k == 'i') {
    __asm__ volatile("movi v20.4s, #0\n movi v21.4s, #0\n 1:\n .rept 2\n"
      " .irp r,0,1,2,3,4,5,6,7\n fmla v\\r\\().4s, v20.4s, v21.4s\n .endr\n .endr\n subs %0, %0, #1\n b.ne 1b\n"
      : "+r"(n) :: "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v20", "v21", "cc");
  } else if (k == 'q') {
    __asm__ volatile("1:\n .irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n ldr q\\r, [%1, #16*\\r]\n .endr\n"
      " subs %0, %0, #1\n b.ne 1b\n" : "+r"(n) : "r"(p) : "memory", "v0", "v1", "v2", "v3", "v4", "v5",
      "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "cc");
  } else if (k == 'x') {
    __asm__ volatile("1:\n .irp r,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\n add x\\r, x\\r, #1\n .endr\n"
      " subs %0, %0, #1\n b.ne 1b\n" : "+r"(n) :: "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10",
      "x11", "x12", "x13", "x14", "x15", "x16", "x17", "cc");
  }
  return 0;
}
"""

# kernel -> (low, high) modelled cycles per iteration: the known answer + the loop's subs/b.ne
# (at most one issue cycle) + one taken branch (a53.A53.taken_branch).
KNOWN = {"d": (64, 66), "i": (16, 18), "q": (32, 34), "x": (9, 10)}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    if shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("llvm-mc-14") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc and llvm-mc-14 (tools/setup.sh installs them)")
    d = tmp_path_factory.mktemp("kernels")
    (d / "k.c").write_text(KERNELS_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", str(d / "k.c"), "-o", str(d / "k")], check=True)
    return d / "k"


def _model(binary: Path, kernel: str) -> dict:
    from edge_sdk.timing.model import model_profile
    from edge_sdk.timing.run import profile_program

    pi = profile_program(lambda n: ["./k", str(n), kernel], ks=(1000, 3000), files={"k": binary})
    return model_profile(pi, clock_ghz=1.2) | {"profile": pi}


@pytest.mark.qemu
@pytest.mark.parametrize("kernel", sorted(KNOWN))
def test_microkernels_under_qemu_meet_the_known_answers(kernels, kernel):
    got = _model(kernels, kernel)
    lo, hi = KNOWN[kernel]
    assert lo <= got["modelled_cycles"] <= hi, got["cycles_split"]
    assert got["instructions"] == pytest.approx(18)  # 16 + subs + b.ne per iteration: the loop, exactly
    assert got["modelled_ms"] == pytest.approx(got["modelled_cycles"] / 1.2e6)


STREAM_C = r"""
#include <stdlib.h>
#include <string.h>
/* argv: passes mode: 's' reads one word per 64 B line of 4 MB in order, 'r' chases a random cycle of them */
int main(int argc, char **argv) {
  long n = atol(argv[1]), sz = 4 << 20, lines = sz / 64, s = 0;
  long *b = malloc(sz);
  memset(b, 0, sz);
  if (argv[2][0] == 'r') {
    long *perm = malloc(lines * sizeof(long));
    unsigned x = 12345;
    for (long i = 0; i < lines; i++) perm[i] = i;
    for (long i = lines - 1; i > 0; i--) { x = x * 1103515245u + 12345u; long j = x % (i + 1), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    for (long i = 0; i < lines; i++) b[perm[i] * 8] = perm[(i + 1) % lines] * 8;
    for (long p = 0; p < n; p++) { long at = 0; for (long i = 0; i < lines; i++) at = b[at]; s += at; }
  } else {
    for (long p = 0; p < n; p++) for (long i = 0; i < sz / 8; i += 8) s += b[i];
  }
  return (int)(s & 1);
}
"""


@pytest.mark.qemu
def test_prefetcher_hides_a_stream_not_a_pointer_chase(tmp_path):
    """A53 TRM: the L1 prefetcher follows misses at a fixed stride; a random chase defeats it."""
    from edge_sdk.timing.profile import ADD
    from edge_sdk.timing.run import profile_program

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc")
    (tmp_path / "s.c").write_text(STREAM_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", str(tmp_path / "s.c"), "-o", str(tmp_path / "s")], check=True)
    lines = (4 << 20) // 64  # 4 MB: eight times the L2, so every pass goes to DRAM
    got = {}
    for mode in "sr":
        pi = profile_program(lambda n, m=mode: ["./s", str(n), m], ks=(1, 3), files={"s": tmp_path / "s"})
        got[mode] = {f: sum(c[:, ADD.index(f)].sum() for c in pi.counts.values()) for f in ADD}
    assert got["s"]["ld_l2"] < 0.01 * lines and got["s"]["pf_l2"] == pytest.approx(lines, rel=0.01)
    assert got["r"]["ld_l2"] == pytest.approx(lines, rel=0.01) and got["r"]["pf_l1"] < 0.01 * lines


MEMSET_C = r"""
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {  /* argv: passes; each memsets 4 MB (full-line stores, 8x the L2) */
  long n = atol(argv[1]), sz = 4 << 20;
  char *b = malloc(sz);
  for (long p = 0; p < n; p++) memset(b, (int)p, sz);
  return b[sz / 2] & 1;
}
"""


@pytest.mark.qemu
def test_full_line_store_streams_write_without_a_fill(tmp_path):
    """A53 TRM, read allocate mode: consecutive full-line writes stop allocating, so a line is one DRAM
    write, not a fill and a write-back."""
    from edge_sdk.timing.profile import ADD
    from edge_sdk.timing.run import profile_program

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc")
    (tmp_path / "m.c").write_text(MEMSET_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", str(tmp_path / "m.c"), "-o", str(tmp_path / "m")], check=True)
    pi = profile_program(lambda n: ["./m", str(n)], ks=(1, 3), files={"m": tmp_path / "m"})
    got = {f: sum(c[:, ADD.index(f)].sum() for c in pi.counts.values()) for f in ADD}
    lines = (4 << 20) // 64
    assert got["st_w"] == pytest.approx(lines, rel=0.01) and got["st_l2"] < 0.01 * lines


@pytest.mark.qemu
def test_same_cycles_twice(kernels):
    a, b = _model(kernels, "i"), _model(kernels, "i")
    assert a["modelled_cycles"] == b["modelled_cycles"]
    for v in a["profile"].counts:
        assert (a["profile"].counts[v] == b["profile"].counts[v]).all()
