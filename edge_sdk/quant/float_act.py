"""The numpy references of the float activations (graph/ops/float_act.py entries name them): f(v, *params)
on an array, in v's dtype. The float rewriter (compiler/ops/chain.py) matches elementwise subgraphs against
them, compile/choice's float families (choice/families.np_activate) check candidates with them, and the
ONNX golden's Relax evaluator (relax_ref.py) computes relu / clip / sigmoid with them."""
from __future__ import annotations

import numpy as np


def none(v):
    return v


def relu(v):
    return np.maximum(v, 0)


def clip(v, lo, hi):
    return np.clip(v, lo, hi)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def swish(v):
    return v / (1.0 + np.exp(-v))


def hswish(v):
    return v * np.clip(v + 3.0, 0.0, 6.0) / 6.0


def prelu(v, alpha):
    """x for x >= 0, alpha x below; alpha per channel (the last axis)."""
    return np.where(v >= 0, v, v * alpha)
