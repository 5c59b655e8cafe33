"""The numpy bodies of the float Relax ops (graph/ops/float_ops.py names each as its `reference`): every
function is f(call, args) -> array (or a tuple, for ops with several outputs), `call` the relax.Call (its op,
attributes, argument and result types), `args` its arguments' values in float64 (None for a relax.ShapeExpr).
They share no code with TVM's kernels or ours; quant/relax_ref.py walks a graph and calls them."""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError


def _ints(v) -> list[int]:
    return [int(i) for i in v]


def _conv2d_nhwc(x, w, attrs):
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


def _pool_nhwc(x, attrs, kind, out_shape):
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


def layout(call, args):
    op = call.op.name
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


def prelu(call, args):
    shape = [1] * args[0].ndim
    shape[int(call.attrs.axis)] = -1
    return np.where(args[0] > 0, args[0], args[0] * args[1].reshape(shape))


def conv2d(call, args):
    return _conv2d_nhwc(args[0], args[1], call.attrs)


def pool2d(call, args):
    kind = "max" if call.op.name == "relax.nn.max_pool2d" else "avg"
    return _pool_nhwc(args[0], call.attrs, kind, _shape(call.ty))


_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
           "maximum": np.maximum, "minimum": np.minimum}


def binary(call, args):
    return _BINARY[call.op.name.split(".")[1]](args[0], args[1])


def adaptive_avg_pool2d(call, args):
    return args[0].mean(axis=(2, 3) if str(call.attrs.layout) == "NCHW" else (1, 2), keepdims=True)


def mean(call, args):
    return args[0].mean(axis=tuple(_ints(call.attrs.axis)), keepdims=bool(call.attrs.keepdims))


def matmul(call, args):
    return args[0] @ args[1]


def batch_norm(call, args):
    """Inference: the moving statistics; returns (y, mean, var) like Relax."""
    a = call.attrs
    x, gamma, beta, mu, var = args[:5]
    shape = [1] * x.ndim
    shape[int(a.axis)] = -1
    scale = (gamma / np.sqrt(var + float(a.epsilon))).reshape(shape)
    return ((x - mu.reshape(shape)) * scale + beta.reshape(shape), mu, var)


def softmax(call, args):
    return _softmax(args[0], int(call.attrs.axis))


def reshape(call, args):
    """reshape, flatten, squeeze, expand_dims, batch_flatten: the values in order, the result type's shape."""
    return args[0].reshape(_shape(call.ty))


def broadcast_to(call, args):
    return np.broadcast_to(args[0], _shape(call.ty))


def permute_dims(call, args):
    axes = call.attrs.axes
    return args[0].transpose(None if axes is None else _ints(axes))


def astype(call, args):
    return args[0].astype(str(call.attrs.dtype))


def pad(call, args):
    a = call.attrs
    pw = _ints(a.pad_width)
    fill = float(a.pad_value) if hasattr(a, "pad_value") else 0.0
    return np.pad(args[0], list(zip(pw[0::2], pw[1::2])), constant_values=fill)


def conv2d_transpose(call, args):
    from edge_sdk.quant.resize_ref import conv2d_transpose as ref

    return ref(args[0], args[1], call.attrs, _shape(call.ty))


def resize2d(call, args):
    from edge_sdk.quant.resize_ref import resize2d as ref

    out = _shape(call.ty)
    hw = (out[2], out[3]) if str(call.attrs.layout) == "NCHW" else (out[1], out[2])
    return ref(args[0], list(hw), call.attrs)
