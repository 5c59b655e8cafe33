"""graph/ops/float_ops.py: every float Relax op relax_ref computes is one registry entry, and an entry is all an
op takes: relax_ref evaluates an op registered at run time (a toy entry) against numpy, refuses an op with no
entry by name, and the float rewriter plans our kernels through the entries' planners."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act, float_ops
from edge_sdk.quant import float_ref_ops, relax_ref


def _module(build):
    """main(x: (1, 4, 4, 3) float32) with the body `build(bb, x)` returns."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 4, 4, 3], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("d", list(float_ops.FLOAT_OPS.values()), ids=lambda d: d.relax_op)
def test_every_entry_resolves_and_names_a_real_relax_op(d):
    assert tvm.ir.Op.get(d.relax_op).name == d.relax_op
    assert callable(registry.resolve(d.reference))
    for name in (d.kernel, d.legalize):
        assert not name or callable(registry.resolve(name)), name
    assert float_act.by_relax_op(d.relax_op) is None, "an activation's op belongs to graph/ops/float_act"


def test_relax_ref_has_no_op_table_of_its_own():
    """relax_ref names no Relax op: each comes from the registries (a second table would drift)."""
    import inspect

    assert '"relax.' not in inspect.getsource(relax_ref)


def test_a_registered_op_is_all_relax_ref_needs(monkeypatch):
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 3)).astype("float32")
    mod = _module(lambda bb, v: relax.op.exp(v))
    with pytest.raises(ModelError, match="relax.exp"):
        relax_ref.evaluate(mod, x)
    monkeypatch.setattr(float_ref_ops, "toy_exp", lambda call, args: np.exp(args[0]), raising=False)
    entry = float_ops.FloatOpDef("relax.exp", "edge_sdk.quant.float_ref_ops:toy_exp", onnx=("Exp",))
    monkeypatch.setitem(float_ops.FLOAT_OPS, "relax.exp", entry)
    np.testing.assert_allclose(relax_ref.evaluate(mod, x), np.exp(x.astype(np.float64)).astype("float32"), rtol=1e-6)


def test_references_against_plain_numpy():
    """A few entries' references on a small graph, against numpy written here."""
    x = np.random.default_rng(1).standard_normal((1, 4, 4, 3)).astype("float32")
    w = np.random.default_rng(2).standard_normal((3, 3, 3, 5)).astype("float32")

    def body(bb, v):
        y = bb.emit(relax.op.nn.conv2d(v, relax.const(w), padding=[1, 1, 1, 1], data_layout="NHWC",
                                       kernel_layout="HWIO"))
        y = bb.emit(relax.op.nn.max_pool2d(y, pool_size=[2, 2], strides=[2, 2], layout="NHWC"))
        return relax.op.nn.softmax(relax.op.reshape(y, (1, 20)), axis=-1)

    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = sum(xp[:, i:i + 4, j:j + 4, :] @ w[i, j] for i in range(3) for j in range(3))
    pooled = conv.reshape(1, 2, 2, 2, 2, 5).max(axis=(2, 4)).reshape(1, 20)
    e = np.exp(pooled - pooled.max())
    np.testing.assert_allclose(relax_ref.evaluate(_module(body), x), e / e.sum(), rtol=1e-5, atol=1e-7)


def test_the_rewriter_plans_only_registered_kernels(monkeypatch):
    """fuse.KernelRewriter asks each op's entry for its planner: with conv2d's entry taking no kernel, a conv is
    left to TVM's legalization (no edge_ kernel); with it, our conv kernel is planned."""
    from edge_sdk.compiler.ops import fuse
    from edge_sdk.compiler.ops.common import simd_of

    w = np.random.default_rng(3).standard_normal((3, 3, 3, 8)).astype("float32")
    mod = _module(lambda bb, v: relax.op.nn.conv2d(v, relax.const(w), padding=[1, 1, 1, 1], data_layout="NHWC",
                                                   kernel_layout="HWIO"))
    simd = simd_of(tvm.target.Target({"kind": "llvm"}))

    def planned(m):
        rw = fuse.KernelRewriter(m, simd)
        rw.rewrite()
        return len(rw.plans)

    assert planned(mod) == 1
    off = float_ops.FloatOpDef("relax.nn.conv2d", float_ops.FLOAT_OPS["relax.nn.conv2d"].reference)
    monkeypatch.setitem(float_ops.FLOAT_OPS, "relax.nn.conv2d", off)
    assert planned(mod) == 0
