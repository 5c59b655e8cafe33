"""Our zoo models as ncnn network definitions (.param) and weights (.bin), for bench --peers' ncnn rows.

Why our own writer: a zoo model at another width, resolution or class count has no benchncnn file,
and pnnx would need torch in the project venv. The zoo's Relax graphs use few ops, each with an ncnn
layer (ncnn's docs/developer-guide/operation-param-weight-table.md):

    conv2d (+ bias add, + relu / clip 0..6)  Convolution / ConvolutionDepthWise (bias and activation fused)
    add of two tensors                        BinaryOp 0=0;  relu / clip after it: ReLU / Clip
    max_pool2d                                Pooling 0=0 with explicit pads, pad_mode 1 (floor, as TF SAME)
    mean over H, W                            Pooling 0=1 4=1 (global average)
    matmul with a constant (+ bias add)       InnerProduct;  softmax: Softmax 0=0 (the 1-D class vector)

A blob read by more than one layer gets a Split (ncnn blobs have one consumer each). Weights go to
the .bin in layer order: Convolution/InnerProduct weights with a 4-byte zero tag (raw float32),
OIHW (ncnn's layout), then the bias as raw float32. Only the .param matters to benchncnn's way of
running (DataReaderFromEmpty); the .bin lets the tests check the writer against numpy.

int8_param turns a float .param into the int8 one ncnn2int8 would write, by its int8_scale_term
rule as found in benchncnn's own pairs (mobilenet / mobilenet_int8, resnet18 / resnet18_int8):
Convolution 8=2, ConvolutionDepthWise 8=1, +100 (requantize to int8 inside the layer) where every
reader of its output, through Splits, is another int8 convolution; InnerProduct 8=2. The scales
themselves are weights: benchncnn reads them as zeros too.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError

MAGIC = 7767517


@dataclass
class Layer:
    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    params: dict[int, str] = field(default_factory=dict)
    weights: list[np.ndarray] = field(default_factory=list)  # tagged (first) then raw arrays, as load_model reads

    def line(self) -> str:
        kv = " ".join(f"{k}={v}" for k, v in self.params.items())
        return (f"{self.type:<24} {self.name:<24} {len(self.inputs)} {len(self.outputs)} "
                f"{' '.join(self.inputs + self.outputs)} {kv}").rstrip()


def _ints(v) -> list[int]:
    return [int(i) for i in v]


class _Converter:
    def __init__(self, func):
        self.layers: list[Layer] = []
        self.blob: dict = {}  # relax var -> ncnn blob name
        self.owner: dict[str, Layer] = {}  # blob -> the layer whose last output it is (for fusing)
        self.uses: dict = {}
        for block in func.body.blocks:
            for b in block.bindings:
                for a in getattr(b.value, "args", [b.value]):
                    self.uses[a] = self.uses.get(a, 0) + 1

    def add(self, var, layer: Layer) -> None:
        self.layers.append(layer)
        self.blob[var] = layer.outputs[0]
        self.owner[layer.outputs[0]] = layer

    def fusable(self, arg, types: tuple[str, ...]) -> Layer | None:
        """The layer producing arg, when it is of `types` and arg has no other reader."""
        lay = self.owner.get(self.blob.get(arg))
        return lay if lay is not None and lay.type in types and self.uses.get(arg, 0) == 1 else None

    def call(self, var, call) -> None:
        from tvm.ir.expr import GenericConst

        op, a, args = call.op.name, call.attrs, call.args
        name = str(var)
        const = [x.value.numpy().astype(np.float32) if isinstance(x, GenericConst) else None for x in args]
        if op == "relax.nn.conv2d":
            self.conv(var, name, a, const[1], args[0])
        elif op == "relax.add" and const[1] is not None:
            lay = self.fusable(args[0], ("Convolution", "ConvolutionDepthWise", "InnerProduct"))
            if lay is None or lay.params.get(5 if lay.type != "InnerProduct" else 1) == "1":
                raise ModelError(f"ncnn writer: '{name}' adds a constant that is not a layer's bias")
            lay.params[5 if lay.type != "InnerProduct" else 1] = "1"
            lay.weights.append(const[1].reshape(-1))
            self.blob[var] = lay.outputs[0]
        elif op == "relax.add":
            self.add(var, Layer("BinaryOp", name, [self.blob[args[0]], self.blob[args[1]]], [name], {0: "0"}))
        elif op in ("relax.nn.relu", "relax.clip"):
            self.act(var, name, op, call)
        elif op == "relax.nn.max_pool2d":
            top, left, bottom, right = _ints(a.padding)
            k, s = _ints(a.pool_size), _ints(a.strides)
            p = {0: "0", 1: k[1], 11: k[0], 2: s[1], 12: s[0], 3: left, 13: top, 14: right, 15: bottom, 5: "1"}
            self.add(var, Layer("Pooling", name, [self.blob[args[0]]], [name], {k: str(v) for k, v in p.items()}))
        elif op == "relax.mean" and _ints(a.axis) == [1, 2] and not bool(a.keepdims):
            self.add(var, Layer("Pooling", name, [self.blob[args[0]]], [name], {0: "1", 4: "1"}))
        elif op == "relax.matmul" and const[1] is not None:
            w = const[1]  # (in, out) -> ncnn (out, in)
            self.add(var, Layer("InnerProduct", name, [self.blob[args[0]]], [name],
                                {0: str(w.shape[1]), 1: "0", 2: str(w.size)}, [np.ascontiguousarray(w.T)]))
        elif op == "relax.nn.softmax" and int(a.axis) in (-1, 1):
            self.add(var, Layer("Softmax", name, [self.blob[args[0]]], [name], {0: "0"}))
        else:
            raise ModelError(f"ncnn writer: op '{op}' ({name}) has no ncnn layer here")

    def conv(self, var, name, a, w, x) -> None:
        if w is None or str(a.data_layout) != "NHWC" or str(a.kernel_layout) != "HWIO" or _ints(a.dilation) != [1, 1]:
            raise ModelError(f"ncnn writer: conv2d '{name}' needs an NHWC/HWIO constant kernel, no dilation")
        kh, kw, _cig, cout = w.shape
        groups = int(a.groups)
        top, left, bottom, right = _ints(a.padding)
        sh, sw = _ints(a.strides)
        p = {0: cout, 1: kw, 11: kh, 3: sw, 13: sh, 4: left, 15: right, 14: top, 16: bottom, 5: 0, 6: w.size}
        kind = "Convolution"
        if groups > 1:
            if groups != cout:
                raise ModelError(f"ncnn writer: grouped conv2d '{name}' ({groups} groups) is not depthwise")
            kind, p[7] = "ConvolutionDepthWise", groups
        self.add(var, Layer(kind, name, [self.blob[x]], [name], {k: str(v) for k, v in p.items()},
                            [np.ascontiguousarray(w.transpose(3, 2, 0, 1))]))

    def act(self, var, name, op, call) -> None:
        x = call.args[0]
        lo, hi = (0.0, None) if op == "relax.nn.relu" else (float(call.args[1].value), float(call.args[2].value))
        lay = self.fusable(x, ("Convolution", "ConvolutionDepthWise", "InnerProduct"))
        if lay is not None and 9 not in lay.params:
            lay.params[9] = "1" if hi is None else "3"
            if hi is not None:
                lay.params[-23310] = f"2,{lo:e},{hi:e}"
            self.blob[var] = lay.outputs[0]
        elif hi is None:
            self.add(var, Layer("ReLU", name, [self.blob[x]], [name]))
        else:
            self.add(var, Layer("Clip", name, [self.blob[x]], [name], {0: f"{lo:e}", 1: f"{hi:e}"}))


def _split(layers: list[Layer]) -> list[Layer]:
    """A Split after every blob read by more than one layer; each reader gets its own copy."""
    readers: dict[str, list[tuple[Layer, int]]] = {}
    for lay in layers:
        for i, b in enumerate(lay.inputs):
            readers.setdefault(b, []).append((lay, i))
    out = []
    for lay in layers:
        out.append(lay)
        for b in lay.outputs:
            rs = readers.get(b, [])
            if len(rs) > 1:
                copies = [f"{b}_splitncnn_{j}" for j in range(len(rs))]
                out.append(Layer("Split", f"splitncnn_{b}", [b], copies))
                for (r, i), c in zip(rs, copies):
                    r.inputs[i] = c
    return out


def from_relax(mod, input_name: str = "data") -> list[Layer]:
    """The ncnn layers of a zoo model's Relax main (NHWC input (1, H, W, C)); the last layer writes 'output'."""
    from tvm import relax

    func = mod["main"]
    x = func.params[0]
    _n, h, w, c = _ints(x.ty.shape)
    conv = _Converter(func)
    conv.layers.append(Layer("Input", input_name, [], [input_name], {0: str(w), 1: str(h), 2: str(c)}))
    conv.blob[x] = input_name
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call):
                conv.call(b.var, b.value)
            elif isinstance(b.value, relax.Var):
                conv.blob[b.var] = conv.blob[b.value]
            else:
                raise ModelError(f"ncnn writer: binding {type(b.value).__name__} ({b.var}) not supported")
    last = conv.blob[func.body.body]
    for lay in conv.layers:  # name the graph's output blob "output", as benchncnn's files do
        lay.inputs = ["output" if i == last else i for i in lay.inputs]
        lay.outputs = ["output" if o == last else o for o in lay.outputs]
    return _split(conv.layers)


def param_text(layers: list[Layer]) -> str:
    blobs = {b for lay in layers for b in lay.outputs}
    return "\n".join([str(MAGIC), f"{len(layers)} {len(blobs)}", *(lay.line() for lay in layers)]) + "\n"


def bin_bytes(layers: list[Layer]) -> bytes:
    parts = []
    for lay in layers:
        for i, w in enumerate(lay.weights):
            parts.append((struct.pack("<I", 0) if i == 0 else b"") + np.ascontiguousarray(w, "<f4").tobytes())
    return b"".join(parts)


def int8_param(text: str) -> str:
    """The int8 network definition of a float .param, by ncnn2int8's int8_scale_term rule (module doc)."""
    lines = text.splitlines()
    rows = [ln.split() for ln in lines[2:]]
    consumers: dict[str, list[list[str]]] = {}
    for r in rows:
        for b in r[4:4 + int(r[2])]:
            consumers.setdefault(b, []).append(r)

    def int8_readers(blob: str) -> bool:
        rs = consumers.get(blob, [])
        return bool(rs) and all(r[0] in ("Convolution", "ConvolutionDepthWise") or
                                (r[0] == "Split" and all(int8_readers(o) for o in r[5:5 + int(r[3])])) for r in rs)

    out = lines[:2]
    for r, ln in zip(rows, lines[2:]):
        base = {"Convolution": 2, "ConvolutionDepthWise": 1, "InnerProduct": 2}.get(r[0])
        if base is None or any(t.startswith("8=") for t in r):
            out.append(ln)
            continue
        term = base + (100 if r[0] != "InnerProduct" and int8_readers(r[4 + int(r[2])]) else 0)
        kv = r[4 + int(r[2]) + int(r[3]):]
        at = next((i for i, t in enumerate(kv) if t.startswith("9=") or t.startswith("-23310=")), len(kv))
        kv.insert(at, f"8={term}")
        out.append(" ".join(r[:4 + int(r[2]) + int(r[3])] + kv))
    return "\n".join(out) + "\n"


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write via a temp name and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def write_zoo_model(mod, param: Path, bin_path: Path | None = None, *, int8: bool = False) -> Path:
    """Write mod as an ncnn .param (int8: by int8_param) and, when asked, its float weights as .bin."""
    layers = from_relax(mod)
    text = param_text(layers)
    write_atomic(param, int8_param(text) if int8 else text)
    if bin_path is not None:
        write_atomic(bin_path, bin_bytes(layers))
    return param
