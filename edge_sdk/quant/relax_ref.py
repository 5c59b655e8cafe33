"""A plain-numpy interpreter of a float Relax graph: the independent reference for compiled code.

It evaluates the high-level Relax ops (before any lowering) in float64, so it shares no code with
TVM's kernels or ours. It covers the ops our zoo and the TFLite/ONNX importers emit for classifiers;
any other op is a ModelError naming it.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act


def _ints(v) -> list[int]:
    return [int(i) for i in v]


def _conv2d(x, w, attrs):
    if attrs.data_layout == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    elif attrs.data_layout != "NHWC":
        raise ModelError(f"reference: conv2d data layout {attrs.data_layout} not supported")
    perm = {"HWIO": (0, 1, 2, 3), "OIHW": (2, 3, 1, 0), "OHWI": (1, 2, 3, 0), "HWOI": (0, 1, 3, 2)}
    w = w.transpose(perm[str(attrs.kernel_layout)])  # -> HWIO
    sh, sw = _ints(attrs.strides)
    dh, dw = _ints(attrs.dilation)
    top, left, bottom, right = _ints(attrs.padding)
    groups = int(attrs.groups)
    x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    n, h, wd, cin = x.shape
    kh, kw, cig, cout = w.shape
    oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (wd - (kw - 1) * dw - 1) // sw + 1
    cog = cout // groups
    out = np.zeros((n, oh, ow, cout))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            if groups == 1:
                out += patch @ w[i, j]
            elif cig == 1:  # depthwise: output channel g*cog+m reads input channel g
                out += np.repeat(patch, cog, axis=3) * w[i, j, 0]
            else:
                pg = patch.reshape(n, oh, ow, groups, cig)
                wg = w[i, j].reshape(cig, groups, cog).transpose(1, 0, 2)
                out += np.einsum("nhwgc,gco->nhwgo", pg, wg).reshape(n, oh, ow, cout)
    return out.transpose(0, 3, 1, 2) if attrs.data_layout == "NCHW" else out


def _pool(x, attrs, kind, out_shape):
    """Max/average pooling as ONNX Runtime and PyTorch define it: ceil_mode windows may run past the
    padding (only the part inside input + padding counts, as ORT's pool_size); count_include_pad
    divides by that part, else by the taps inside the input. The output size is the graph's."""
    layout = str(attrs.layout)
    if layout == "NCHW":
        x = x.transpose(0, 2, 3, 1)
        out_shape = [out_shape[i] for i in (0, 2, 3, 1)]
    kh, kw = _ints(attrs.pool_size)
    sh, sw = _ints(attrs.strides)
    top, left, bottom, right = _ints(attrs.padding)
    n, h, w, c = x.shape
    oh, ow = out_shape[1], out_shape[2]
    eb = max(0, (oh - 1) * sh + kh - (h + top + bottom))  # ceil_mode's extra rows / columns
    er = max(0, (ow - 1) * sw + kw - (w + left + right))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (top, bottom + eb), (left, right + er), (0, 0)), constant_values=fill)
    inside = np.pad(np.ones((h, w)), ((top, bottom + eb), (left, right + er)))
    padded = np.pad(np.ones((h + top + bottom, w + left + right)), ((0, eb), (0, er)))
    acc = np.full((n, oh, ow, c), fill)
    cnt, cnt_pad = np.zeros((oh, ow)), np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i, i + (oh - 1) * sh + 1, sh), slice(j, j + (ow - 1) * sw + 1, sw)
            patch = xp[:, rows, cols, :]
            acc = np.maximum(acc, patch) if kind == "max" else acc + patch
            cnt += inside[rows, cols]
            cnt_pad += padded[rows, cols]
    if kind == "avg":
        acc = acc / (cnt_pad if bool(attrs.count_include_pad) else cnt)[None, :, :, None]
    return acc.transpose(0, 3, 1, 2) if layout == "NCHW" else acc


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _shape(ty) -> list[int]:
    return [int(s) for s in ty.shape]


_LAYOUT_OPS = ("relax.concat", "relax.split", "relax.strided_slice", "relax.take")


def _layout_op(op, call, args):
    """Concat / split (a tuple out) / strided_slice / take, from attributes or (strided_slice) arguments."""
    a = call.attrs
    if op == "relax.concat":
        return np.concatenate(args[0], axis=int(a.axis))
    if op == "relax.split":
        ios = a.indices_or_sections
        parts = _ints(ios) if not isinstance(ios, int) and hasattr(ios, "__len__") else int(ios)
        return tuple(np.split(args[0], parts, axis=int(a.axis)))
    if op == "relax.take":
        return np.take(args[0], args[1].astype(np.int64), axis=int(a.axis))
    x = args[0]
    axes, begin, end = (_ints(v) for v in args[1:4])
    strides = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(axes)
    sl = [slice(None)] * x.ndim
    for ax, b, e, st in zip(axes, begin, end, strides):
        sl[ax] = slice(b, min(e, 2 ** 62) if st > 0 else e, st)
    return x[tuple(sl)]


def _prelu(call, args):
    shape = [1] * args[0].ndim
    shape[int(call.attrs.axis)] = -1
    return np.where(args[0] > 0, args[0], args[0] * args[1].reshape(shape))


_SMALL_OPS = {
    "relax.nn.prelu": _prelu,
    "relax.broadcast_to": lambda call, args: np.broadcast_to(args[0], _shape(call.ty)),
}


def _eval_call(call, args):
    op = call.op.name
    a = call.attrs
    if op == "relax.nn.conv2d":
        return _conv2d(args[0], args[1], a)
    if op in ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"):
        fn = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
              "maximum": np.maximum, "minimum": np.minimum}[op.split(".")[1]]
        return fn(args[0], args[1])
    act = float_act.by_relax_op(op)  # relax.nn.relu, relax.clip, relax.sigmoid: the activation's reference
    if act is not None:
        return registry.resolve(act.reference)(args[0], *(float(v.value) for v in call.args[1:1 + len(act.params)]))
    if op == "relax.nn.relu6":
        return np.clip(args[0], 0, 6)
    if op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        return _pool(args[0], a, "max" if op == "relax.nn.max_pool2d" else "avg", _shape(call.ty))
    if op in _LAYOUT_OPS:
        return _layout_op(op, call, args)
    if op == "relax.nn.adaptive_avg_pool2d":
        layout = str(a.layout)
        axes = (2, 3) if layout == "NCHW" else (1, 2)
        return args[0].mean(axis=axes, keepdims=True)
    if op == "relax.mean":
        return args[0].mean(axis=tuple(_ints(a.axis)), keepdims=bool(a.keepdims))
    if op == "relax.matmul":
        return args[0] @ args[1]
    if op == "relax.nn.batch_norm":  # inference: moving statistics; returns (y, mean, var) like Relax
        x, gamma, beta, mean, var = args[:5]
        shape = [1] * x.ndim
        shape[int(a.axis)] = -1
        scale = (gamma / np.sqrt(var + float(a.epsilon))).reshape(shape)
        return ((x - mean.reshape(shape)) * scale + beta.reshape(shape), mean, var)
    if op == "relax.nn.softmax":
        return _softmax(args[0], int(a.axis))
    if op in ("relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims", "relax.nn.batch_flatten"):
        return args[0].reshape(_shape(call.ty))
    if op in _SMALL_OPS:
        return _SMALL_OPS[op](call, args)
    if op == "relax.permute_dims":
        return args[0].transpose(None if a.axes is None else _ints(a.axes))
    if op == "relax.astype":
        return args[0].astype(str(a.dtype))
    if op == "relax.nn.pad":
        pw = _ints(a.pad_width)
        return np.pad(args[0], list(zip(pw[0::2], pw[1::2])), constant_values=float(a.pad_value) if hasattr(a, "pad_value") else 0.0)
    if op == "relax.nn.conv2d_transpose":
        from edge_sdk.quant.resize_ref import conv2d_transpose

        return conv2d_transpose(args[0], args[1], a, _shape(call.ty))
    if op == "relax.image.resize2d":
        from edge_sdk.quant.resize_ref import resize2d

        out = _shape(call.ty)
        hw = (out[2], out[3]) if str(a.layout) == "NCHW" else (out[1], out[2])
        return resize2d(args[0], list(hw), a)
    raise ModelError(f"reference: op '{op}' is not supported by the numpy reference")


def evaluate(mod, x: np.ndarray, *, trace: dict | None = None) -> np.ndarray:
    """Run mod["main"] (one input, weights as constants) in numpy float64; return float32.

    With `trace`, every bound variable's float64 value is stored there (keyed by the relax.Var):
    post-training quantization calibrates activation ranges and measures per-layer error with it.
    """
    from tvm import relax
    from tvm.ir.expr import GenericConst

    func = mod["main"]
    env = {func.params[0]: np.asarray(x, np.float64)}

    def value(e):
        if isinstance(e, GenericConst):
            return e.value.numpy().astype(np.float64)
        if isinstance(e, relax.Var):
            return env[e]
        if isinstance(e, relax.Tuple):  # concat's operands; strided_slice's axes/begin/end
            return tuple(value(f) for f in e.fields)
        if hasattr(e, "value"):  # IntImm / FloatImm prim values
            return e.value
        raise ModelError(f"reference: unsupported expression {type(e).__name__}")

    body = func.body
    for block in body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call):
                args = [None if isinstance(arg, relax.ShapeExpr) else value(arg) for arg in v.args]
                env[b.var] = _eval_call(v, args)
            elif isinstance(v, (relax.Var, GenericConst)):
                env[b.var] = value(v)
            elif isinstance(v, relax.TupleGetItem):
                env[b.var] = env[v.tuple_value][v.index]
            elif isinstance(v, relax.Tuple):
                env[b.var] = tuple(value(f) for f in v.fields)
            else:
                raise ModelError(f"reference: unsupported binding {type(v).__name__}")
    if trace is not None:
        trace.update(env)
    out = value(body.body)
    if isinstance(out, tuple):
        out = out[0]
    return np.asarray(out, np.float32)
