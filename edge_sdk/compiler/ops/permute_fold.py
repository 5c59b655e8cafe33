"""Drop the transpose pairs ConvertLayout leaves around elementwise ops it has no layout rule for.

An ONNX graph arrives NCHW; ConvertLayout turns the convs NHWC but TVM 0.27 has no layout inference
for relax.clip, so every ReLU6 / Hardswish / HardSigmoid comes out as

    t = permute_dims(x, [0, 3, 1, 2]); c = clip(t, 0, 6); d = divide(c, 6); y = permute_dims(d, [0, 2, 3, 1])

two full-tensor copies per activation, and a chain the rewriter cannot fold into the conv. Here such
a run of elementwise ops (unary, or binary with a scalar constant) between two permutations that
cancel is rebuilt on x itself: y = divide(clip(x, 0, 6), 6). The NCHW ops become dead code.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from edge_sdk.compiler.ops.chain import Graph, ints, op_name

_UNARY = {"relax.clip", "relax.nn.relu", "relax.sigmoid", "relax.nn.relu6"}
_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"}


def _is_scalar_const(graph: Graph, expr) -> bool:
    value = graph.const(expr)
    return value is not None and value.size == 1


def _cancel(p: list[int], q: list[int]) -> bool:
    return len(p) == len(q) and [p[i] for i in q] == list(range(len(p)))


@mutator
class _PermuteFolder(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.graph = Graph(mod["main"])
        self.folded = 0

    def _run(self, var):
        """[ops from the inner permute's user to var's operand] and the inner permute's input, or None."""
        g, chain, cur = self.graph, [], self.graph.value.get(var)
        cur = cur.args[0]
        while True:
            val = g.value.get(cur)
            if not g.single_user(cur, val) or not isinstance(val, relax.Call):
                return None
            op = op_name(val)
            if op == "relax.permute_dims":
                outer = ints(g.value[var].attrs.axes) if g.value[var].attrs.axes is not None else None
                inner = ints(val.attrs.axes) if val.attrs.axes is not None else None
                return (chain[::-1], val.args[0]) if chain and outer and inner and _cancel(inner, outer) else None
            if op in _UNARY or (op in _BINARY and len(val.args) == 2 and _is_scalar_const(g, val.args[1])):
                chain.append(val)
                cur = val.args[0]
            elif op in ("relax.add", "relax.multiply") and len(val.args) == 2 and _is_scalar_const(g, val.args[0]):
                chain.append(relax.Call(val.op, [val.args[1], val.args[0]], val.attrs))
                cur = val.args[1]
            else:
                return None

    def visit_var_binding_(self, binding) -> None:
        if op_name(binding.value) == "relax.permute_dims":
            found = self._run(binding.var)
            if found is not None:
                calls, x = found
                cur = self.visit_expr(x)
                for call in calls[:-1]:
                    cur = self.builder_.emit(relax.Call(call.op, [cur, *call.args[1:]], call.attrs))
                last = calls[-1]
                value = self.builder_.normalize(relax.Call(last.op, [cur, *last.args[1:]], last.attrs))
                self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
                self.folded += 1
                return None
        return super().visit_var_binding_(binding)


def fold_permutes(mod: tvm.IRModule) -> tvm.IRModule:
    """mod with every cancelling permute pair around an elementwise run removed (see module docstring)."""
    folder = _PermuteFolder(mod)
    new = folder.visit_expr(mod["main"])
    if not folder.folded:
        return mod
    folder.builder_.update_func(folder.builder_.get().get_global_var("main"), new)
    return relax.transform.DeadCodeElimination(["main"])(folder.builder_.get())
