"""Op conversions the Relax TFLite frontend gets wrong or lacks, as methods of the import's converter
(models/tflite_fold.converter_class adds them to the frontend's OperatorConverter).

PRELU: the frontend broadcasts alpha to the input's full shape and applies prelu over the flattened
tensor, so every PRELU layer of a landmark model (mediapipe's face / iris / palm models have 13-73) becomes
a constant as large as its activation (1x128x128x8 float32: 512 KiB) and a kernel that streams it. A
per-channel alpha (shape (C,), (1, 1, C) ..., or a scalar) is what trained files hold: it imports as
relax.nn.prelu over the channel axis with a (C,) alpha. Any other alpha keeps the frontend's conversion.
"""
from __future__ import annotations

import numpy as np


def convert_prelu(self, op):
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    data, alpha_t = self.get_input_tensors(op)
    shape = [int(s) for s in self.get_tensor_shape(data)]
    alpha = self.known(alpha_t)  # a constant (or folded) alpha, else None
    if alpha is None or not shape:
        return OperatorConverter.convert_prelu(self, op)
    alpha = np.asarray(alpha, np.float32)
    c = shape[-1]
    lead = alpha.shape[:-1] if alpha.ndim else ()
    if alpha.size not in (1, c) or any(int(s) != 1 for s in lead):
        return OperatorConverter.convert_prelu(self, op)
    per_channel = np.ascontiguousarray(np.broadcast_to(alpha.reshape(-1), (c,)))
    return relax.op.nn.prelu(self.get_tensor_expr(data), relax.const(per_channel), axis=len(shape) - 1)
