"""The int8 op registry (edge_sdk/graph/ops): every entry's names resolve to real code in the right layer,
the readers, the numpy reference and the kernels take their op lists from it (a new entry reaches all of
them), and docs/OPS.md is what tools/make_ops_doc.py writes from it."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act, float_ops, lce as lce_registry

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", list(registry.OPS))
def test_entry_names_resolve_in_their_layer(kind):
    d = registry.OPS[kind]
    assert d.reference.startswith("edge_sdk.quant.") and callable(registry.resolve(d.reference))
    assert d.kernel.startswith("edge_sdk.compiler.") and callable(registry.resolve(d.kernel))
    if d.tflite is not None:
        import tflite

        cls = getattr(tflite, d.tflite.table)
        getters = [g for _, getter, _ in d.tflite.fields for g in (getter if isinstance(getter, tuple) else (getter,))]
        assert all(callable(getattr(cls, g)) for g in getters)


def test_readers_take_their_op_lists_from_the_registry():
    from edge_sdk.models import onnx_qdq_ops, tflite_int8

    assert set(registry.OPS) == set(tflite_int8.SUPPORTED)
    for op_type, kind in registry.onnx_kinds().items():
        assert onnx_qdq_ops.BECOMES[op_type] == kind
        assert onnx_qdq_ops.MAP[op_type] is onnx_qdq_ops.CONVERTERS[registry.OPS[kind].family]


def _unary_graph(kind: str):
    from edge_sdk.graph.int8 import Int8Graph, Op, QParams, Tensor

    q = [QParams(np.asarray(s, np.float32), np.asarray(z, np.int64)) for s, z in ((0.05, 3), (1 / 128, 0))]
    tensors = {0: Tensor(0, "x", (1, 4, 4, 8), "int8", q[0]), 1: Tensor(1, "y", (1, 4, 4, 8), "int8", q[1])}
    return Int8Graph(Path("t.tflite"), tensors, [Op(0, kind, [0], [1])], [0], [1])


def test_one_registration_reaches_the_reference_and_the_kernel_emitter(monkeypatch):
    """A new unary op registered under its own name (here TANH's table again, as 'TANH_COPY') is computed
    by the numpy reference and emitted by the int8 backend without touching either."""
    from edge_sdk.quant import tflite_int8_ref_ops as ref

    monkeypatch.setitem(registry.OPS, "TANH_COPY", replace(registry.OPS["TANH"], kind="TANH_COPY", onnx=()))
    x = np.random.default_rng(0).integers(-128, 128, (1, 4, 4, 8)).astype(np.int8)
    got = ref.eval_registered(_unary_graph("TANH_COPY"), _unary_graph("TANH_COPY").ops[0], {0: x})
    want = ref.eval_registered(_unary_graph("TANH"), _unary_graph("TANH").ops[0], {0: x})
    assert got.dtype == np.int8 and np.array_equal(got, want) and len(np.unique(got)) > 8
    assert registry.resolve(registry.of("TANH_COPY").kernel).__name__ == "emit_unary"


def test_a_bad_entry_is_refused():
    with pytest.raises(ValueError, match="family"):
        registry.OpDef("X", "ternary", "m:f", "m:g")
    with pytest.raises(ValueError, match="twice"):
        registry.register(registry.OPS["TANH"])


def test_ops_doc_is_generated_from_the_code():
    """docs/OPS.md is what tools/make_ops_doc.py writes from the registry, readers, frontends and reference."""
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "make_ops_doc.py"), "--check"], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_resolvers_resolve_and_the_architecture_test_counts_their_names():
    """Each kind of name is resolved where RESOLVED_BY says (that module calls registry.resolve), and the import
    graph of tests/test_architecture.py has the resolver -> named module edges (so folder rules see them)."""
    import importlib
    import inspect

    sys.path.insert(0, str(ROOT / "tests"))
    try:
        arch = importlib.import_module("test_architecture")
    finally:
        sys.path.remove(str(ROOT / "tests"))
    graph = arch._graph()
    for reg in (registry, float_act, float_ops, lce_registry):
        for field, resolvers in reg.RESOLVED_BY.items():
            for resolver in resolvers:
                assert "registry.resolve(" in inspect.getsource(importlib.import_module(resolver)), (field, resolver)
    for resolver, name in registry.links() + float_act.links() + float_ops.links() + lce_registry.links():
        target = name.partition(":")[0]
        assert target == resolver or target in graph[resolver], (resolver, name)


# ---- the float activations (graph/ops/float_act.py) --------------------------------------------------

@pytest.mark.parametrize("kind", list(float_act.ACTS))
def test_activation_kernel_equals_its_numpy_reference(kind):
    """Each entry's TIR expression (compiled for the host) against its numpy reference, on the same float32 points."""
    import tvm
    from tvm import te

    from edge_sdk.compiler.ops.activation import activate

    d = float_act.ACTS[kind]
    assert d.reference.startswith("edge_sdk.quant.") and d.kernel.startswith("edge_sdk.compiler.")
    params = (-0.5, 2.5)[: len(d.params)]
    v = np.concatenate([np.linspace(-12, 12, 961), [-3, 3, 0]]).astype(np.float32)
    x = te.placeholder(v.shape, "float32", name="x")
    y = te.compute(v.shape, lambda i: activate(x[i], (kind, *params)), name="y")
    f = tvm.compile(te.create_prim_func([x, y]), target="llvm")
    out = tvm.runtime.tensor(np.zeros_like(v))
    f(tvm.runtime.tensor(v), out)
    want = registry.resolve(d.reference)(v.astype(np.float64), *params)
    assert np.allclose(out.numpy(), want, rtol=2e-6, atol=2e-6), kind
    if d.relax_op is not None:
        assert float_act.by_relax_op(d.relax_op) is d


def test_one_activation_entry_reaches_the_rewriter_kernel_and_chooser(monkeypatch):
    """A new activation registered under its own name (hard-swish again, as 'hswish_copy', listed before it)
    is what the float rewriter reports for the TFLite frontend's hard-swish subgraph, and both the kernel
    expression and compile/choice's numpy reference take it, without touching those files."""
    from dataclasses import replace as dc_replace

    from tvm import relax

    from edge_sdk.compiler.choice.families import np_activate
    from edge_sdk.compiler.ops import chain

    copy = dc_replace(float_act.ACTS["hswish"], kind="hswish_copy", tflite=(), onnx=(), int8="")
    monkeypatch.setattr(float_act, "ACTS", {"hswish_copy": copy, **float_act.ACTS})
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.add(x, relax.const(np.zeros(8, np.float32))))
            t = bb.emit(relax.op.clip(bb.emit(relax.op.add(c, relax.const(3.0, "float32"))), 0.0, 6.0))
            out = bb.emit_output(bb.emit(relax.op.divide(bb.emit(relax.op.multiply(c, t)),
                                                         relax.const(6.0, "float32"))))
        bb.emit_func_output(out)
    graph = chain.Graph(bb.get()["main"])
    c_var = next(v for v in graph.value if graph.order[v] == 0)
    found = chain.match_activation(graph, c_var, (1, 4, 4, 8))
    assert found is not None and found[0] == ("hswish_copy",)
    y = np.linspace(-5, 5, 11)
    assert np.allclose(np_activate(y, ("hswish_copy",)), y * np.clip(y + 3, 0, 6) / 6)
    from tvm import te

    from edge_sdk.compiler.ops.activation import activate

    v = te.var("v", "float32")
    assert str(activate(v, ("hswish_copy",))) == str(activate(v, ("hswish",)))


# ---- the LCE importer's ops (graph/ops/lce.py) --------------------------------------------------------

@pytest.mark.parametrize("kind", list(lce_registry.OPS))
def test_lce_entry_names_resolve_in_their_layer(kind):
    d = lce_registry.OPS[kind]
    assert d.reference.startswith("edge_sdk.quant.") and callable(registry.resolve(d.reference))
    assert d.kernel.startswith("edge_sdk.compiler.") and callable(registry.resolve(d.kernel))
    assert d.custom == kind.startswith("Lce") and (d.tflite is None or not d.custom)
    if d.tflite is not None:
        import tflite

        cls = getattr(tflite, d.tflite.table)
        assert all(callable(getattr(cls, g)) for _, getter, _ in d.tflite.fields
                   for g in (getter if isinstance(getter, tuple) else (getter,)))


def test_the_lce_reader_takes_its_op_lists_from_the_registry():
    from edge_sdk.models import lce

    assert set(lce.LCE_OPS) == set(lce_registry.kinds(custom=True)) == {
        "LceQuantize", "LceDequantize", "LceBconv2d", "LceBMaxPool2d"}
    assert set(lce.BUILTINS) == set(lce_registry.kinds(custom=False))


def test_refusal_rules_accept_only_their_values():
    """The entries' refusals as the readers apply them (int8 DEPTHWISE_CONV_2D, LCE DEPTHWISE_CONV_2D): a dilated
    or multiplied depthwise conv is a ModelError naming the op; the accepted values, as tuples or lists, pass."""
    from edge_sdk.errors import ModelError
    from edge_sdk.models.tflite_int8_ops import refused

    (rule,) = registry.OPS["DEPTHWISE_CONV_2D"].refuse
    for ok in ({"dilation": (1, 1)}, {"dilation": [1, 1]}, {}):
        refused(ok, "m.tflite: op 3 (DEPTHWISE_CONV_2D)", rule)
    with pytest.raises(ModelError, match=r"op 3 \(DEPTHWISE_CONV_2D\): dilated depthwise convolution"):
        refused({"dilation": (2, 2)}, "m.tflite: op 3 (DEPTHWISE_CONV_2D)", rule)
    lce_rules = lce_registry.OPS["DEPTHWISE_CONV_2D"].refuse
    with pytest.raises(ModelError, match="multiplier > 1"):
        for r in lce_rules:
            refused({"dilation": (1, 1), "depth_multiplier": 2}, "m.tflite: op 0 (DEPTHWISE_CONV_2D)", r)
    for r in lce_rules:
        refused({"dilation": (1, 1), "depth_multiplier": 0}, "m.tflite: op 0 (DEPTHWISE_CONV_2D)", r)
    (slice_rule, *_) = registry.OPS["STRIDED_SLICE"].refuse  # (option, message): refused whenever set
    refused({"ellipsis_mask": 0}, "w", slice_rule)
    with pytest.raises(ModelError, match="ellipsis"):
        refused({"ellipsis_mask": 1}, "w", slice_rule)
