"""Intake of model files: float .tflite (Relax TFLite frontend) and ONNX (Relax ONNX frontend).

A corrupt file or an unsupported op is a ModelError naming the file (and the op).
"""
from __future__ import annotations

from pathlib import Path

from edge_sdk.errors import ModelError
from edge_sdk.models.base import Model, Preprocess, model_name
from edge_sdk.models.outputs import flatten_main, output_entries

_TFLITE_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 9: "int8", 7: "int16"}


def _unsupported(path: Path, err: Exception) -> ModelError:
    msg = str(err).strip().splitlines()
    ops = [line for line in msg if "not supported" in line or "Operator" in line]
    detail = ops[0] if ops else (msg[-1] if msg else type(err).__name__)
    return ModelError(f"{path}: unsupported model content: {detail}")


def _bind_params(mod):
    """Bind the frontend's detached params (func attr "params") as constants, so weights fold at compile time."""
    from tvm import relax

    func = mod["main"]
    attrs = func.attrs or {}
    if "params" not in attrs or "num_input" not in attrs:
        return mod
    n_in = int(attrs["num_input"])
    params = list(attrs["params"])
    if not params:
        return mod
    binding = {p: v for p, v in zip(func.params[n_in:], params)}
    mod = relax.transform.BindParams("main", {p.name: v for p, v in binding.items()})(mod)
    return mod


def _reshape_output(mod, shape: tuple[int, ...]):
    """End main with a reshape to the file's output shape where the Relax TFLite frontend kept more dims
    (FULLY_CONNECTED on a (1,1,1,K) pool output, keep_num_dims false, gives (1,1,1,N), not (1,N))."""
    import math

    from tvm import relax

    func = mod["main"]
    body = func.body
    got = tuple(int(v) for v in body.body.ty.shape)
    if got == shape or math.prod(got) != math.prod(shape):
        return mod
    ty = relax.TensorType(shape, body.body.ty.dtype)
    var = relax.Var("output", ty)
    block = relax.BindingBlock([relax.VarBinding(var, relax.op.reshape(body.body, shape))])
    mod["main"] = relax.Function(func.params, relax.SeqExpr([*body.blocks, block], var), ty, attrs=func.attrs)
    return relax.transform.Normalize()(mod)


def _image_input(path: Path, name: str, shape, dtype: str) -> tuple[tuple[int, ...], Preprocess]:
    shape = tuple(int(s) for s in shape)
    if len(shape) != 4 or shape[0] != 1 or min(shape) < 1:
        raise ModelError(f"{path}: input '{name}' has shape {list(shape)}; expected an NHWC image (1, H, W, C)")
    return shape, Preprocess(shape[1], shape[2], channels=shape[3])


def load_tflite(path: Path) -> Model:
    try:
        import tflite
        from tvm.relax.frontend.tflite import from_tflite
    except ImportError as e:  # pragma: no cover - pinned dependency
        from edge_sdk.errors import MissingDependency

        raise MissingDependency(f"importing {path} needs the 'tflite' package: pip install tflite==2.18.0") from e
    buf = path.read_bytes()
    try:
        if len(buf) < 8 or buf[4:8] != b"TFL3":
            raise ValueError("no TFL3 flatbuffer identifier")
        tfl = tflite.Model.GetRootAsModel(buf, 0)
        sub = tfl.Subgraphs(0)
        inp = sub.Tensors(sub.Inputs(0))
        in_name = inp.Name().decode()
        in_shape = tuple(inp.ShapeAsNumpy())
        in_dtype = _TFLITE_DTYPES.get(inp.Type(), f"type{inp.Type()}")
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything on garbage; we re-raise with the file
        raise ModelError(f"{path}: not a valid .tflite file ({type(e).__name__}: {e})") from e
    if in_dtype != "float32":
        raise ModelError(f"{path}: input '{in_name}' is {in_dtype}; the float32 variant needs a float model "
                         "(full-integer models are the int8 variant's input)")
    shape, pre = _image_input(path, in_name, in_shape, in_dtype)
    try:
        from edge_sdk.models.tflite_fold import converter_class

        mod = from_tflite(tfl, op_converter=converter_class())
        names = _signature_names(tfl)
        specs = [(names.get(int(sub.Outputs(i)), t.Name().decode()), tuple(int(v) for v in t.ShapeAsNumpy()),
                  _TFLITE_DTYPES.get(t.Type(), "float32"))
                 for i, t in ((i, sub.Tensors(sub.Outputs(i))) for i in range(sub.OutputsLength()))]
        mod = _outputs(mod, specs, path)
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - the frontend raises many types; name the file and the op
        raise _unsupported(path, e) from e
    from edge_sdk.models.tflite_hybrid import hybrid_weights

    options = {"hybrid": True} if hybrid_weights(tfl, sub) else {}  # int8 weights, float activations
    if _float16_weights(sub):  # stored float16 in the package too, cast at load (compiler/half_weights.py)
        options["float16_weights"] = True
    return Model(name=model_name(path), mod=_bind_params(mod), input_name=in_name, input_shape=shape,
                 input_dtype=in_dtype, preprocess=pre, source=str(path), options=options,
                 outputs=output_entries(specs) if len(specs) > 1 else None)


def _float16_weights(sub) -> bool:
    """The file stores constants as float16 (behind DEQUANTIZE)."""
    from tflite.TensorType import TensorType

    return any(sub.Tensors(i).Type() == TensorType.FLOAT16 for i in range(sub.TensorsLength()))


def _signature_names(tfl) -> dict[int, str]:
    """{output tensor index: the name the model's author gave it} from the serving signature (Keras layer
    names such as 'boxes', 'scores'), where the file has one; tensor names are 'StatefulPartitionedCall:0'."""
    if not tfl.SignatureDefsLength():
        return {}
    sig = tfl.SignatureDefs(0)
    return {int(sig.Outputs(i).TensorIndex()): sig.Outputs(i).Name().decode() for i in range(sig.OutputsLength())}


def _transpose_conv_nchw(mod):
    """TFLite's TRANSPOSE_CONV imports as an NHWC conv2d_transpose, which TVM 0.27 cannot legalize (TOPI has
    the NCHW / IOHW one only): permute around it (ConvertLayout), leaving every other op as it is."""
    from tvm import relax

    if "conv2d_transpose" not in mod.script(show_meta=False):
        return mod
    return relax.transform.ConvertLayout({"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]})(mod)


def _outputs(mod, specs, path: Path):
    """One output: reshaped to the file's shape; several: main returns their flat concatenation (models/outputs.py)."""
    mod = _transpose_conv_nchw(mod)
    if len(specs) == 1:
        return _reshape_output(mod, specs[0][1])
    return flatten_main(mod, specs, path)


def _onnx_input_dims(path: Path, inp, input_shape: tuple[int, ...] | None) -> list[int]:
    """The input's dims: the file's, or `input_shape` (--input-shape) where the file has symbolic ones (N, H,
    W ...); a symbolic dim with no --input-shape is a ModelError naming each one."""
    dims = list(inp.type.tensor_type.shape.dim)
    if input_shape is not None:
        if len(input_shape) != len(dims) or any(d.dim_value and d.dim_value != v for d, v in zip(dims, input_shape)):
            raise ModelError(f"{path}: --input-shape {','.join(map(str, input_shape))} does not fit input "
                             f"'{inp.name}' of shape [{', '.join(d.dim_param or str(d.dim_value) for d in dims)}]")
        return [int(v) for v in input_shape]
    symbolic = [d.dim_param or "?" for d in dims if not d.dim_value]
    if symbolic:
        guess = ",".join(str(d.dim_value) if d.dim_value else ("1" if i == 0 else "224") for i, d in enumerate(dims))
        raise ModelError(f"{path}: input '{inp.name}' has symbolic dims {','.join(symbolic)}: pass --input-shape "
                         f"{guess} (the shape to compile for)")
    return [int(d.dim_value) for d in dims]


def load_onnx(path: Path, input_shape: tuple[int, ...] | None = None) -> Model:
    import onnx

    try:
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto)
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError and checker errors share no base
        raise ModelError(f"{path}: not a valid ONNX file ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e
    inits = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise ModelError(f"{path}: expected one image input, found {len(inputs)}")
    inp = inputs[0]
    dims = _onnx_input_dims(path, inp, input_shape)
    if len(dims) != 4:
        raise ModelError(f"{path}: input '{inp.name}' has rank {len(dims)}; expected a 4-D image")
    nchw = dims[1] in (1, 3) and dims[3] not in (1, 3)
    from edge_sdk.models.onnx_import import import_onnx

    mod = import_onnx(proto, path, {inp.name: dims}, {inp.name: "float32"})  # ModelError names the node
    name = mod["main"].params[0].name
    nhwc = [dims[0], dims[2], dims[3], dims[1]] if nchw else dims
    _, pre = _image_input(path, name, nhwc, "float32")
    specs = _onnx_output_specs(mod, proto)
    if len(specs) > 1:
        mod = flatten_main(mod, specs, path)
    return Model(name=model_name(path), mod=_bind_params(mod), input_name=name, input_shape=tuple(dims),
                 input_dtype="float32", preprocess=pre, source=str(path), layout="NCHW" if nchw else "NHWC",
                 outputs=output_entries(specs) if len(specs) > 1 else None)


def _onnx_output_specs(mod, proto) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of each graph output, shapes as the import inferred them."""
    ret = mod["main"].body.body.ty
    types = list(ret.fields) if hasattr(ret, "fields") else [ret]
    return [(o.name, tuple(int(v) for v in t.shape), str(t.dtype)) for o, t in zip(proto.graph.output, types)]


def load_tflite_int8(path: Path) -> Model:
    """A full-integer .tflite for the int8 variant: its integer graph is read by the int8 backend itself."""
    from edge_sdk.models.tflite_int8 import read_int8_tflite

    spec = read_int8_tflite(path).input_spec()
    shape, pre = _image_input(path, spec["name"], spec["shape"], spec["dtype"])
    return Model(name=model_name(path), mod=None, input_name=spec["name"], input_shape=shape, input_dtype=spec["dtype"],
                 preprocess=pre, source=str(path), options={"input_quantization": spec["quantization"]})


def load_onnx_qdq(path: Path) -> Model:
    """A QDQ ONNX file (onnxruntime.quantization, QuantFormat.QDQ) for the int8 variant: models/onnx_qdq.py
    maps it onto the Int8Graph the int8 backend compiles; float NCHW input and output, as the file has."""
    from edge_sdk.models.onnx_qdq import read_qdq_onnx

    spec = read_qdq_onnx(path).input_spec()
    dims = spec["shape"]
    if len(dims) != 4 or dims[1] not in (1, 3):
        raise ModelError(f"{path}: input '{spec['name']}' has shape {dims}; expected an NCHW image (1, 3, H, W)")
    _, pre = _image_input(path, spec["name"], [dims[0], dims[2], dims[3], dims[1]], spec["dtype"])
    return Model(name=model_name(path), mod=None, input_name=spec["name"], input_shape=tuple(dims),
                 input_dtype=spec["dtype"], preprocess=pre, source=str(path), layout="NCHW",
                 options={"input_quantization": None, "qdq": True})


def is_qdq_file(path: Path) -> bool:
    """An ONNX file with QuantizeLinear/DequantizeLinear on its activations (a ModelError if unreadable)."""
    import onnx

    from edge_sdk.models.onnx_qdq import is_qdq_onnx

    try:
        return is_qdq_onnx(onnx.load(str(path), load_external_data=False))
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends share no base
        raise ModelError(f"{path}: not a valid ONNX file ({type(e).__name__})") from e


def is_int8_file(path: Path) -> bool:
    """A file the int8 variant reads as it is: a full-integer .tflite or a QDQ ONNX file."""
    suffix = path.suffix.lower()
    if suffix == ".tflite":
        from edge_sdk.models.lce import is_lce_file

        return not is_lce_file(path) and not _is_float_tflite(path)
    return suffix == ".onnx" and is_qdq_file(path)


def _is_float_tflite(path: Path) -> bool:
    """A float .tflite: float32 input and no QUANTIZE op (a full-int8 file has int8 input or a QUANTIZE first)."""
    import tflite

    buf = path.read_bytes()
    try:
        m = tflite.Model.GetRootAsModel(buf, 0)
        sub = m.Subgraphs(0)
        if sub.Tensors(sub.Inputs(0)).Type() != 0:
            return False
        codes = {max(m.OperatorCodes(i).BuiltinCode(), m.OperatorCodes(i).DeprecatedBuiltinCode())
                 for i in range(m.OperatorCodesLength())}
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything on garbage; we re-raise with the file
        raise ModelError(f"{path}: not a valid .tflite file ({type(e).__name__}: {e})") from e
    return tflite.BuiltinOperator.QUANTIZE not in codes


def load_model_file(path: Path, *, family: str = "float", input_shape: tuple[int, ...] | None = None) -> Model:
    """Load a model file for a variant family ("float", "int8", "bitserial"; "auto": int8 for a file the
    int8 variant reads as it is, full-integer .tflite or QDQ ONNX, else float). `input_shape` fixes an ONNX
    file's symbolic input dims (--input-shape)."""
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    suffix = path.suffix.lower()
    if family == "auto":
        family = "int8" if suffix in (".tflite", ".onnx") and is_int8_file(path) else "float"
    if suffix == ".tflite":
        from edge_sdk.models.lce import is_lce_file, load_lce

        if is_lce_file(path):  # the bitserial backend refuses any variant but w1a1 with a clear message
            return load_lce(path)
        if family == "int8":  # a float file is quantized by the int8 backend (PTQ)
            return load_tflite(path) if _is_float_tflite(path) else load_tflite_int8(path)
        return load_tflite(path)
    if suffix == ".onnx":
        if is_qdq_file(path):
            model = load_onnx_qdq(path)  # names any node the int8 path does not read (QLinearConv ...)
            if family != "int8":
                raise ModelError(f"{path}: a quantized (QDQ) ONNX file: the int8 variant compiles it (--variant "
                                 f"int8); the {family} variants need a float model")
            return model
        return load_onnx(path, input_shape)
    raise ModelError(f"{path}: unknown model format '{suffix}' (expected .tflite or .onnx, or a zoo name)")

