"""Read a full-integer int8 .tflite into a small graph of integer ops, and run it with the numpy reference.

    g = read_int8_tflite(path)        # Int8Graph: tensors (with QParams and constant data) + ops in order
    y = run_reference(g, x)           # edge_sdk.quant.int8 kernels, op by op: bit-exact with TFLite BUILTIN_REF

Why our own reader: TVM's TFLite frontend turns every quantized op into dequantize -> float op ->
quantize, which throws away the integer arithmetic we want to compile. Here each op keeps its int8
tensors, zero points, per-channel scales and fused activation, which is what edge_sdk.compiler.int8
lowers into integer kernels. Models with float input/output (QUANTIZE first, DEQUANTIZE last) are
accepted; anything else we cannot compute exactly is a ModelError naming the op, its index and the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import MissingDependency, ModelError
from edge_sdk.quant import int8 as q8

SUPPORTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "AVERAGE_POOL_2D", "MAX_POOL_2D",
             "MEAN", "RESHAPE", "SQUEEZE", "PAD", "PADV2", "CONCATENATION", "SOFTMAX", "LOGISTIC",
             "QUANTIZE", "DEQUANTIZE")
_DTYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 7: "int16", 9: "int8"}
_ACT = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}
_PAD = {0: "SAME", 1: "VALID"}


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    q: q8.QParams | None = None
    data: np.ndarray | None = None  # constants (weights, bias, shapes, paddings)


@dataclass
class Op:
    index: int
    kind: str
    inputs: list[int]
    outputs: list[int]
    opts: dict = field(default_factory=dict)


@dataclass
class Int8Graph:
    path: Path
    tensors: dict[int, Tensor]
    ops: list[Op]
    inputs: list[int]
    outputs: list[int]

    def input_spec(self) -> dict:
        """The model input as the manifest records it: shape, dtype and (for int8 input) scale/zero point."""
        t = self.tensors[self.inputs[0]]
        spec = {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "quantization": None}
        if t.dtype == "int8" and t.q is not None:
            spec["quantization"] = {"scale": t.q.s, "zero_point": t.q.z}
        return spec

    def output_spec(self) -> dict:
        t = self.tensors[self.outputs[0]]
        spec = {"shape": list(t.shape), "dtype": t.dtype, "quantization": None}
        if t.dtype == "int8" and t.q is not None:
            spec["quantization"] = {"scale": t.q.s, "zero_point": t.q.z}
        return spec


def _op_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


def _options(op, kind: str) -> dict:
    import tflite

    table = {"CONV_2D": tflite.Conv2DOptions, "DEPTHWISE_CONV_2D": tflite.DepthwiseConv2DOptions,
             "FULLY_CONNECTED": tflite.FullyConnectedOptions, "ADD": tflite.AddOptions,
             "AVERAGE_POOL_2D": tflite.Pool2DOptions, "MAX_POOL_2D": tflite.Pool2DOptions,
             "MEAN": tflite.ReducerOptions, "SOFTMAX": tflite.SoftmaxOptions,
             "CONCATENATION": tflite.ConcatenationOptions}
    cls = table.get(kind)
    if cls is None or op.BuiltinOptions() is None:
        return {}
    o = cls()
    o.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        d = {"padding": _PAD[o.Padding()], "stride": (o.StrideH(), o.StrideW()),
             "dilation": (o.DilationHFactor(), o.DilationWFactor()), "act": o.FusedActivationFunction()}
        if kind == "DEPTHWISE_CONV_2D":
            d["depth_multiplier"] = o.DepthMultiplier()
        return d
    if kind in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        return {"padding": _PAD[o.Padding()], "stride": (o.StrideH(), o.StrideW()),
                "filter": (o.FilterHeight(), o.FilterWidth()), "act": o.FusedActivationFunction()}
    if kind in ("FULLY_CONNECTED", "ADD"):
        d = {"act": o.FusedActivationFunction()}
        if kind == "FULLY_CONNECTED":
            d["keep_num_dims"] = bool(o.KeepNumDims())
        return d
    if kind == "MEAN":
        return {"keep_dims": bool(o.KeepDims())}
    if kind == "SOFTMAX":
        return {"beta": float(o.Beta())}
    if kind == "CONCATENATION":
        return {"axis": o.Axis(), "act": o.FusedActivationFunction()}
    return {}


def _tensor(model, sub, i: int) -> Tensor:
    t = sub.Tensors(i)
    dtype = _DTYPES.get(t.Type(), f"type{t.Type()}")
    qp = t.Quantization()
    q = None
    if qp is not None and qp.ScaleLength() > 0:
        q = q8.QParams(qp.ScaleAsNumpy().astype(np.float32), qp.ZeroPointAsNumpy().astype(np.int64),
                       qp.QuantizedDimension())
    data = None
    buf = model.Buffers(t.Buffer())
    if buf is not None and buf.DataLength() > 0:
        np_dtype = {"float32": np.float32, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
                    "int64": np.int64, "int16": np.int16}.get(dtype)
        if np_dtype is not None:
            data = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=np_dtype).reshape(tuple(t.ShapeAsNumpy()))
    shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    return Tensor(i, t.Name().decode(errors="replace"), shape, dtype, q, data)


def read_int8_tflite(path: Path) -> Int8Graph:
    """Parse and validate; every unsupported op, dtype or quantization is a ModelError naming op, index, file."""
    path = Path(path)
    try:
        import tflite
    except ImportError as e:  # pragma: no cover - pinned dependency
        raise MissingDependency("reading int8 .tflite files needs 'tflite': pip install tflite==2.18.0") from e
    buf = path.read_bytes()
    try:
        if len(buf) < 8 or buf[4:8] != b"TFL3":
            raise ValueError("no TFL3 flatbuffer identifier")
        model = tflite.Model.GetRootAsModel(buf, 0)
        sub = model.Subgraphs(0)
        names = _op_names()
        tensors = {i: _tensor(model, sub, i) for i in range(sub.TensorsLength())}
        ops = []
        for k in range(sub.OperatorsLength()):
            op = sub.Operators(k)
            code = model.OperatorCodes(op.OpcodeIndex())
            kind = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), f"CUSTOM({code.CustomCode()})")
            ops.append(Op(k, kind, [int(v) for v in op.InputsAsNumpy()] if op.InputsLength() else [],
                          [int(v) for v in op.OutputsAsNumpy()], _options(op, kind) if kind in SUPPORTED else {}))
        inputs = [int(v) for v in sub.InputsAsNumpy()]
        outputs = [int(v) for v in sub.OutputsAsNumpy()]
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything on garbage; re-raised with the file
        raise ModelError(f"{path}: not a valid .tflite file ({type(e).__name__}: {e})") from e
    g = Int8Graph(path, tensors, _drop_shape_arithmetic(ops, tensors), inputs, outputs)
    _validate(g)
    return g


_SHAPE_OPS = ("SHAPE", "STRIDED_SLICE", "PACK")


def _drop_shape_arithmetic(ops: list, tensors: dict) -> list:
    """Drop SHAPE -> STRIDED_SLICE -> PACK chains that only compute a RESHAPE's target shape (Keras'
    Flatten/Reshape as TF 2.16's converter writes it): shapes are static, and RESHAPE takes its output
    tensor's shape. Anything else those ops feed keeps them, and validation names them."""
    users: dict[int, list] = {}
    for op in ops:
        for pos, i in enumerate(op.inputs):
            users.setdefault(i, []).append((op, pos))
    dropped: set[int] = set()
    changed = True
    while changed:
        changed = False
        for op in ops:
            if op.index in dropped or op.kind not in _SHAPE_OPS:
                continue
            if all(tensors[o].dtype == "int32" and all(
                    u.index in dropped or (u.kind == "RESHAPE" and pos == 1) for u, pos in users.get(o, []))
                    and users.get(o) for o in op.outputs):
                dropped.add(op.index)
                changed = True
    return [op for op in ops if op.index not in dropped]


def _validate(g: Int8Graph) -> None:
    where = lambda op: f"{g.path}: op {op.index} ({op.kind})"  # noqa: E731
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise ModelError(f"{g.path}: expected one input and one output, found {len(g.inputs)} and {len(g.outputs)}")
    for op in g.ops:
        if op.kind not in SUPPORTED:
            raise ModelError(f"{where(op)}: not supported by the int8 compiler (supported: {', '.join(SUPPORTED)})")
        if op.kind == "ADD" and any(g.tensors[i].data is not None for i in op.inputs):
            raise ModelError(f"{where(op)}: ADD with a constant operand is not supported")
        for i in op.inputs + op.outputs:
            t = g.tensors[i]
            if t.dtype == "uint8":
                raise ModelError(f"{where(op)}: tensor '{t.name}' is uint8 (legacy asymmetric quantization); "
                                 "only int8 models from the current TFLite converter are supported")
            if t.dtype == "int16":
                raise ModelError(f"{where(op)}: tensor '{t.name}' is int16 (16x8 quantization); not supported")
        if op.kind in ("QUANTIZE", "DEQUANTIZE"):
            continue
        for i in op.inputs[:1] + op.outputs:
            t = g.tensors[i]
            if t.dtype != "int8" or t.q is None:
                raise ModelError(f"{where(op)}: tensor '{t.name}' is {t.dtype} without int8 quantization; "
                                 "the int8 variant needs a full-integer model")
        if op.kind in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            w = g.tensors[op.inputs[1]]
            if w.data is None or w.dtype != "int8":
                raise ModelError(f"{where(op)}: weights '{w.name}' are not constant int8")
            if np.any(np.asarray(w.q.zero_point) != 0):
                raise ModelError(f"{where(op)}: weights '{w.name}' have a non-zero zero point")
        if op.kind == "DEPTHWISE_CONV_2D" and op.opts["dilation"] != (1, 1):
            raise ModelError(f"{where(op)}: dilated depthwise convolution is not supported")


# ---------------------------------------------------------------- numpy reference run


def op_act(g: Int8Graph, op: Op) -> tuple[int, int]:
    out = g.tensors[op.outputs[0]]
    return q8.activation_range(_ACT.get(op.opts.get("act", 0), "NONE"), out.q.s, out.q.z)


def conv_params(g: Int8Graph, op: Op) -> dict:
    """Everything a conv/depthwise/dense kernel needs besides the input: weights, bias, requantization."""
    x, w, out = (g.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    bias = g.tensors[op.inputs[2]].data if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    mult, shift = q8.conv_multipliers(x.q.s, w.q.scale, out.q.s)
    n_out = w.shape[-1] if op.kind == "DEPTHWISE_CONV_2D" else w.shape[0]
    if mult.size == 1:
        mult, shift = np.repeat(mult, n_out), np.repeat(shift, n_out)
    return {"w": w.data, "bias": None if bias is None else bias.astype(np.int32), "in_zp": x.q.z,
            "multiplier": mult, "shift": shift, "out_zp": out.q.z, "act": op_act(g, op)}


def add_params(g: Int8Graph, op: Op) -> q8.AddParams:
    a, b, out = (g.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    return q8.AddParams.make(a.q.s, a.q.z, b.q.s, b.q.z, out.q.s, out.q.z)


def eval_op(g: Int8Graph, op: Op, env: dict[int, np.ndarray]) -> np.ndarray:
    """One op on numpy inputs from env, with the edge_sdk.quant.int8 reference kernels."""
    x = env.get(op.inputs[0]) if op.inputs else None
    t_in = g.tensors[op.inputs[0]] if op.inputs else None
    t_out = g.tensors[op.outputs[0]]
    k, o = op.kind, op.opts
    if k == "CONV_2D":
        p = conv_params(g, op)
        return q8.conv2d(x, p.pop("w"), p.pop("bias"), stride=o["stride"], dilation=o["dilation"],
                         padding=o["padding"], **p)
    if k == "DEPTHWISE_CONV_2D":
        p = conv_params(g, op)
        return q8.depthwise_conv2d(x, p.pop("w"), p.pop("bias"), stride=o["stride"], padding=o["padding"],
                                   depth_multiplier=t_out.shape[-1] // t_in.shape[-1], **p)
    if k == "FULLY_CONNECTED":
        p = conv_params(g, op)
        y = q8.fully_connected(x, p.pop("w"), p.pop("bias"), **p)
        return y.reshape(t_out.shape)
    if k == "ADD":
        return q8.add(x, env[op.inputs[1]], add_params(g, op), op_act(g, op))
    if k in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        fn = q8.avg_pool if k == "AVERAGE_POOL_2D" else q8.max_pool
        return fn(x, kh=o["filter"][0], kw=o["filter"][1], stride=o["stride"], padding=o["padding"],
                  act=op_act(g, op))
    if k == "MEAN":
        axes = tuple(int(a) for a in np.asarray(g.tensors[op.inputs[1]].data).reshape(-1))
        y = q8.mean(x, axes, in_zp=t_in.q.z, out_zp=t_out.q.z, in_scale=t_in.q.s, out_scale=t_out.q.s,
                    keep_dims=o["keep_dims"])
        return y.reshape(t_out.shape)
    if k in ("RESHAPE", "SQUEEZE"):
        return x.reshape(t_out.shape)
    if k in ("PAD", "PADV2"):
        value = t_out.q.z
        if k == "PADV2" and len(op.inputs) > 2:
            value = int(np.asarray(g.tensors[op.inputs[2]].data).reshape(-1)[0])
        return q8.pad(x, g.tensors[op.inputs[1]].data, value=value)
    if k == "CONCATENATION":
        y = np.concatenate([env[i] for i in op.inputs], axis=o["axis"])
        lo, hi = op_act(g, op)
        return np.clip(y, lo, hi).astype(np.int8)
    if k == "SOFTMAX":
        return q8.softmax(x, beta=o["beta"], in_scale=t_in.q.s)
    if k == "LOGISTIC":
        return q8.logistic(x, q8.logistic_table(t_in.q.s, t_in.q.z, t_out.q.s, t_out.q.z))
    if k == "QUANTIZE":
        if t_in.dtype == "float32":
            return q8.quantize(x, t_out.q.s, t_out.q.z)
        mult, shift = q8.quantize_multiplier(float(np.float32(t_in.q.s)) / float(np.float32(t_out.q.s)))
        return q8.requantize(x.astype(np.int64) - t_in.q.z, mult, shift, t_out.q.z, (q8.INT8_MIN, q8.INT8_MAX))
    if k == "DEQUANTIZE":
        return q8.dequantize(x, t_in.q.s, t_in.q.z)
    raise ModelError(f"{g.path}: op {op.index} ({k}) has no reference kernel")


def run_reference(g: Int8Graph, x: np.ndarray, *, keep: bool = False):
    """Run the whole graph; returns the output (and, with keep=True, every intermediate tensor by index)."""
    env = {g.inputs[0]: np.asarray(x)}
    for op in g.ops:
        env[op.outputs[0]] = eval_op(g, op, env)
    out = env[g.outputs[0]]
    return (out, env) if keep else out
