"""One registration per float Relax op the float path takes (besides the activations, graph/ops/float_act.py):
the importers' ops that become it, its numpy reference and our kernel for it, tied in one entry.

    FLOAT_OPS["relax.nn.conv2d"] -> FloatOpDef(relax_op, reference, kernel=..., legalize=..., tflite=..., onnx=...)
    of("relax.nn.conv2d") -> FloatOpDef | None      None: the numpy reference refuses the op (a ModelError naming it)

The TVM frontends (TFLite, ONNX) import a model as Relax ops; `tflite` / `onnx` name the file ops each becomes
(docs/OPS.md lists them). quant/relax_ref.py, the numpy truth of every float compile, evaluates an op with the
entry's `reference` (f(call, args) -> array, in quant/float_ref_ops.py) and refuses an op with no entry. The
float rewriter (compiler/ops/fuse.py) plans our scheduled kernel for an op through `kernel` (f(rewriter, graph,
call) -> the kernel's plan, or None to leave the op to TVM's legalization), and the lowering
(compiler/lower.py) takes `legalize` (f(simd) -> a LegalizeOps function) for ops whose kernel replaces TVM's
legalization; an op with neither is compiled by TVM's own legalization (TOPI). A new float op is one entry here
plus its numpy body. Names are "module:function" strings resolved by the layer that calls them (graph/ is below
quant/ and compiler/), counted as imports by tests/test_architecture.py.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FloatOpDef:
    relax_op: str  # the Relax op, e.g. "relax.nn.conv2d"
    reference: str  # "module:function" in edge_sdk.quant: f(call, args) -> numpy value
    kernel: str = ""  # "module:function" in edge_sdk.compiler: f(rewriter, graph, call) -> plan | None
    legalize: str = ""  # "module:function" in edge_sdk.compiler: f(simd) -> LegalizeOps function
    tflite: tuple[str, ...] = ()  # TFLite builtins the Relax TFLite frontend imports as (or through) it
    onnx: tuple[str, ...] = ()  # ONNX op types the Relax ONNX frontend imports as (or through) it
    doc: str = ""


FLOAT_OPS: dict[str, FloatOpDef] = {}
# who resolves each kind of name (tests/test_architecture.py counts resolver -> named module as an import)
RESOLVED_BY = {"reference": ("edge_sdk.quant.relax_ref",), "kernel": ("edge_sdk.compiler.ops.fuse",),
               "legalize": ("edge_sdk.compiler.lower",)}


def register(d: FloatOpDef) -> FloatOpDef:
    if d.relax_op in FLOAT_OPS:
        raise ValueError(f"float op {d.relax_op} is registered twice")
    FLOAT_OPS[d.relax_op] = d
    return d


def of(relax_op: str) -> FloatOpDef | None:
    return FLOAT_OPS.get(relax_op)


def links() -> list[tuple[str, str]]:
    return [(r, getattr(d, f)) for d in FLOAT_OPS.values() for f, rs in RESOLVED_BY.items() if getattr(d, f)
            for r in rs]


def with_legalize() -> dict[str, str]:
    """Relax op -> its `legalize` factory name, for the ops whose kernel replaces TVM's legalization."""
    return {d.relax_op: d.legalize for d in FLOAT_OPS.values() if d.legalize}


_R = "edge_sdk.quant.float_ref_ops:"
_FUSE = "edge_sdk.compiler.ops.fuse:"


def _op(relax_op: str, ref: str, *, tflite=(), onnx=(), doc="", **kw) -> None:
    register(FloatOpDef(relax_op, _R + ref, tflite=tuple(tflite), onnx=tuple(onnx), doc=doc, **kw))


_op("relax.nn.conv2d", "conv2d", kernel=_FUSE + "plan_conv", tflite=("CONV_2D", "DEPTHWISE_CONV_2D"),
    onnx=("Conv",), doc="direct, im2col, Winograd F(2x2)/F(4x4) or GEMM (1x1) kernels, depthwise for groups = C; "
    "bias, residual and activation fused (compile/choice picks the schedule on a Pi)")
_op("relax.matmul", "matmul", kernel=_FUSE + "plan_dense", tflite=("FULLY_CONNECTED", "BATCH_MATMUL"),
    onnx=("Gemm", "MatMul"), doc="a constant 2-D weight: our GEMM with the epilogue fused; else TVM's")
for _pool in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
    _op(_pool, "pool2d", kernel=_FUSE + "plan_pool",
        tflite=("MAX_POOL_2D",) if "max" in _pool else ("AVERAGE_POOL_2D",),
        onnx=("MaxPool",) if "max" in _pool else ("AveragePool",),
        doc="NHWC without dilation or ceil_mode: our pool kernel (3x3 s2 max pool as one pass); ceil_mode as ORT")
_op("relax.mean", "mean", kernel=_FUSE + "plan_pool", tflite=("MEAN",), onnx=("ReduceMean", "GlobalAveragePool"),
    doc="over H, W of NHWC: our global average pool; other axes TVM's")
_op("relax.nn.adaptive_avg_pool2d", "adaptive_avg_pool2d", onnx=("GlobalAveragePool",), doc="output 1x1")
for _name, _tfl, _onx in (("add", "ADD", "Add"), ("subtract", "SUB", "Sub"), ("multiply", "MUL", "Mul"),
                         ("divide", "DIV", "Div"), ("maximum", "MAXIMUM", "Max"), ("minimum", "MINIMUM", "Min")):
    _op(f"relax.{_name}", "binary", tflite=(_tfl,), onnx=(_onx,),
        doc="numpy broadcasting; a bias or residual after a conv is fused into its kernel")
_op("relax.nn.prelu", "prelu", tflite=("PRELU",), onnx=("PRelu",), doc="one slope per channel (the float_act "
    "prelu epilogue after a conv)")
_op("relax.nn.softmax", "softmax", tflite=("SOFTMAX",), onnx=("Softmax",))
_op("relax.nn.batch_norm", "batch_norm", onnx=("BatchNormalization",), doc="inference statistics; folded into "
    "the conv before it at lowering")
_op("relax.concat", "layout", tflite=("CONCATENATION",), onnx=("Concat",))
_op("relax.split", "layout", tflite=("SPLIT", "SPLIT_V"), onnx=("Split",), doc="sections or indices")
_op("relax.strided_slice", "layout", tflite=("STRIDED_SLICE", "SLICE"), onnx=("Slice",))
_op("relax.take", "layout", tflite=("GATHER",), onnx=("Gather",), doc="constant indices")
for _name, _tfl, _onnx in (("reshape", ("RESHAPE",), ("Reshape",)), ("flatten", (), ("Flatten",)),
                           ("squeeze", ("SQUEEZE",), ("Squeeze",)), ("expand_dims", ("EXPAND_DIMS",), ("Unsqueeze",)),
                           ("nn.batch_flatten", (), ("Flatten",))):
    _op(f"relax.{_name}", "reshape", tflite=_tfl, onnx=_onnx, doc="values in order, the result type's shape")
_op("relax.broadcast_to", "broadcast_to", tflite=("BROADCAST_TO",), onnx=("Expand",))
_op("relax.permute_dims", "permute_dims", tflite=("TRANSPOSE",), onnx=("Transpose",),
    doc="NCHW <-> NHWC pairs around convs are dropped at lowering (compiler/ops/permute_fold.py)")
_op("relax.astype", "astype", tflite=("CAST", "DEQUANTIZE"), onnx=("Cast",),
    doc="float16 weights behind DEQUANTIZE are folded at import")
_op("relax.nn.pad", "pad", tflite=("PAD", "PADV2"), onnx=("Pad",),
    doc="constant; a pad of the channel axis only is a vectorized copy (compiler/ops/pad_channels.py)")
_op("relax.nn.conv2d_transpose", "conv2d_transpose", tflite=("TRANSPOSE_CONV",), onnx=("ConvTranspose",),
    doc="kernel = stride: a 1x1 conv and a depth-to-space move (graph/ops/float_custom.py's mediapipe op too)")
_op("relax.image.resize2d", "resize2d", legalize="edge_sdk.compiler.ops.resize:legalize",
    tflite=("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"), onnx=("Resize",),
    doc="bilinear NHWC float32: our kernel (compiler/ops/resize.py); nearest and the rest TVM's")
