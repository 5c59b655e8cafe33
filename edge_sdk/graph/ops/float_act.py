"""One registration per float activation a float kernel fuses into its epilogue (Epilogue.act[0]): the
importers' ops that become it, its numpy reference and its TIR expression, tied in one entry.

    ACTS["hswish"] -> ActDef(kind, reference, kernel, params=..., relax_op=..., subgraph=..., tflite=...)
    of(kind) / by_relax_op("relax.sigmoid") -> ActDef | None

The TVM frontends (TFLite, ONNX) import each op as Relax ops; the float rewriter (compiler/ops/fuse.py
with chain.py) folds them into the kernel before it: a lone Relax op (`relax_op`: relu, clip, sigmoid)
directly, an elementwise subgraph (`subgraph`: x * sigmoid(x), x * relu6(x + 3) / 6 in any of the forms
the importers write) by comparing its numpy value with the entry's `reference` on sample points. The
same reference is the numpy truth of compile/choice's float families (choice/families.np_activate) and
of the ONNX golden's Relax evaluator for the lone ops (quant/relax_ref.py). `kernel` is the activation
as a TIR expression (compiler/ops/activation.activate calls it). docs/OPS.md lists them beside the int8
op (`int8`) that computes the same function in the int8 path.

Names are "module:function" strings, as in graph/ops (graph/ is below quant/ and compiler/): reference
f(v, *params) -> array of v's dtype (numpy), kernel f(value, *params, isa) -> PrimExpr.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActDef:
    kind: str  # Epilogue.act[0]
    reference: str  # "module:function" in edge_sdk.quant: f(v, *params) -> numpy array
    kernel: str  # "module:function" in edge_sdk.compiler: f(value, *params, isa) -> PrimExpr
    params: tuple[str, ...] = ()  # the act tuple's values after the kind (clip: lo, hi)
    relax_op: str | None = None  # the Relax op that is this activation alone (its args after x: the params)
    subgraph: bool = False  # chain.match_activation looks for it as an elementwise subgraph of several ops
    tflite: tuple[str, ...] = ()  # TFLite builtins the Relax TFLite frontend imports as it
    onnx: tuple[str, ...] = ()  # ONNX op types the Relax ONNX frontend imports as it
    int8: str = ""  # the int8 op (graph/ops) that computes the same function, for docs/OPS.md
    doc: str = ""


ACTS: dict[str, ActDef] = {}
# who resolves each kind of name (tests/test_architecture.py counts resolver -> named module as an import)
RESOLVED_BY = {"reference": ("edge_sdk.compiler.ops.chain", "edge_sdk.compiler.choice.families",
                             "edge_sdk.quant.relax_ref"),
               "kernel": ("edge_sdk.compiler.ops.activation",)}


def register(d: ActDef) -> ActDef:
    if d.kind in ACTS:
        raise ValueError(f"activation {d.kind} is registered twice")
    ACTS[d.kind] = d
    return d


def of(kind: str) -> ActDef | None:
    return ACTS.get(kind)


def by_relax_op(op: str | None) -> ActDef | None:
    return next((d for d in ACTS.values() if d.relax_op is not None and d.relax_op == op), None)


def links() -> list[tuple[str, str]]:
    return [(r, getattr(d, f)) for d in ACTS.values() for f, rs in RESOLVED_BY.items() for r in rs]


_REF = "edge_sdk.quant.float_act:"
_KERNEL = "edge_sdk.compiler.ops.activation:"

register(ActDef("none", _REF + "none", _KERNEL + "none_expr", doc="no activation"))
register(ActDef("relu", _REF + "relu", _KERNEL + "relu_expr", relax_op="relax.nn.relu", tflite=("RELU",),
                onnx=("Relu",), doc="max(x, 0)"))
register(ActDef("clip", _REF + "clip", _KERNEL + "clip_expr", params=("lo", "hi"), relax_op="relax.clip",
                tflite=("RELU6", "RELU_N1_TO_1"), onnx=("Clip",),
                doc="min(max(x, lo), hi); a positive scalar multiply after it (hard-sigmoid's / 6) scales lo, hi"))
register(ActDef("sigmoid", _REF + "sigmoid", _KERNEL + "sigmoid_expr", relax_op="relax.sigmoid", subgraph=True,
                tflite=("LOGISTIC",), onnx=("Sigmoid",), int8="LOGISTIC",
                doc="1 / (1 + e^-x), our exp (a vector divide; the Newton reciprocal on NEON)"))
register(ActDef("swish", _REF + "swish", _KERNEL + "swish_expr", subgraph=True, int8="MUL",
                doc="x * sigmoid(x) (MUL of LOGISTIC / Mul of Sigmoid: EfficientNet's swish)"))
register(ActDef("hswish", _REF + "hswish", _KERNEL + "hswish_expr", subgraph=True, tflite=("HARD_SWISH",),
                onnx=("HardSwish",), int8="HARD_SWISH", doc="x * relu6(x + 3) / 6 (MobileNetV3)"))
register(ActDef("prelu", _REF + "prelu", _KERNEL + "prelu_expr", params=("alpha",), tflite=("PRELU",),
                onnx=("PRelu",), doc="x >= 0 ? x : alpha x with one alpha per channel (relax.nn.prelu over the "
                "channel axis), read after the biases in the kernel's bias argument"))
