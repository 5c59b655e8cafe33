"""Load-time weight transforms: kernels that turn a layer's stored weights into what its conv reads.

A package stores each weight once at 4 bytes (issue 13, lean packages); a Winograd conv needs
U = G g G^T, (m+2)^2 / 9 times the weights (4x for F(4x4)). lower.py lifts these calls into the
executable's `infer_transform_params`, which the runtime (runner.cc, loader.py) calls once at load;
`main` keeps the calls inline, so main(x, *stored params) still computes the model in one call.

    winograd_weight(ci, co, m, nr) -> PrimFunc W (3, 3, CI, CO) -> U (alpha, alpha, cpad/nr, CI, nr)

U matches winograd.transform_weight (float64 in numpy, rounded) to float32 rounding of the 3 + 3
term sums: G's entries are 1, 1/2, 1/4, 1/6, 1/12, 1/24.
"""
from __future__ import annotations

import tvm
from tvm import s_tir, te

from edge_sdk.compiler.ops.common import finish, round_up
from edge_sdk.compiler.ops.winograd import _dot, matrices

TRANSFORM_PREFIX = "edge_wino_wt"  # lower.py lifts the constant arguments of calls to these


def winograd_weight(ci: int, co: int, m: int, nr: int, *, lanes: int = 4, name: str = TRANSFORM_PREFIX):
    """The PrimFunc of U = G g G^T packed (alpha, alpha, ceil(CO/nr), CI, nr), zero-padded channels."""
    _, g, _ = matrices(m)
    alpha, cpad = m + 2, round_up(co, nr)
    w = te.placeholder((3, 3, ci, co), "float32", name="W")
    zero = tvm.tirx.const(0.0, "float32")

    def src(i, j, c, k):
        if cpad == co:
            return w[i, j, c, k]
        return te.if_then_else(k < co, w[i, j, c, te.min(k, co - 1)], zero)

    t = te.compute((alpha, 3, ci, cpad), lambda e, j, c, k: _dot(g, e, lambda i: src(i, j, c, k)), name="T")
    u = te.compute((alpha, alpha, cpad // nr, ci, nr), lambda e, n, kb, c, kk: _dot(
        g, n, lambda j: t[e, j, c, kb * nr + kk]), name="U")
    sch = s_tir.Schedule(te.create_prim_func([w, u]))
    lanes = lanes if nr % lanes == 0 else 1
    # per input channel (in parallel) and lane block of output channels: T = G g for the 3 columns
    # in registers, then the alpha x alpha outputs; W is read once, U written as alpha^2 streams
    ub = sch.get_sblock("U")
    e, n, kb, c, kk = sch.get_loops(ub)
    ko, ki = sch.split(kk, [None, lanes])
    sch.reorder(c, kb, ko, e, n, ki)
    sch.unroll(e)
    sch.unroll(n)
    sch.vectorize(ki)
    sch.parallel(c)
    tb = sch.get_sblock("T")
    sch.compute_at(tb, ko)
    sch.set_scope(tb, 0, "local")
    t_loops = sch.get_loops(tb)[3:]
    for lp in t_loops[:-1]:
        sch.unroll(lp)
    sch.vectorize(t_loops[-1])
    return finish(sch, name)
