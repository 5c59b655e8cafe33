"""Placing software prefetch statements at the top of a scheduled loop's body (at_loop_top), and the
schedule look-ups its callers need (read_buffer, loop_var).

The statements themselves are prfm_pair_a53 calls (depthwise, winograd): each PRFM comes with its own
load in a translation block of its own, so the timing plugin (qemu/plugins/timing.c, "software: PRFM
PLD/PST", which prefetches a PRFM's offset past every load through its base register in the same
block) fetches exactly one line per PRFM, as the core does. This module once also emitted LLVM's
`llvm.prefetch` (86c728c, the Winograd path): its PRFMs shared base registers with the kernels' own
loads, so the model credited one PRFM to up to 36 loads a step ("the generous rule", not an A53
rule); that was removed for prfm_pair_a53 (r18f4, /work/notes/r18f4.md).
"""
from __future__ import annotations

from tvm import s_tir, tirx


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



