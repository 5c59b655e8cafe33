"""The instruction-count proxy of an A53 (bench --emulate --memory rows): instructions at a fixed IPC
plus every L2 access and miss stalling in full. Superseded as a Pi time by edge_sdk/timing's per-block
pipeline model (modelled_cycles / modelled_ms); kept for the memory columns and their roofline verdict.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class A53Model:
    """A stated model of a Pi 3B's A53 core, not a measurement: every L2 access and miss stalls in full.

        cycles = instructions / ipc  +  L2 hits x l2_hit_cycles  +  L2 misses x dram_cycles

    - ipc 1.0: our assumption, half the A53's dual-issue in-order peak (TRM DDI 0500, 1.1); not a
      published figure. Ratios between variants hold as long as their instruction mixes are alike.
    - l2_hit_cycles 13, dram_cycles 124: the A53's L1 and L2 miss penalties as given in Hennessy &
      Patterson, Computer Architecture: A Quantitative Approach, 6th ed., 2.6 (an A53 at ~1.3 GHz,
      not a Pi 3B measurement; its LPDDR2 behind the VideoCore is, if anything, slower).
    No overlap of misses with work (the A53 has a prefetcher and non-blocking linefills: this
    overstates streaming traffic's cost), and no branch, TLB or dual-issue pairing effects.
    Roofline verdict: the memory roof's time for the DRAM bytes at the target's mem_gbps against
    instructions / ipc at its clock: "memory" when the DRAM bytes take longer.
    """

    ipc: float = 1.0
    l2_hit_cycles: float = 13.0
    dram_cycles: float = 124.0

    def cycles(self, *, instructions: float, memory: dict, clock_ghz: float, mem_gbps: float) -> dict:
        compute = instructions / self.ipc
        l2_hits = max(0.0, memory["l2_accesses"] - memory["l2_misses"])
        l2_stall, dram_stall = l2_hits * self.l2_hit_cycles, memory["l2_misses"] * self.dram_cycles
        total = compute + l2_stall + dram_stall
        bw_cycles = memory["dram_bytes"] / (mem_gbps / clock_ghz)  # bytes / (bytes per cycle)
        return {"cycles": total, "compute_cycles": compute, "l2_stall_cycles": l2_stall,
                "dram_stall_cycles": dram_stall, "memory_share": (l2_stall + dram_stall) / total if total else 0.0,
                "dram_bw_cycles": bw_cycles, "bound": "memory" if bw_cycles > compute else "compute",
                "ms_at_clock": total / (clock_ghz * 1e6), "model": asdict(self) | {"clock_ghz": clock_ghz,
                                                                                    "mem_gbps": mem_gbps}}


A53 = A53Model()


def memory_row(count, *, target) -> dict | None:
    """A bench row's memory figures: per-inference counters, DRAM bytes, and A53Model's terms at the target."""
    if count.memory is None:
        return None
    return count.memory | A53.cycles(instructions=count.per_inference, memory=count.memory,
                                     clock_ghz=target.clock_ghz, mem_gbps=target.mem_gbps)
