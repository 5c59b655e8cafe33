"""What the float rewriter (fuse.py) matches after a conv / depthwise / dense head: the chain of
per-channel constant ops, a residual add and an activation that fold into the kernel's epilogue.

- _Chain.absorb folds one single-user op: per-channel add/subtract/multiply/divide into the bias and
  the weight scale, one residual add, a lone activation op (relu / clip / sigmoid: the graph/ops/float_act
  entries with a relax_op) as the activation, and a positive scalar
  multiply or divide after a clip (hard-sigmoid's / 6) into the clip's bounds.
- match_activation recognises an activation written as a small elementwise subgraph in which the
  chain's value has several users (swish = x * sigmoid(x), hard-swish = x * relu6(x + 3) / 6, in
  any of the forms the TFLite and ONNX importers emit) by evaluating the subgraph in numpy on sample
  points against the float_act entries' numpy references (subgraph=True): every form of the same
  function is found, and nothing that differs anywhere on them.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act

LINEAR = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide"}
_BINARY = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
           "relax.divide": np.divide, "relax.maximum": np.maximum, "relax.minimum": np.minimum}
_SAMPLES = np.concatenate([np.linspace(-9.0, 9.0, 721), [-3.0, -2.999, 2.999, 3.0, -0.001, 0.001]])
_MAX_NODES = 6


def _unary() -> dict:
    """The lone Relax ops that are an activation without params (relu, sigmoid): their numpy references."""
    return {d.relax_op: registry.resolve(d.reference) for d in float_act.ACTS.values() if d.relax_op and not d.params}


def _targets() -> dict:
    """The activations a subgraph may turn out to be (graph/ops/float_act entries with subgraph=True: swish,
    hard-swish, sigmoid), by their numpy references; kernels compute them as the entry's expression says."""
    return {d.kind: registry.resolve(d.reference) for d in float_act.ACTS.values() if d.subgraph}


def shape_of(expr) -> tuple[int, ...] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None or str(ty.dtype) != "float32":
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, AttributeError):
        return None


def scalar(expr) -> float:
    """A clip bound: a PrimValue wrapping an IntImm/FloatImm (or, in some versions, a number)."""
    while not isinstance(expr, (int, float)):
        expr = expr.value
    return float(expr)


def ints(values) -> list[int]:
    return [int(v) for v in values]


def op_name(call) -> str | None:
    return call.op.name if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) else None


class Graph:
    """Bindings of main's dataflow blocks: what each var is bound to, its users, its use count."""

    def __init__(self, func: relax.Function):
        self.value: dict = {}
        self.uses: dict = {}
        self.users: dict = {}  # var -> [(user var, call)] in binding order
        self.order: dict = {}
        for block in func.body.blocks:
            for b in block.bindings:
                self.order[b.var] = len(self.order)
                self.value[b.var] = b.value
                self._count(b.value)
                if isinstance(b.value, relax.Call):
                    for a in {a for a in b.value.args if isinstance(a, relax.Var)}:
                        self.users.setdefault(a, []).append((b.var, b.value))
        self._count(func.body.body)

    def _count(self, expr) -> None:
        if isinstance(expr, relax.Var):
            self.uses[expr] = self.uses.get(expr, 0) + 1
        elif isinstance(expr, relax.Call):
            for a in expr.args:
                self._count(a)
        elif isinstance(expr, relax.Tuple):
            for f in expr.fields:
                self._count(f)
        elif isinstance(expr, relax.TupleGetItem):
            self._count(expr.tuple_value)

    def const(self, expr) -> np.ndarray | None:
        """The numpy value of a constant argument, looking through var bindings."""
        while isinstance(expr, relax.Var) and expr in self.value:
            expr = self.value[expr]
        if isinstance(expr, tvm.ir.GenericConst):
            return expr.value.numpy()
        return None

    def single_user(self, var, user_value) -> bool:
        return isinstance(var, relax.DataflowVar) and self.uses.get(var, 0) == 1 and user_value is not None

    def internal(self, var) -> bool:
        """A dataflow var used only inside main's dataflow block (not returned)."""
        return isinstance(var, relax.DataflowVar) and self.uses.get(var, 0) == len(self.users.get(var, []))


def per_channel(arr: np.ndarray, cout: int) -> np.ndarray | None:
    """A constant that broadcasts along the channel axis only, as a (cout,) vector."""
    if arr.ndim > 4 or any(d != 1 for d in arr.shape[:-1]) or arr.size not in (1, cout):
        return None
    return np.broadcast_to(arr.reshape(-1).astype("float64"), (cout,)).copy()


class Chain:
    """conv/dense head + folded epilogue: scale (on weights), bias, residual, activation."""

    def __init__(self, cout: int, *, allow_residual: bool):
        self.allow_residual = allow_residual
        self.scale = np.ones(cout)
        self.bias = np.zeros(cout)
        self.residual = None
        self.act = ("none",)
        self.alpha = None  # ("prelu",): the slope per output channel
        self.end = None  # the var whose binding the fused call replaces

    def absorb(self, graph: Graph, var, call, out_shape) -> bool:
        """Fold `call` (which consumes `var`) into the epilogue if we can."""
        op = op_name(call)
        d = float_act.by_relax_op(op)  # relu, clip (its bounds), sigmoid
        if d is not None and self.act == ("none",):
            self.act = (d.kind, *(scalar(a) for a in call.args[1:1 + len(d.params)]))
            return True
        if op == "relax.nn.prelu":
            return self._prelu(graph, var, call, out_shape)
        if op not in LINEAR or len(call.args) != 2:
            return False
        a, b = call.args
        other = b if a.same_as(var) else a if op in ("relax.add", "relax.multiply") else None
        if other is None or other.same_as(var) or shape_of(call) != tuple(out_shape):
            return False
        value = graph.const(other)
        if self.act[0] == "clip":
            return self._scale_clip(op, value)
        if self.act != ("none",):
            return False
        if value is None:
            if (op == "relax.add" and self.allow_residual and self.residual is None
                    and shape_of(other) == tuple(out_shape)):
                self.residual = other
                return True
            return False
        vec = per_channel(value, out_shape[-1])
        if vec is None or self.residual is not None:
            return False
        if op in ("relax.add", "relax.subtract"):
            self.bias += vec if op == "relax.add" else -vec
        else:
            vec = vec if op == "relax.multiply" else 1.0 / vec
            self.scale *= vec
            self.bias *= vec
        return True

    def _prelu(self, graph: Graph, var, call, out_shape) -> bool:
        """relax.nn.prelu over the channel axis with constant slopes: the epilogue's ("prelu",)."""
        alpha = graph.const(call.args[1])
        if (self.act != ("none",) or alpha is None or not call.args[0].same_as(var)
                or int(call.attrs.axis) % len(out_shape) != len(out_shape) - 1):
            return False
        vec = per_channel(alpha, out_shape[-1])
        if vec is None:
            return False
        self.act, self.alpha = ("prelu",), vec
        return True

    def _scale_clip(self, op, value) -> bool:
        """clip(x, lo, hi) * c == clip(x * c, lo * c, hi * c) for a scalar c > 0."""
        if op not in ("relax.multiply", "relax.divide") or value is None or value.size != 1:
            return False
        c = float(value.reshape(-1)[0])
        c = c if op == "relax.multiply" else 1.0 / c if c != 0 else 0.0
        if not c > 0 or self.residual is not None:
            return False
        self.scale *= c
        self.bias *= c
        self.act = ("clip", self.act[1] * c, self.act[2] * c)
        return True


def _evaluate(graph: Graph, nodes: list, x, v: np.ndarray) -> np.ndarray | None:
    """The subgraph `nodes` (in binding order) as a function of x, at the points v; None if an op
    is not a scalar-constant elementwise one."""
    vals = {x: v}
    unary = _unary()
    for n in nodes:
        call = graph.value[n]
        op = op_name(call)
        args = []
        for a in call.args[: 1 if op in unary or op == "relax.clip" else 2]:
            if a in vals:
                args.append(vals[a])
            elif (c := graph.const(a)) is not None and c.size == 1:
                args.append(float(c.reshape(-1)[0]))
            else:
                return None
        if op in unary:
            vals[n] = unary[op](args[0])
        elif op == "relax.clip":
            vals[n] = np.clip(args[0], scalar(call.args[1]), scalar(call.args[2]))
        elif op in _BINARY and len(call.args) == 2:
            vals[n] = _BINARY[op](*args)
        else:
            return None
    return vals[nodes[-1]]


def match_activation(graph: Graph, x, out_shape) -> tuple[tuple, object, list] | None:
    """(act, end var, the subgraph's vars) when the users of `x` compute one of _targets() of it."""
    first = graph.users.get(x, [])
    if len(first) < 2 or not graph.internal(x):
        return None
    start = min(graph.order[v] for v, _ in first)
    nodes: list = []
    for var, _ in sorted(graph.value.items(), key=lambda kv: graph.order[kv[0]])[start:]:
        if len(nodes) == _MAX_NODES:
            break
        call = graph.value[var]
        if not isinstance(call, relax.Call) or shape_of(var) != tuple(out_shape):
            continue
        if any(isinstance(a, relax.Var) and not a.same_as(x) and a not in nodes and graph.const(a) is None
               for a in call.args):
            continue
        if not any(a.same_as(x) or a in nodes for a in call.args):
            continue
        nodes.append(var)
        inside = {x, *nodes}
        if all(all(u in inside for u, _ in graph.users.get(n, [])) and graph.internal(n)
               for n in [x, *nodes[:-1]]):
            got = _evaluate(graph, nodes, x, _SAMPLES)
            for act, fn in _targets().items():
                if got is not None and np.allclose(got, fn(_SAMPLES), rtol=1e-6, atol=1e-6):
                    return (act,), var, nodes
    return None


_AFFINE = {  # x = op(y, c) as x = a * y + b
    ("relax.add", 0): lambda c: (1.0, c), ("relax.add", 1): lambda c: (1.0, c),
    ("relax.multiply", 0): lambda c: (c, 0.0), ("relax.multiply", 1): lambda c: (c, 0.0),
    ("relax.subtract", 0): lambda c: (1.0, -c), ("relax.subtract", 1): lambda c: (-1.0, c),
    ("relax.divide", 0): lambda c: (1.0 / c, 0.0),
}


def input_affine(graph: Graph, x, channels: int):
    """(source, S, T) when x = S * source + T per channel through a run of single-use constant
    add / subtract / multiply / divide (an input Rescaling / Normalization before the stem conv),
    else None. S has no zero, so a border value -T / S maps to 0."""
    scale, shift, cur = np.ones(channels), np.zeros(channels), x
    while True:
        val = graph.value.get(cur)
        op = op_name(val)
        if op not in LINEAR or len(val.args) != 2 or not graph.single_user(cur, val):
            break
        step = None
        for pos in (0, 1):
            const = graph.const(val.args[1 - pos])
            vec = per_channel(const, channels) if const is not None and graph.const(val.args[pos]) is None else None
            if vec is not None and (op, pos) in _AFFINE and not (op == "relax.divide" and np.any(vec == 0)):
                step = (val.args[pos], *_AFFINE[(op, pos)](vec))
                break
        if step is None or shape_of(step[0]) != shape_of(cur):
            break
        cur, a, b = step
        scale, shift = scale * a, scale * b + shift
    if cur.same_as(x) or np.any(scale == 0):
        return None
    return cur, scale, shift
