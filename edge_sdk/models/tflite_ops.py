"""Op conversions the Relax TFLite frontend gets wrong or lacks, as methods of the import's converter
(models/tflite_fold.converter_class adds them to the frontend's OperatorConverter).

PRELU: the frontend broadcasts alpha to the input's full shape and applies prelu over the flattened
tensor, so every PRELU layer of a landmark model (mediapipe's face / iris / palm models have 13-73) becomes
a constant as large as its activation (1x128x128x8 float32: 512 KiB) and a kernel that streams it. A
per-channel alpha (shape (C,), (1, 1, C) ..., or a scalar) is what trained files hold: it imports as
relax.nn.prelu over the channel axis with a (C,) alpha (a float16 alpha behind DEQUANTIZE too). Any other
alpha keeps the frontend's conversion. The float rewriter fuses it into the kernel before it (ops/chain.py).

Convolution2DTransposeBias (mediapipe's custom op; its registry entry is graph/ops/float_custom.py): the
builtin TRANSPOSE_CONV's conversion plus a bias.
"""
from __future__ import annotations

import numpy as np


def convert_prelu(self, op):
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    data, alpha_t = self.get_input_tensors(op)
    shape = [int(s) for s in self.get_tensor_shape(data)]
    alpha = self.known(alpha_t)  # a constant (or folded) alpha, else None
    if alpha is None:
        alpha = _half_constant(self, alpha_t)
    if alpha is None or not shape:
        return OperatorConverter.convert_prelu(self, op)
    alpha = np.asarray(alpha, np.float32)
    c = shape[-1]
    lead = alpha.shape[:-1] if alpha.ndim else ()
    if alpha.size not in (1, c) or any(int(s) != 1 for s in lead):
        return OperatorConverter.convert_prelu(self, op)
    per_channel = np.ascontiguousarray(np.broadcast_to(alpha.reshape(-1), (c,)))
    return relax.op.nn.prelu(self.get_tensor_expr(data), relax.const(per_channel), axis=len(shape) - 1)


def _half_constant(self, t):
    """The value of a float16 constant behind DEQUANTIZE (the frontend's astype of a constant: mediapipe's
    fp16 face_landmark stores its PRELU slopes so), as float32; else None."""
    import tvm
    from tvm import relax

    if t.tensor_idx < 0 or not self.has_expr(t.tensor_idx):
        return None
    expr = self.get_expr(t.tensor_idx)
    if (isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.astype"
            and isinstance(expr.args[0], tvm.ir.GenericConst)):
        return expr.args[0].value.numpy().astype(np.float32)
    return None


CONV1X1_FORM = True  # kernel == stride transposed convs as a 1x1 conv (tests turn it off to check the other form)


def convert_conv2d_transpose_bias(self, op):
    """mediapipe's custom Convolution2DTransposeBias (its segmentation models' decoder): TRANSPOSE_CONV with a
    bias and no output_shape input. Inputs: data (NHWC), weights (OHWI), bias (O); custom options: the raw
    TfLiteTransposeConvParams struct, int32 padding (1 SAME, 2 VALID), stride_w, stride_h. Imported as the
    builtin's NHWC conv2d_transpose plus the bias (the import then permutes it to NCHW / IOHW, as for the
    builtin); the numpy reference is quant/resize_ref.conv2d_transpose."""
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import get_pad_value

    from edge_sdk.errors import ModelError

    data, weight_t, bias_t = self.get_input_tensors(op)
    raw = op.CustomOptionsAsNumpy()
    opts = np.frombuffer(raw.tobytes(), "<i4") if not isinstance(raw, int) else np.zeros(0, np.int32)
    if opts.size < 3 or int(opts[0]) not in (1, 2) or min(int(opts[1]), int(opts[2])) < 1:
        raise ModelError(f"Convolution2DTransposeBias: custom options {opts.tolist()}: expected padding "
                         "(1 SAME, 2 VALID), stride_w, stride_h")
    padding, stride_w, stride_h = (int(v) for v in opts[:3])
    _, out_h, out_w, out_c = (int(s) for s in self.get_tensor_shape(self.get_output_tensors(op)[0]))
    _, kh, kw, _ = (int(s) for s in self.get_tensor_shape(weight_t))
    pads = (0, 0, 0, 0)
    if padding == 1:
        top, bottom = get_pad_value(out_h, kh, stride_h)
        left, right = get_pad_value(out_w, kw, stride_w)
        pads = (top, left, bottom, right)
    bias = relax.op.reshape(self.get_tensor_expr(bias_t), (out_c,))
    if CONV1X1_FORM and (kh, kw) == (stride_h, stride_w) and not any(pads):  # no overlap: 1x1 conv + move
        return relax.op.add(_tconv_as_conv1x1(self, data, weight_t, (kh, kw, out_c)), bias)
    w_iohw = relax.op.permute_dims(self.get_tensor_expr(weight_t), axes=(3, 0, 1, 2))  # OHWI -> IOHW (folded)
    out = relax.op.nn.conv2d_transpose(self.get_tensor_expr(data), w_iohw, strides=(stride_h, stride_w),
                                       padding=pads, data_layout="NHWC", kernel_layout="IOHW", out_dtype="float32")
    return relax.op.add(out, bias)


def _tconv_as_conv1x1(self, data, weight_t, khw_o):
    """A transposed conv whose kernel equals its stride (no padding) writes each input pixel's kh x kw block
    of outputs alone: out[i*kh + a, j*kw + b, o] = sum_c x[i, j, c] w[o, a, b, c], i.e. a 1x1 conv to kh*kw*O
    channels (our scheduled GEMM; TOPI's conv2d_transpose is unscheduled loops) and a depth-to-space move."""
    from tvm import relax

    kh, kw, o = khw_o
    _, h, w, c = (int(s) for s in self.get_tensor_shape(data))
    wt = relax.op.permute_dims(self.get_tensor_expr(weight_t), axes=(3, 1, 2, 0))  # OHWI -> C, kh, kw, O
    w_hwio = relax.op.reshape(wt, (1, 1, c, kh * kw * o))  # folded at compile time
    y = relax.op.nn.conv2d(self.get_tensor_expr(data), w_hwio, data_layout="NHWC", kernel_layout="HWIO",
                           out_dtype="float32")
    y = relax.op.permute_dims(relax.op.reshape(y, (1, h, w, kh, kw, o)), axes=(0, 1, 3, 2, 4, 5))
    return relax.op.reshape(y, (1, h * kh, w * kw, o))
