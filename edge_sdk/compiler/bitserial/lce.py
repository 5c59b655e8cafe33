"""An imported Larq Compute Engine graph (models/lce.py) as a Relax module on our bitserial kernels.

    emit_lce(graph, arch=..., glue="fused"|"unfused") -> (IRModule, {binding: op name})
    lower_lce(model, variant, target, *, progress, seed) -> Lowered   (the bitserial backend calls it)

Mapping (bit convention: ours, bit 1 = +1; LCE's is the opposite, see models/lce.py):
  LceQuantize     sign-pack TE compute: code = (x >= 0), bitpacked to (N, H, W, ceil(C/32), 1) uint32
  LceBconv2d      our bipolar 1x1-bit conv (bitserial/kernels.py), pad_value = LCE's pad_values, weights
                  unpacked from LCE's OHWI words and repacked in our layout.
                  float output: int32 v, then clamp (fused activation), * multiplier + bias (float ops)
                  bitpacked output (thresholds): code 1 iff v >= T, T = K - 2 * threshold; with glue
                  "fused" that is our fused glue with lshift = rshift = 0, offset = 1 - T (clip to 0..1),
                  bitpacked in the conv's epilogue; "unfused": int32 v out, a compare, a separate bitpack.
  LceBMaxPool2d   OR of our codes over the window (max of +-1), padded taps ignored
  LceDequantize   unpack, 2 * code - 1 in float32
  builtins        Relax ops (conv2d, depthwise, pools, add, mean, matmul, softmax, reshape, relu, pad);
                  compile_relax schedules the float ones with our float kernels.
Each op is emitted by the function its graph/ops/lce.py entry names (below _Emitter).
"""
from __future__ import annotations

import numpy as np

from edge_sdk.compiler.bitserial import io, kernels as ops
from edge_sdk.errors import CompileError, UsageError
from edge_sdk.graph.ops import lce as registry
from edge_sdk.models.lce import ACTIVATIONS, LceGraph, bconv_geometry, pads
from edge_sdk.quant.bitserial import pack_conv_weights
from edge_sdk.variants import LCE_VARIANTS

WORD = "uint32"
GOLDEN_TOL = 1e-4  # float ops in float32 vs the float64 numpy reference


def _sign_pack(x):
    from tvm import te

    codes = te.compute(x.shape, lambda *i: (x[i] >= 0).astype("int32"), name="sign")
    return ops.bitpack(codes, bits=1, word=WORD, name="pack")


def _bmaxpool(p, *, k, stride, pad, out_hw):
    from tvm import te, tirx

    t, l, _, _ = pad
    n, h, w, cw, bits = (int(s) for s in p.shape)
    zero = tirx.const(0, p.dtype)

    def f(b, y, x, c, i):
        acc = zero
        for ry in range(k[0]):
            for rx in range(k[1]):
                iy, ix = y * stride[0] + ry - t, x * stride[1] + rx - l
                ok = tirx.all(iy >= 0, iy < h, ix >= 0, ix < w)
                acc = acc | tirx.if_then_else(ok, p[b, tirx.max(tirx.min(iy, h - 1), 0),
                                                    tirx.max(tirx.min(ix, w - 1), 0), c, i], zero)
        return acc

    return te.compute((n, *out_hw, cw, bits), f, name="bmaxpool")


def _threshold_pack(v, t_min):
    from tvm import te

    codes = te.compute(v.shape, lambda *i: (v[i] >= t_min[i[-1]]).astype("int32"), name="threshold")
    return ops.bitpack(codes, bits=1, word=WORD, name="pack")


def _dequant(p, *, channels: int):
    from tvm import te

    codes = io.unpack_compute(p, channels=channels)
    return te.compute(codes.shape, lambda *i: codes[i].astype("float32") * 2.0 - 1.0, name="dequant")


class _Emitter:
    def __init__(self, g: LceGraph, *, arch: str | None, glue: str):
        from tvm import relax

        if glue not in ("fused", "unfused"):
            raise CompileError(f"LCE graph: glue '{glue}' is not 'fused' or 'unfused'")
        self.relax, self.g, self.arch, self.glue = relax, g, arch, glue
        self.bb = relax.BlockBuilder()
        self.env: dict[int, object] = {}
        self.names: dict[str, str] = {}
        self.funcs: dict = {}

    def const(self, arr, dtype=None):
        import tvm

        a = np.ascontiguousarray(np.asarray(arr, dtype) if dtype else arr)
        return self.relax.const(tvm.runtime.tensor(a))

    def value(self, i: int):
        return self.env[i] if i in self.env else self.const(self.g.consts[i], "float32")

    def act(self, y, code: int):
        rng = ACTIVATIONS[code]
        if rng is None:
            return y
        lo, hi = rng
        op = self.relax.op
        return self.bb.emit(op.nn.relu(y) if hi is None and lo == 0 else op.clip(y, lo, hi))

    def bconv(self, k: int, op):
        g, o = self.g, op.options
        w, stride, pad, kk = bconv_geometry(g, op)
        if stride[0] != stride[1]:
            raise CompileError(f"{g.path}: op {k} (LceBconv2d): unequal strides {stride} are not supported")
        n, h, wd = g.shapes[op.inputs[0]][:3]
        c, f = o["channels_in"], w.shape[3]
        spec = dict(batch=n, height=h, width=wd, channels=c, filters=f, kernel=w.shape[0], stride=stride[0],
                    padding=pad, a_bits=1, w_bits=1, mode="bipolar", word=WORD, pad_value=o["pad_values"])
        if w.shape[0] != w.shape[1]:
            raise CompileError(f"{g.path}: op {k} (LceBconv2d): non-square {w.shape[0]}x{w.shape[1]} kernels")
        codes = (w > 0).astype(np.int64)  # ours: bit 1 = +1
        args = [self.env[op.inputs[0]], self.const(pack_conv_weights(codes, bits=1, word=WORD))]
        oh, ow = g.shapes[op.outputs[0]][1:3]
        packed_out = g.dtypes[op.outputs[0]] == "int32"
        if packed_out:
            thr = g.const(op.inputs[4], op, "thresholds").astype(np.int64)
            t_min = np.clip(kk - 2 * thr, -kk, kk + 1)  # code 1 (+1) iff v >= t_min
            if self.glue == "fused":
                spec.update(glue_out_bits=1, out_word=WORD)
                zeros = np.zeros(f, np.int32)
                args += [self.const(zeros), self.const(1 - t_min, "int32"), self.const(zeros)]
                ty = self.relax.TensorType((n, oh, ow, -(-f // 32), 1), WORD)
                return self._call(spec, args, ty, k)
            v = self._call(spec, args, self.relax.TensorType((n, oh, ow, f), "int32"), k)
            return self.bb.emit_te(_threshold_pack, v, self.const(t_min, "int32"), primfunc_name_hint="lce_threshold")
        v = self._call(spec, args, self.relax.TensorType((n, oh, ow, f), "int32"), k)
        rop = self.relax.op
        y = self.act(self.bb.emit(rop.astype(v, "float32")), o["fused_activation_function"])
        y = self.bb.emit(rop.multiply(y, self.const(g.const(op.inputs[2], op, "multiplier"), "float32")))
        return self.bb.emit(rop.add(y, self.const(g.const(op.inputs[3], op, "bias"), "float32")))

    def _call(self, spec, args, ty, k):
        key = tuple(sorted((a, str(b)) for a, b in spec.items()))
        if key not in self.funcs:
            name = f"edge_lce_bconv_{len(self.funcs)}"
            func = ops.conv2d_prim_func(arch=self.arch, **spec)
            attrs = {"global_symbol": name, "tirx.noalias": True}
            if self.arch:
                attrs.update({"tirx.is_scheduled": True, "op_pattern": 8})
            self.funcs[key] = self.bb.add_func(func.with_attrs(attrs), name)
        var = self.bb.emit(self.relax.call_tir(self.funcs[key], args, ty), name_hint=f"bconv{k}")
        self.names[var.name] = f"bconv{k}"
        return var

    def op(self, k: int, op):
        """One op by its graph/ops/lce.py entry's emitter."""
        d = registry.of(op.kind)
        if d is None:
            raise CompileError(f"{self.g.path}: op {op.kind} has no lowering")
        return registry.resolve(d.kernel)(self, k, op)


# ---- each op's emitter (graph/ops/lce.py entries name them): f(em, k, op) -> relax value -------------------

def quantize(em: _Emitter, k: int, op):
    return em.bb.emit_te(_sign_pack, em.env[op.inputs[0]], primfunc_name_hint="lce_quantize")


def dequantize(em: _Emitter, k: int, op):
    return em.bb.emit_te(_dequant, em.env[op.inputs[0]], channels=em.g.channels[op.inputs[0]],
                         primfunc_name_hint="lce_dequantize")


def bmaxpool(em: _Emitter, k: int, op):
    o, g = op.options, em.g
    f, s = (o["filter_height"], o["filter_width"]), (o["stride_height"], o["stride_width"])
    pad = pads(op, g.shapes[op.inputs[0]], f, s, o["padding"])
    return em.bb.emit_te(_bmaxpool, em.env[op.inputs[0]], k=f, stride=s, pad=pad,
                         out_hw=g.shapes[op.outputs[0]][1:3], primfunc_name_hint="lce_bmaxpool")


def bconv2d(em: _Emitter, k: int, op):
    return em.bconv(k, op)


def conv2d(em: _Emitter, k: int, op):
    """CONV_2D and DEPTHWISE_CONV_2D as a float Relax conv2d (NHWC, HWIO)."""
    g, o, rop, bb = em.g, op.options, em.relax.op, em.bb
    in_shape = g.shapes[op.inputs[0]]
    w = g.const(op.inputs[1], op, "the filter").astype(np.float32)
    dw = op.kind == "DEPTHWISE_CONV_2D"
    w = w.transpose(1, 2, 0, 3) if dw else w.transpose(1, 2, 3, 0)  # -> HWIO ((KH, KW, 1, C) depthwise)
    pad = pads(op, in_shape, w.shape[:2], o["stride"], o["padding"])
    y = bb.emit(rop.nn.conv2d(em.env.get(op.inputs[0]), em.const(w), strides=o["stride"], padding=pad,
                              data_layout="NHWC", kernel_layout="HWIO", groups=in_shape[3] if dw else 1))
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        y = bb.emit(rop.add(y, em.const(g.consts[op.inputs[2]], "float32")))
    return em.act(y, o["act"])


def pool(em: _Emitter, k: int, op):
    o, rop = op.options, em.relax.op
    pad = pads(op, em.g.shapes[op.inputs[0]], o["filter"], o["stride"], o["padding"])
    f = rop.nn.max_pool2d if op.kind == "MAX_POOL_2D" else rop.nn.avg_pool2d
    extra = {} if op.kind == "MAX_POOL_2D" else {"count_include_pad": False}
    y = em.bb.emit(f(em.env.get(op.inputs[0]), o["filter"], o["stride"], padding=pad, layout="NHWC", **extra))
    return em.act(y, o["act"])


def add(em: _Emitter, k: int, op):
    y = em.bb.emit(em.relax.op.add(em.value(op.inputs[0]), em.value(op.inputs[1])))
    return em.act(y, op.options["act"])


def mean(em: _Emitter, k: int, op):
    axes = [int(v) for v in np.atleast_1d(em.g.const(op.inputs[1], op, "the axes"))]
    return em.bb.emit(em.relax.op.mean(em.env.get(op.inputs[0]), axis=axes, keepdims=op.options["keep_dims"]))


def dense(em: _Emitter, k: int, op):
    g, rop, bb = em.g, em.relax.op, em.bb
    w = g.const(op.inputs[1], op, "the weights").astype(np.float32)
    y = bb.emit(rop.matmul(bb.emit(rop.reshape(em.env.get(op.inputs[0]), (-1, w.shape[1]))), em.const(w.T)))
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        y = bb.emit(rop.add(y, em.const(g.consts[op.inputs[2]], "float32")))
    return bb.emit(rop.reshape(em.act(y, op.options["act"]), g.shapes[op.outputs[0]]))


def softmax(em: _Emitter, k: int, op):
    a, o, rop = em.env.get(op.inputs[0]), op.options, em.relax.op
    if o.get("beta", 1.0) != 1.0:
        a = em.bb.emit(rop.multiply(a, em.relax.const(o["beta"], "float32")))
    return em.bb.emit(rop.nn.softmax(a, axis=-1))


def reshape(em: _Emitter, k: int, op):
    return em.bb.emit(em.relax.op.reshape(em.env.get(op.inputs[0]), em.g.shapes[op.outputs[0]]))


def relu(em: _Emitter, k: int, op):
    """RELU and RELU6."""
    a, rop = em.env.get(op.inputs[0]), em.relax.op
    return em.bb.emit(rop.nn.relu(a) if op.kind == "RELU" else rop.clip(a, 0.0, 6.0))


def pad(em: _Emitter, k: int, op):
    p = em.g.const(op.inputs[1], op, "the paddings").astype(np.int64)
    return em.bb.emit(em.relax.op.nn.pad(em.env.get(op.inputs[0]), [int(v) for v in p.reshape(-1)]))


def emit_lce(g: LceGraph, *, arch: str | None, glue: str = "fused"):
    """The Relax module of an LCE graph (module docstring) and {binding name: op name} of its bconvs."""
    em = _Emitter(g, arch=arch, glue=glue)
    relax = em.relax
    x = relax.Var("input", relax.TensorType(g.shapes[g.input], "float32"))
    em.env[g.input] = x
    with em.bb.function("main", [x]):
        with em.bb.dataflow():
            for k, op in enumerate(g.ops):
                em.env[op.outputs[0]] = em.op(k, op)
            gv = em.bb.emit_output(em.env[g.output])
        em.bb.emit_func_output(gv)
    return relax.transform.Normalize()(em.bb.get()), em.names


def _rows(g: LceGraph, mod, names: dict[str, str]) -> list[dict]:
    """The layer table, with each binary conv's call_tir row named and counted (binary MACs as 2 ops)."""
    from edge_sdk.compiler.layers import layer_table

    bconvs = {f"bconv{k}": op for k, op in enumerate(g.ops) if op.kind == "LceBconv2d"}
    rows = []
    for r in layer_table(mod):
        if r["name"] in names:
            op = bconvs[names[r["name"]]]
            fo, kh, kw, _ = g.shapes[op.inputs[1]]
            n, oh, ow = g.shapes[op.outputs[0]][:3]
            r = {**r, "op": "bitserial_conv2d", "flops": 2 * n * oh * ow * fo * kh * kw * op.options["channels_in"],
                 "bits": {"weights": 1, "activations": 1}, "polarity": "bipolar"}
            r["intensity"] = round(r["flops"] / max(1, r["bytes_read"] + r["bytes_written"]), 3)
        elif r["op"] == "call_tir":
            r = {**r, "op": "bitserial_aux"}
        rows.append(r)
    return rows


def lower_lce(model, variant, target, *, progress, seed: int):
    """The bitserial backend for an imported LCE model (variant w1a1: fused thresholds; w1a1-unfused)."""
    from pathlib import Path

    from edge_sdk.compiler.build import Lowered
    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.models.lce import read_lce
    from edge_sdk.quant.lce_ref import run_reference

    if not variant.lce:
        raise UsageError(f"{model.source} is a Larq binary model (1-bit weights and activations): compile it with "
                         f"--variant {' or '.join(LCE_VARIANTS)}, not {variant.name}")
    g = read_lce(Path(model.source))
    x = model.example_input(seed=seed)
    golden = run_reference(g, x)
    progress(f"LCE graph: {len(g.ops)} ops, {model.options['binary_convs']} binary convs; golden from numpy")
    mod, names = emit_lce(g, arch=target.arch, glue=variant.glue)
    rows = _rows(g, mod, names)
    ex, params = compile_relax(mod, target, progress=progress)
    extra = {"polarity": "bipolar", "glue": variant.glue, "format": "lce", "binary_layers": len(names)}
    return Lowered(ex, params, x, golden, "numpy-lce", extra=extra, rtol=GOLDEN_TOL, atol=GOLDEN_TOL, layers=rows)
