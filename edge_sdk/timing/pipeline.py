"""The A53 core: in-order dual issue of a sequence of Ops, cycle by cycle, by the rules of a53.py.

Each instruction issues, in program order, at the first cycle at or after its predecessor's where
(1) every register it reads is ready for the role it reads it in (latency by producer class and
consumer role, a53.A53), and (2) its reservation fits: an issue slot (slot 0 or 1; slot 1 only
beside a slot-0 instruction; Q-form NEON ops, divides only in slot 0; loads wider than 64 bits take
both slots in their first cycle and slot 0 in the next ones), the load/store pipe (one access a
cycle, ceil(bytes / 8) cycles for a load or a vector store: the 64-bit data path), the branch and
integer-multiply units (one a cycle), the NEON ALU and multiply pipes as two 64-bit halves (a D-form
op takes one half, a Q-form op both), and the non-pipelined integer and FP dividers.

`block_cycles(ops, pred)` is a block's marginal cost in steady state: the cycles its instructions
add after its most frequent predecessor block (itself, for a loop), so loop-carried dependences
and a predecessor's late results are paid where they stall.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from edge_sdk.timing import isa
from edge_sdk.timing.a53 import A53

SLOT0, SLOT1, LS, BR, IMUL, ALU_LO, ALU_HI, MUL_LO, MUL_HI, QOP, VLD, INS, NOVLD = (1 << i for i in range(13))
_FP_CLASSES = ("f_load64", "f_load128", "fp_alu", "fp_const", "fp_mul", "fp_mac", "vec_int2", "vec_int3",
               "recp_step", "recp_est", "fdiv_s", "fdiv_d", "r2f", "r2f_cvt")
_MUL_PIPE = ("fp_mul", "fp_mac", "fdiv_s", "fdiv_d")
_NEON = ("fp_alu", "fp_const", "fp_mul", "fp_mac", "vec_int2", "vec_int3", "recp_step", "recp_est", "fdiv_s",
         "fdiv_d", "r2f", "r2f_cvt", "f2r", "f2r_cvt", "fcmp")


def fp_latency(cls: str, c: A53) -> int:
    return {"f_load64": c.f_load_64, "f_load128": c.f_load_128, "fp_alu": c.fp_alu, "fp_const": c.fp_const,
            "fp_mul": c.fp_mul, "fp_mac": c.fp_mac, "vec_int2": c.vec_int_simple, "vec_int3": c.vec_int_wide,
            "recp_step": c.vec_recp_step, "recp_est": c.vec_recp_est, "fdiv_s": c.fdiv_s, "fdiv_d": c.fdiv_d,
            "r2f": c.r2f, "r2f_cvt": c.r2f_cvt}[cls]


def latency(prod: str, role: str, c: A53) -> int:
    """Cycles from a producer's issue until a consumer reading its result in `role` may issue."""
    if prod == "wb":  # pre/post-index base update: done by the address generator (LLVM WriteAdr)
        return 1
    if prod == "alu" or prod == "sys":
        return {isa.ALU: c.alu_to_alu, isa.SHIFT: c.alu_to_shift, isa.ADDR: c.alu_to_addr,
                isa.STORE: c.alu_to_store_data, isa.BRANCH: c.alu_to_branch, isa.R2F: c.alu_to_r2f,
                isa.R2F_CVT: c.alu_to_r2f_cvt, isa.MAC_ACC: c.alu_to_alu}.get(role, c.alu_to_addr)
    if prod == "mul":
        return {isa.ALU: c.mul_to_alu, isa.SHIFT: c.mul_to_alu + 1, isa.MAC_ACC: c.mul_to_mac_acc,
                isa.STORE: 1, isa.R2F: 1, isa.R2F_CVT: c.mul_to_alu + 1}.get(role, c.mul)
    if prod == "load":
        return {isa.ALU: c.load_to_alu, isa.SHIFT: c.load_to_shift, isa.ADDR: c.load_to_addr,
                isa.STORE: c.load_to_store_data, isa.R2F: 1, isa.R2F_CVT: c.load_to_shift,
                isa.BRANCH: c.load_to_alu}.get(role, c.load)
    if prod == "div":
        return c.div
    if prod in ("f2r", "f2r_cvt", "fcmp"):
        return {"f2r": c.f2r, "f2r_cvt": c.f2r_cvt, "fcmp": c.f_flags}[prod]
    if prod in _FP_CLASSES:
        lat = fp_latency(prod, c)
        return max(1, lat - c.fp_mac_acc_early) if role == isa.FP_ACC else lat
    return 1  # stores (exclusive status), branches (link register)


def _ls_cycles(op: isa.Op, c: A53) -> int:
    if op.cls in ("load", "f_load64", "f_load128"):
        return max(1, -(-op.load_bytes // c.load_path_bytes))
    if op.cls == "store":
        vec = any(r.startswith("v") for r, role in op.reads if role == isa.STORE)
        return max(1, -(-op.store_bytes // c.store_path_bytes)) if vec else 1
    return 1 if op.cls == "prefetch" else 0


def reservation(op: isa.Op, c: A53) -> tuple[str, int, int, int]:
    """(slot need 'any'|'slot0'|'both', unit mask in the issue cycle, ls cycles, neon pipe options)."""
    ls = _ls_cycles(op, c)
    if ls:
        both = op.cls in ("load", "f_load64", "f_load128") and op.load_bytes > c.load_path_bytes
        return ("both" if both else "any"), LS, ls, 0
    if op.cls == "branch":
        return "any", BR, 0, 0
    if op.cls == "mul":
        return "any", IMUL, 0, 0
    if op.cls == "div":
        return "slot0", 0, 0, 0
    if op.cls in _NEON:
        lo, hi = (MUL_LO, MUL_HI) if op.cls in _MUL_PIPE else (ALU_LO, ALU_HI)
        if op.q:
            return "slot0", 0, 0, lo | hi
        return ("slot0" if op.cls in ("fdiv_s", "fdiv_d") else "any"), 0, 0, -(lo | hi)
    return "any", 0, 0, 0


def _kind(op: isa.Op) -> int:
    """Which of NCNN's pairing rules applies to op: QOP, VLD, INS or none (0)."""
    if op.cls in ("f_load64", "f_load128"):
        return VLD
    if op.cls == "r2f_cvt" and any(role == isa.FP for _r, role in op.reads):  # ins/mov into a lane
        return INS
    return QOP if op.q and op.cls in _NEON else 0


@dataclass
class Core:
    """Issue state carried from one instruction (and block) to the next."""

    c: A53
    ready: dict = field(default_factory=dict)   # register -> (issue cycle, producer class)
    used: dict = field(default_factory=dict)    # cycle -> resource mask
    last: int = 0                               # issue cycle of the previous instruction
    busy: dict = field(default_factory=dict)    # non-pipelined unit -> first free cycle

    def _fits(self, t: int, need: str, unit: int, ls: int, neon: int, kind: int = 0) -> int | None:
        """The mask to reserve at cycle t, or None when the op cannot issue there."""
        m = self.used.get(t, 0)
        if need == "both":
            if m & (SLOT0 | SLOT1):
                return None
            take = SLOT0 | SLOT1
        elif need == "slot0" or not m & SLOT0:
            if m & SLOT0:
                return None
            take = SLOT0
        elif m & SLOT1:
            return None
        else:
            take = SLOT1
        if m & unit:
            return None
        take |= unit
        if neon > 0:
            if m & neon:
                return None
            take |= neon
        elif neon < 0:
            halves = -neon
            free = halves & ~m
            if not free:
                return None
            take |= free & -free  # the lower free half
        for k in range(1, ls):
            if self.used.get(t + k, 0) & (LS | SLOT0):
                return None
        return take | self._pairing(m, kind)

    def _pairing(self, m: int, kind: int) -> int:
        """NCNN's measured A53 pairings: the bit this op sets, or an impossible mask when it clashes."""
        c = self.c
        if kind == QOP and ((m & VLD and not c.vld_pairs_q_neon) or (m & INS and not c.ins_pairs_q_neon)):
            return -1
        if kind == VLD and ((m & QOP and not c.vld_pairs_q_neon) or m & NOVLD):
            return -1
        if kind == INS and m & QOP and not c.ins_pairs_q_neon:
            return -1
        return kind

    def issue(self, op: isa.Op) -> int:
        """Issue op at its first possible cycle; returns that cycle."""
        c = self.c
        t = self.last
        for r, role in op.reads:
            got = self.ready.get(r)
            if got is not None:
                t = max(t, got[0] + latency(got[1], role, c))
        unit_name = "idiv" if op.cls == "div" else "fdiv" if op.cls in ("fdiv_s", "fdiv_d") else None
        if unit_name:
            t = max(t, self.busy.get(unit_name, 0))
        need, unit, ls, neon = reservation(op, c)
        kind = _kind(op)
        while (take := self._fits(t, need, unit, ls, neon, kind)) is None or take < 0:
            t += 1
        self.used[t] = self.used.get(t, 0) | take
        if op.cls == "fp_mac" and op.q and c.vld_after_fmla_blocked:
            t3 = t + c.vld_after_fmla_blocked
            self.used[t3] = self.used.get(t3, 0) | NOVLD
        for k in range(1, ls):
            self.used[t + k] = self.used.get(t + k, 0) | LS | SLOT0
        if unit_name:
            self.busy[unit_name] = t + {"idiv": c.div_busy, "fdiv": c.fdiv_s_busy if op.cls == "fdiv_s"
                                        else c.fdiv_d_busy}[unit_name]
        for d in op.dsts:
            self.ready[d] = (t, "wb" if d == op.wb else op.cls)
        self.last = t
        return t

    def run(self, ops) -> int:
        """Issue a sequence; returns the cycle count so far (last issue cycle + 1)."""
        for op in ops:
            self.issue(op)
        return self.last + 1


def block_cycles(ops: list, pred: list | None, c: A53) -> int:
    """Marginal cycles of `ops` after `pred` (None: from an idle core; `ops` itself: a loop)."""
    core = Core(c)
    if pred is ops:
        core.run(ops)
        before = core.run(ops)
        return core.run(ops) - before
    before = core.run(pred) if pred else 0
    return core.run(ops) - before
