"""Software prefetch (PRFM PLDL1KEEP) at the top of a scheduled loop's body, for NEON kernels that read
more streams than the A53's prefetcher tracks.

The A53 follows a few strided L1-miss streams (timing/a53.py pf_streams = 2, ASSUMED; pf_window = 4
lines, TRM); a Winograd step reads alpha rows of the padded input, 36 (16) points of a tile of M and m
rows of R, in an order LLVM picks, so most of those lines are demand misses to DRAM (a53.py `dram`,
FIT). LLVM emits `prfm pldl1keep, [xN, #imm]` for an `llvm.prefetch` whose address is a base register
the loads use plus a constant. The timing model (qemu/plugins/timing.c, "software: PRFM PLD/PST")
then fills, without a stall, the line imm bytes past every load or store through xN in the same
translation block (the fill is DRAM traffic all the same: the bandwidth term). On hardware one PRFM
fetches one line, so there a step would want one PRFM per new line it touches: the model's rule is
the generous one, noted beside every figure this file's callers quote.
"""
from __future__ import annotations

from tvm import s_tir, tirx

_PREFETCH = "llvm.prefetch"
# PRFM (immediate)'s reach: imm12 x 8 bytes, 64-byte aligned here (a line)
MAX_AHEAD = 32704


def prefetch(buf: tirx.Buffer, indices) -> tirx.Stmt:
    """One PRFM PLDL1KEEP (read, keep in all levels, data cache) of buf[indices]'s line."""
    addr = tirx.address_of(tirx.BufferLoad(buf, list(indices)))
    call = tirx.call_llvm_intrin("void", _PREFETCH, addr, tirx.const(0, "int32"), tirx.const(3, "int32"),
                                 tirx.const(1, "int32"))
    return tirx.Evaluate(call)


def at_loop_top(func: tirx.PrimFunc, loop_var: tirx.Var, stmts) -> tirx.PrimFunc:
    """`func` with `stmts` (built from `loop_var` and its outer loops' vars) run first in every
    iteration of the loop over `loop_var`. The loop must exist (a KeyError names it otherwise)."""
    body, done = _insert(func.body, loop_var, list(stmts))
    if not done:
        raise KeyError(f"prefetch: no loop over {loop_var.name} in {func.attrs.get('global_symbol', '?')}")
    return func.with_body(body)


def _insert(stmt, var, stmts):
    """(stmt with stmts at the top of the loop over var, whether that loop was found), rebuilding
    only the nodes on the path to it: sblock realizes, sblocks, loops and sequences."""
    if isinstance(stmt, tirx.For):
        if stmt.loop_var.same_as(var):
            body, done = tirx.SeqStmt([*stmts, stmt.body]), True
        else:
            body, done = _insert(stmt.body, var, stmts)
        if not done:
            return stmt, False
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
                        stmt.annotations, stmt.step), True
    if isinstance(stmt, tirx.SeqStmt):
        seq = list(stmt.seq)
        for i, s in enumerate(seq):
            new, done = _insert(s, var, stmts)
            if done:
                seq[i] = new
                return tirx.SeqStmt(seq), True
        return stmt, False
    if isinstance(stmt, s_tir.SBlockRealize):
        blk, done = _insert(stmt.block, var, stmts)
        return (s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, blk), True) if done else (stmt, False)
    if isinstance(stmt, s_tir.SBlock):
        body, done = _insert(stmt.body, var, stmts)
        if not done:
            return stmt, False
        return s_tir.SBlock(stmt.iter_vars, stmt.reads, stmt.writes, stmt.name_hint, body, stmt.init,
                            stmt.alloc_buffers, stmt.match_buffers, stmt.annotations), True
    return stmt, False


def read_buffer(sch, block_name: str, name: str) -> tirx.Buffer:
    """The buffer `name` that sblock `block_name` of the schedule reads."""
    for region in sch.get(sch.get_sblock(block_name)).reads:
        buf = region.source
        if isinstance(buf, tirx.Buffer) and buf.name == name:
            return buf
    raise KeyError(f"prefetch: sblock {block_name} reads no buffer {name!r}")


def loop_var(sch, loop_rv) -> tirx.Var:
    """The loop variable of a schedule's loop."""
    return sch.get(loop_rv).loop_var



