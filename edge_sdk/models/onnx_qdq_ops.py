"""The float ops of an ONNX QDQ file as Int8Graph ops (models/onnx_qdq.py reads the graph): MAP[op_type].

Each mapper reads its int8 inputs (a DequantizeLinear's value), its constant int8 weights/bias (a
DequantizeLinear of an initializer) and its output quantization (the QuantizeLinear after it), and appends
TFLite-shaped ops. 4-D activations are NHWC for convs, pools, elementwise ops, Concat/Split/Slice; ONNX
order for Reshape/Flatten/Transpose/Gemm (Builder.layout inserts the TRANSPOSE).
"""
from __future__ import annotations

import numpy as np

from edge_sdk.graph import ops as registry
from edge_sdk.models.onnx_qdq_build import TO_NHWC, Builder, Value, qparams
from edge_sdk.quant import int8 as q8

_AXIS_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}  # an NCHW axis in NHWC


def quantize_input(b: Builder, x: int, q: q8.QParams) -> Value:
    out = b.tensor(b.tensors[x].name + "/q", b.tensors[x].shape, "int8", q)
    b.op("QUANTIZE", [x], [out])
    return Value(out, False)


def _act(b: Builder, node, i: int = 0) -> Value:
    v = b.values.get(node.input[i])
    if not isinstance(v, Value):
        raise b.fail(f"input '{node.input[i]}' is not an int8 value (no DequantizeLinear of a quantized "
                     "tensor feeds it)")
    return v


def _weights(b: Builder, node, i: int, *, required: bool = True):
    name = node.input[i] if len(node.input) > i else ""
    if not name and not required:
        return None
    if name not in b.weights:
        raise b.fail(f"input '{name}' is not a constant quantized by a DequantizeLinear")
    return b.weights[name]


def _out(b: Builder, node, *, nhwc: bool, k: int = 0, q: q8.QParams | None = None) -> Value:
    """The int8 tensor of output k: the ONNX shape (NHWC when asked and 4-D) and the QuantizeLinear's params."""
    name = node.output[k]
    q = q if q is not None else b.qparams.get(name)
    if q is None:
        raise b.fail(f"output '{name}' is not quantized (no QuantizeLinear reads it)")
    if name not in b.shapes:
        raise b.fail(f"output '{name}' has no static shape")
    shape = b.shapes[name]
    nhwc = nhwc and len(shape) == 4
    if nhwc:
        shape = tuple(shape[p] for p in TO_NHWC)
    v = Value(b.tensor(name, shape, "int8", q), nhwc)
    b.values[name] = v
    return v


def _settle(b: Builder, node, v: Value, k: int = 0) -> None:
    """An op computed at its input's quantization (pools, layout ops): requantized to the output's."""
    name = node.output[k]
    q = b.qparams.get(name)
    if q is None:
        raise b.fail(f"output '{name}' is not quantized (no QuantizeLinear reads it)")
    v = b.requantize(v, q)
    b.tensors[v.index].name = name  # the ONNX value it is (the op's own output keeps a suffixed name)
    b.values[name] = v


def _pads(b: Builder, node, a: dict, x: Value, k: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the window, with ceil_mode's extra rows/columns at the bottom/right."""
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise b.fail(f"auto_pad {a['auto_pad']!r} is not supported (explicit pads are)")
    t, left, bt, r = (list(a.get("pads", [0, 0, 0, 0])) + [0, 0, 0, 0])[:4]
    s, d = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    _, h, w, _ = b.shape_of(x)
    oh, ow = b.shapes[node.output[0]][2:4]
    bt += max(0, (oh - 1) * s[0] + (k[0] - 1) * d[0] + 1 - (h + t + bt))
    r += max(0, (ow - 1) * s[1] + (k[1] - 1) * d[1] + 1 - (w + left + r))
    return t, bt, left, r


def _window(b: Builder, x: Value, pads, k, a: dict, *, value: int | None) -> tuple[Value, str]:
    """(input, "SAME"/"VALID"): pads TFLite's SAME places as they are, else a PAD (value: None = the zero
    point, for convs; -128 for max pools) and VALID."""
    if not any(pads):
        return x, "VALID"
    s, d = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    _, h, w, c = b.shape_of(x)
    same = [q8.same_padding(n, k[i], s[i], d[i])[1:] for i, n in enumerate((h, w))]
    if value is None and tuple(pads) == (*same[0], *same[1]):
        return x, "SAME"
    t, bt, left, r = pads
    out = b.new_like(b.tensors[x.index].name + "/pad", x, (1, h + t + bt, w + left + r, c))
    spec = b.const("paddings", np.asarray([[0, 0], [t, bt], [left, r], [0, 0]], np.int32))
    if value is None:
        b.op("PAD", [x.index, spec], [out])
    else:
        b.op("PADV2", [x.index, spec, b.const("pad_value", np.asarray(value, np.int8))], [out])
    return Value(out, True), "VALID"


def _bias(b: Builder, node, x: Value, wq: q8.QParams, i: int = 2) -> list[int]:
    got = _weights(b, node, i, required=False)
    if got is None:
        return []
    data, bq = got
    want = np.float32(b.q_of(x).s) * np.asarray(wq.scale, np.float32)
    if data.dtype != np.int32 or not np.allclose(np.asarray(bq.scale, np.float32), want, rtol=1e-3):
        raise b.fail("the bias is not int32 at input scale x weight scale")
    return [b.const(node.input[i], data.reshape(-1).astype(np.int32), qparams(bq.scale, bq.zero_point))]


def conv(b: Builder, node, a: dict) -> None:
    x = b.layout(_act(b, node), True)
    w, wq = _weights(b, node, 1)
    k = tuple(int(v) for v in w.shape[2:4])
    group, cin = int(a.get("group", 1)), b.shape_of(x)[3]
    pads = _pads(b, node, a, x, k)
    x, padding = _window(b, x, pads, k, a, value=None)
    opts = {"padding": padding, "stride": tuple(a.get("strides", [1, 1])),
            "dilation": tuple(a.get("dilations", [1, 1])), "act": 0}
    if group == 1:
        kind, wt, axis = "CONV_2D", w.transpose(0, 2, 3, 1), 0
    elif group == cin and w.shape[1] == 1:
        kind, wt, axis = "DEPTHWISE_CONV_2D", w.transpose(1, 2, 3, 0), 3
        opts["depth_multiplier"] = w.shape[0] // cin
    else:
        raise b.fail(f"grouped convolution (group {group} of {cin} channels) is not supported")
    wi = b.const(node.input[1], np.ascontiguousarray(wt), qparams(wq.scale, wq.zero_point, axis))
    ins = [x.index, wi] + _bias(b, node, x, wq)
    b.op(kind, ins, [_out(b, node, nhwc=True).index], **opts)


def gemm(b: Builder, node, a: dict) -> None:
    x = b.layout(_act(b, node), False)
    w, wq = _weights(b, node, 1)
    if float(a.get("alpha", 1.0)) != 1.0 or float(a.get("beta", 1.0)) != 1.0 or a.get("transA", 0):
        raise b.fail("Gemm with alpha/beta other than 1 or transA is not supported")
    trans = node.op_type == "Gemm" and a.get("transB", 0)
    wt = w if trans else w.T  # FULLY_CONNECTED: (out, in), per output channel
    if wq.per_channel and wq.axis != (0 if trans else 1):
        raise b.fail("weights quantized per input channel are not supported")
    wi = b.const(node.input[1], np.ascontiguousarray(wt), qparams(wq.scale, wq.zero_point, 0))
    if len(b.shape_of(x)) != 2:
        raise b.fail(f"input of shape {list(b.shape_of(x))}; a (1, K) input is supported")
    ins = [x.index, wi] + _bias(b, node, x, wq)
    b.op("FULLY_CONNECTED", ins, [_out(b, node, nhwc=False).index], act=0, keep_num_dims=False)


def _operand(b: Builder, node, i: int, nhwc: bool) -> int:
    v = b.values.get(node.input[i])
    if isinstance(v, Value):
        return b.layout(v, nhwc).index
    data, q = _weights(b, node, i)
    if q.per_channel:
        raise b.fail(f"constant operand '{node.input[i]}' is quantized per channel")
    if nhwc and data.ndim:
        data = data.reshape((1,) * (4 - data.ndim) + data.shape).transpose(TO_NHWC)
    return b.const(node.input[i], np.ascontiguousarray(data), q)


def binary(b: Builder, node, a: dict) -> None:
    kind = registry.onnx_kinds("binary")[node.op_type]
    nhwc = len(b.shapes.get(node.output[0], ())) == 4
    ins = [_operand(b, node, i, nhwc) for i in (0, 1)]
    b.op(kind, ins, [_out(b, node, nhwc=nhwc).index], act=0)


def unary(b: Builder, node, a: dict) -> None:
    x = _act(b, node)
    if node.op_type == "HardSigmoid":  # alpha*x + beta: x re-labelled at alpha*s, plus a constant beta
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        q = b.q_of(x)
        scaled = b.new_like(b.tensors[x.index].name + "/alpha", x, q=qparams(np.float32(q.s * alpha), q.z))
        b.op("RESHAPE", [x.index], [scaled])
        c = b.const("beta", np.asarray(127 if beta else 0, np.int8), qparams(abs(beta) / 127 or 1.0, 0))
        if beta < 0:
            b.tensors[c].data = np.asarray(-127, np.int8)
        b.op("ADD", [scaled, c], [_out(b, node, nhwc=x.nhwc).index], act=0)
        return
    kind = registry.onnx_kinds("unary")[node.op_type]
    b.op(kind, [x.index], [_out(b, node, nhwc=x.nhwc).index])


def _const_real(b: Builder, node, i: int) -> np.ndarray:
    """A float constant input: an initializer, or a DequantizeLinear of one (its real values)."""
    name = node.input[i]
    if name in b.weights:
        data, q = b.weights[name]
        zp = np.asarray(q.zero_point, np.float64).reshape(-1)
        return (data.astype(np.float64).reshape(-1) - zp) * np.asarray(q.scale, np.float64).reshape(-1)
    if name in b.consts:
        return b.consts[name].astype(np.float64).reshape(-1)
    raise b.fail(f"input '{name}' is not a constant")


def batch_norm(b: Builder, node, a: dict) -> None:
    """DQ -> BatchNormalization -> Q (a pre-activation BN the quantizer left float: DenseNet) as a 1x1
    DEPTHWISE_CONV_2D: y = A_c x + B_c with A_c = gamma / sqrt(var + eps), B_c = beta - A_c mean, as the
    int8 weight sign(A_c) * 127 at per-channel scale |A_c| / 127 and an int32 bias B_c / (s_in |A_c| / 127):
    a per-channel integer requantize, TFLite's fixed-point arithmetic."""
    x = b.layout(_act(b, node), True)
    gamma, beta, mean, var = (_const_real(b, node, i) for i in (1, 2, 3, 4))
    scale = gamma / np.sqrt(var + float(a.get("epsilon", 1e-5)))
    shift = beta - scale * mean
    s_w = np.where(scale != 0, np.abs(scale) / 127.0, 1.0).astype(np.float32)
    w = np.where(scale > 0, 127, np.where(scale < 0, -127, 0)).astype(np.int8).reshape(1, 1, 1, -1)
    s_b = np.float32(b.q_of(x).s) * s_w
    bias = np.clip(np.round(shift / s_b.astype(np.float64)), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    zeros = np.zeros(s_w.shape, np.int64)
    wi = b.const(node.input[1] + "/bn_weight", w, qparams(s_w, zeros.astype(np.int8), 3))
    bi = b.const(node.input[2] + "/bn_bias", bias, qparams(s_b, zeros))
    b.op("DEPTHWISE_CONV_2D", [x.index, wi, bi], [_out(b, node, nhwc=True).index], padding="VALID", stride=(1, 1),
         dilation=(1, 1), act=0, depth_multiplier=1)


def global_pool(b: Builder, node, a: dict) -> None:
    x = _act(b, node)
    if node.op_type == "ReduceMean":
        axes = a.get("axes") or (list(b.consts[node.input[1]]) if len(node.input) > 1 else None)
        if sorted(int(v) % 4 for v in axes or ()) != [2, 3] or len(b.shape_of(x)) != 4:
            raise b.fail(f"ReduceMean over axes {axes} is not supported (over H and W of a 4-D map is)")
    keep = bool(a.get("keepdims", 1))
    x = b.layout(x, True)
    axes_i = b.const("axes", np.asarray([1, 2], np.int32))
    b.op("MEAN", [x.index, axes_i], [_out(b, node, nhwc=keep).index], keep_dims=keep)


def pool(b: Builder, node, a: dict) -> None:
    x = b.layout(_act(b, node), True)
    k = tuple(int(v) for v in a["kernel_shape"])
    if a.get("dilations", [1, 1]) != [1, 1] and "dilations" in a:
        raise b.fail("dilated pooling is not supported")
    pads = _pads(b, node, a, x, k)
    if node.op_type == "MaxPool":
        x, padding = _window(b, x, pads, k, a, value=-128)
    elif any(pads) and a.get("count_include_pad", 0):
        x, padding = _window(b, x, pads, k, a, value=None)
    else:
        x, padding = _window(b, x, pads, k, a, value=None) if not any(pads) else (x, "SAME")
        s = a.get("strides", [1, 1])
        same = [q8.same_padding(n, k[i], s[i])[1:] for i, n in enumerate(b.shape_of(x)[1:3])]
        if any(pads) and tuple(pads) != (*same[0], *same[1]):
            raise b.fail("average pooling with padding that excludes the pad (count_include_pad 0) is "
                         "supported only where it is TFLite's SAME padding")
    shape = tuple(b.shapes[node.output[0]][p] for p in TO_NHWC)
    y = Value(b.tensor(node.output[0] + "/pool", shape, "int8", b.q_of(x)), True)
    b.op("MAX_POOL_2D" if node.op_type == "MaxPool" else "AVERAGE_POOL_2D", [x.index], [y.index],
         padding=padding, stride=tuple(a.get("strides", [1, 1])), filter=k, act=0)
    _settle(b, node, y)


def _axis(b: Builder, v: Value, axis: int) -> int:
    axis %= len(b.shape_of(v))
    return _AXIS_NHWC[axis] if v.nhwc else axis


def concat(b: Builder, node, a: dict) -> None:
    vals = [b.values.get(n) for n in node.input]
    if not all(isinstance(v, Value) for v in vals):
        raise b.fail("a constant Concat input is not supported")
    q = b.qparams.get(node.output[0])
    nhwc = len(b.shape_of(vals[0])) == 4
    vals = [b.requantize(b.layout(v, nhwc), q) if q is not None else v for v in vals]
    out = _out(b, node, nhwc=nhwc)
    b.op("CONCATENATION", [v.index for v in vals], [out.index], axis=_axis(b, vals[0], int(a.get("axis", 0))), act=0)


def split(b: Builder, node, a: dict) -> None:
    x = _act(b, node)
    x = b.layout(x, len(b.shape_of(x)) == 4)
    axis = _axis(b, x, int(a.get("axis", 0)))
    sizes = [b.shapes[o][int(a.get("axis", 0))] for o in node.output]
    outs = []
    for k, o in enumerate(node.output):
        shape = list(b.shape_of(x))
        shape[axis] = sizes[k]
        outs.append(Value(b.tensor(o + "/split", shape, "int8", b.q_of(x)), x.nhwc))
    b.op("SPLIT_V", [x.index, b.const("sizes", np.asarray(sizes, np.int32)), b.const("axis", np.asarray(axis, np.int32))],
         [v.index for v in outs], num_splits=len(outs))
    for k, v in enumerate(outs):
        _settle(b, node, v, k)


def slice_(b: Builder, node, a: dict) -> None:
    x = _act(b, node)
    x = b.layout(x, len(b.shape_of(x)) == 4)
    shape = b.shape_of(x)
    rank = len(shape)
    consts = [b.consts.get(n) if n else None for n in node.input[1:5]]
    if any(c is None for c in consts[:2]) or any(n not in b.consts for n in node.input[3:5] if n):
        raise b.fail("Slice with starts/ends/axes/steps computed at run time is not supported")
    starts, ends = consts[0], consts[1]
    axes = consts[2] if len(consts) > 2 and consts[2] is not None else np.arange(len(starts))
    steps = consts[3] if len(consts) > 3 and consts[3] is not None else np.ones(len(starts), np.int64)
    begin, end, stride = [0] * rank, list(shape), [1] * rank
    for s, e, ax, st in zip(starts, ends, axes, steps):
        d = _axis(b, x, int(ax))
        n = shape[d]
        if st < 0:
            raise b.fail("Slice with a negative step is not supported")
        begin[d], end[d] = (int(np.clip(v + n if v < 0 else v, 0, n)) for v in (s, e))
        stride[d] = int(st)
    out_shape = [max(0, -(-(end[d] - begin[d]) // stride[d])) for d in range(rank)]
    y = Value(b.tensor(node.output[0] + "/slice", out_shape, "int8", b.q_of(x)), x.nhwc)
    ins = [x.index] + [b.const(nm, np.asarray(v, np.int32)) for nm, v in (("begin", begin), ("end", end),
                                                                         ("strides", stride))]
    b.op("STRIDED_SLICE", ins, [y.index], begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
         shrink_axis_mask=0, offset=False)
    _settle(b, node, y)


def layout_op(b: Builder, node, a: dict) -> None:
    """Reshape/Flatten/Squeeze/Unsqueeze/Transpose on ONNX's order; Identity/Dropout pass the value on."""
    x = _act(b, node)
    if node.op_type in ("Identity", "Dropout"):
        b.values[node.output[0]] = x
        return
    x = b.layout(x, False)
    y = Value(b.tensor(node.output[0] + "/raw", b.shapes[node.output[0]], "int8", b.q_of(x)), False)
    if node.op_type == "Transpose":
        perm = a.get("perm") or list(range(len(b.shape_of(x))))[::-1]
        b.op("TRANSPOSE", [x.index, b.const("perm", np.asarray(perm, np.int32))], [y.index])
    else:
        b.op("RESHAPE", [x.index], [y.index])
    _settle(b, node, y)


def finish_output(b: Builder, name: str) -> int:
    """The graph output: the int8 value in ONNX order, dequantized (the file's output is float)."""
    v = b.values.get(name)
    if not isinstance(v, Value):
        raise b.fail(f"the output '{name}' is not a DequantizeLinear of an int8 value")
    v = b.layout(v, False)
    out = b.tensor(name, b.shape_of(v), "float32")
    b.op("DEQUANTIZE", [v.index], [out])
    return out


# the registered ops (graph/ops: each entry's `onnx` op types) go through their family's converter
CONVERTERS = {"binary": binary, "unary": unary}
MAP = {**{t: CONVERTERS[registry.of(k).family] for t, k in registry.onnx_kinds().items()},
       "Conv": conv, "Gemm": gemm, "MatMul": gemm, "HardSigmoid": unary,
       "GlobalAveragePool": global_pool, "ReduceMean": global_pool, "MaxPool": pool, "AveragePool": pool,
       "Concat": concat, "Split": split, "Slice": slice_, "Reshape": layout_op, "Flatten": layout_op,
       "Squeeze": layout_op, "Unsqueeze": layout_op, "Transpose": layout_op, "Identity": layout_op,
       "Dropout": layout_op, "BatchNormalization": batch_norm}
# what docs/OPS.md says of the QDQ path (tools/make_ops_doc.py): each op's int8 op, and what is refused
BECOMES = {**registry.onnx_kinds(), "Conv": "CONV_2D, DEPTHWISE_CONV_2D (group = channels)",
           "Gemm": "FULLY_CONNECTED", "MatMul": "FULLY_CONNECTED", "HardSigmoid": "ADD (input re-labelled)",
           "GlobalAveragePool": "MEAN", "ReduceMean": "MEAN (H, W)",
           "MaxPool": "MAX_POOL_2D (PADV2 -128 for pads, ceil_mode)", "AveragePool": "AVERAGE_POOL_2D",
           "Concat": "CONCATENATION", "Split": "SPLIT_V", "Slice": "STRIDED_SLICE", "Reshape": "RESHAPE",
           "Flatten": "RESHAPE", "Squeeze": "RESHAPE", "Unsqueeze": "RESHAPE", "Transpose": "TRANSPOSE",
           "Identity": "-", "Dropout": "-", "BatchNormalization": "DEPTHWISE_CONV_2D 1x1 (per-channel scale and bias)"}
REFUSED = ("operator-oriented files (QLinearConv, QLinearMatMul, QLinearAdd ...: QuantFormat.QOperator)",
           "uint8 (QUInt8) or int16 activations, per-channel activation scales",
           "a float op between DequantizeLinear and QuantizeLinear that is not above (e.g. Softmax, Resize)",
           "grouped (not depthwise) convolution, average pooling whose padding is excluded from the mean "
           "(count_include_pad 0) unless it is TFLite's SAME padding, Gemm with alpha/beta/transA")

