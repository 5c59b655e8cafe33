"""Post-training quantization: a float Relax model (zoo or float .tflite) -> Int8Graph, TFLite's scheme.

    layers = extract_layers(model, trace)        # the float graph as TFLite-shaped ops (bias, BN, act fused)
    ranges = calibrate(model, layers, inputs)     # min/max (or percentile) of every op output over the inputs
    g = build_int8_graph(model, layers, ranges)   # the same Int8Graph read_int8_tflite produces

Why an Int8Graph: the graph then takes exactly the path of a converter-written full-int8 file — the
numpy reference (quant.tflite_int8_ref.run_reference) and the integer kernels (compiler.int8) — so
"compiled == reference" is tested on one code path for both. The choices follow the TFLite converter:
weights int8 symmetric per output channel (max|w|/127, narrow range [-127, 127], zero point 0);
bias int32 at S_in * S_w; activations int8 asymmetric from the calibrated range widened to contain 0;
fused ReLU6 snapped to [0, 6]; max/avg pool, pad and reshape keep their input's quantization (TFLite's
int8 kernels require it); softmax output at 1/256, zero point -128. Batch norm is folded into the
preceding conv (the zoo and the converter have already folded theirs). Calibration, the per-layer
error report and the model-level driver live in quant/calibration.py.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph.int8 import Int8Graph, Op, Tensor
from edge_sdk.quant import int8 as q8

ACT_CODE = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
KEEPS_INPUT_QPARAMS = ("MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE", "PAD")  # TFLite int8 kernels need same in/out


@dataclass
class Layer:
    """One int8 op to be, in float: activation inputs and output are relax Vars of the float graph."""

    kind: str  # TFLite op name
    name: str
    inputs: list
    output: object
    opts: dict = field(default_factory=dict)
    weight: np.ndarray | None = None  # TFLite layout: OHWI conv, (1,KH,KW,C*M) depthwise, (O,K) dense
    bias: np.ndarray | None = None
    act: str = "NONE"
    shape: tuple[int, ...] = ()


def _op_name(b) -> str | None:
    from tvm import relax

    v = b.value
    return v.op.name if isinstance(v, relax.Call) and hasattr(v.op, "name") else None


def _ints(v) -> list[int]:
    return [int(i) for i in v]


def _padding(in_hw, k, stride, dilation, pads) -> str | None:
    """'SAME' or 'VALID' when the explicit Relax padding (top, left, bottom, right) is one of them."""
    top, left, bottom, right = pads
    if not any(pads):
        return "VALID"
    same = [q8.same_padding(in_hw[i], k[i], stride[i], dilation[i]) for i in (0, 1)]
    if (top, bottom, left, right) == (same[0][1], same[0][2], same[1][1], same[1][2]):
        return "SAME"
    return None


def _aliases(func) -> dict:
    """var -> the var it is bound to, for plain `y = x` bindings (emit_output writes one for the result)."""
    from tvm import relax

    out = {}
    for blk in func.body.blocks:
        for b in blk.bindings:
            if isinstance(b.value, relax.Var):
                out[b.var] = out.get(b.value, b.value)
    return out


class _Extractor:
    """Walks the Relax bindings once; fuses conv/dense + bias (+BN) + activation and add + activation."""

    def __init__(self, model, trace: dict):
        from tvm import relax
        from tvm.ir.expr import GenericConst

        self.relax, self.GenericConst = relax, GenericConst
        self.model, self.trace = model, trace
        func = model.mod["main"]
        self.bindings = [b for blk in func.body.blocks for b in blk.bindings]
        self.alias = _aliases(func)
        self.ret = self.alias.get(func.body.body, func.body.body)
        self.users: dict = defaultdict(list)
        for b in self.bindings:
            for a in self._args(b.value):
                if isinstance(a, relax.Var):
                    self.users[a].append(b)
        self.consts: dict = {}
        self.absorbed: set = set()
        self.layers: list[Layer] = []

    def _args(self, v):
        if isinstance(v, self.relax.Call):
            return list(v.args)
        if isinstance(v, self.relax.TupleGetItem):
            return [v.tuple_value]
        if isinstance(v, self.relax.Tuple):
            return list(v.fields)
        return [v] if isinstance(v, self.relax.Var) else []

    def const(self, e):
        if isinstance(e, self.GenericConst):
            return e.value.numpy().astype(np.float64)
        return self.consts.get(e)

    def fail(self, b, why: str):
        raise ModelError(f"{self.model.source}: post-training quantization: binding '{b.var.name}' "
                         f"({_op_name(b) or type(b.value).__name__}): {why}")

    def sole_user(self, var):
        us = [u for u in self.users.get(var, []) if u.var not in self.alias or not var.same_as(self.ret)]
        return us[0] if len(us) == 1 and not var.same_as(self.ret) else None

    def absorb(self, b):
        self.absorbed.add(b.var)
        return b.var

    def fuse_bias(self, cur, n_out: int):
        nxt = self.sole_user(cur)
        if nxt is not None and _op_name(nxt) == "relax.add":
            a, c = nxt.value.args
            c = self.const(c) if a.same_as(cur) else self.const(a)
            if c is not None and c.size == n_out:
                return self.absorb(nxt), c.reshape(-1)
        return cur, None

    def fuse_bn(self, cur, w, bias, axis_out: int):
        """conv -> batch_norm -> [0]: scale the weights per output channel, fold the shift into the bias."""
        nxt = self.sole_user(cur)
        if nxt is None or _op_name(nxt) != "relax.nn.batch_norm":
            return cur, w, bias
        gamma, beta, mean, var = (self.const(a) for a in nxt.value.args[1:5])
        get = self.users.get(nxt.var, [])
        if any(c is None for c in (gamma, beta, mean, var)) or len(get) != 1 or get[0].value.index != 0:
            self.fail(nxt, "batch norm with non-constant statistics, or whose mean/var outputs are used")
        s = gamma / np.sqrt(var + float(nxt.value.attrs.epsilon))
        shape = [1] * w.ndim
        shape[axis_out] = -1
        bias = np.zeros_like(s) if bias is None else bias
        self.absorb(nxt)
        return self.absorb(get[0]), w * s.reshape(shape), (bias - mean) * s + beta

    def fuse_act(self, cur):
        nxt = self.sole_user(cur)
        name = _op_name(nxt) if nxt is not None else None
        if name == "relax.nn.relu":
            return self.absorb(nxt), "RELU"
        if name == "relax.nn.relu6":
            return self.absorb(nxt), "RELU6"
        if name == "relax.clip":
            lo, hi = (float(a.value) for a in nxt.value.args[1:3])
            kind = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}.get((lo, hi))
            kind = kind or ("RELU" if lo == 0.0 and hi >= 3.0e38 else None)
            if kind:
                return self.absorb(nxt), kind
        return cur, "NONE"

    def shape(self, var) -> tuple[int, ...]:
        if isinstance(var, tuple):  # the output of a PAD we inserted
            return next(ly.shape for ly in self.layers if ly.output == var)
        return tuple(int(s) for s in self.trace[var].shape)

    def run(self) -> list[Layer]:
        for b in self.bindings:
            if b.var in self.absorbed or b.var in self.alias:
                continue
            args = self._args(b.value)
            if args and all(isinstance(a, self.GenericConst) or a in self.consts or
                            isinstance(a, self.relax.ShapeExpr) for a in args):
                self.consts[b.var] = self.trace[b.var]  # constant-valued (e.g. a transposed weight)
                continue
            self.layer(b, _op_name(b))
        return self.layers

    def layer(self, b, op):  # noqa: C901 - one branch per Relax op, flat on purpose
        v, a = b.value, b.value.attrs if hasattr(b.value, "attrs") else None
        if op == "relax.nn.conv2d":
            return self.conv(b)
        if op == "relax.matmul":
            w = self.const(v.args[1])
            if w is None or w.ndim != 2 or len(self.shape(v.args[0])) != 2:
                self.fail(b, "matmul needs a 2-D activation times a constant 2-D weight")
            cur, bias = self.fuse_bias(b.var, w.shape[1])
            cur, act = self.fuse_act(cur)
            return self.add_layer("FULLY_CONNECTED", b, [v.args[0]], cur, {"keep_num_dims": False},
                                  w.T.copy(), bias, act)
        if op == "relax.add":
            if any(self.const(x) is not None for x in v.args):
                self.fail(b, "an add of a constant that is not a conv/dense bias")
            cur, act = self.fuse_act(b.var)
            return self.add_layer("ADD", b, list(v.args), cur, {}, act=act)
        if op == "relax.mean":
            axes = sorted(int(x) % len(self.shape(v.args[0])) for x in a.axis)
            return self.add_layer("MEAN", b, [v.args[0]], b.var, {"axes": axes, "keep_dims": bool(a.keepdims)})
        if op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
            return self.pool(b, op)
        if op == "relax.nn.softmax":
            if int(a.axis) not in (-1, len(self.shape(b.var)) - 1):
                self.fail(b, "softmax over an axis other than the last")
            return self.add_layer("SOFTMAX", b, [v.args[0]], b.var, {"beta": 1.0})
        if op in ("relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims", "relax.nn.batch_flatten"):
            return self.add_layer("RESHAPE", b, [v.args[0]], b.var, {})
        if op == "relax.nn.pad":
            if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0:
                self.fail(b, "only zero padding has an int8 equivalent (pad with the zero point)")
            pw = _ints(a.pad_width)
            return self.add_layer("PAD", b, [v.args[0]], b.var, {"paddings": list(zip(pw[0::2], pw[1::2]))})
        self.fail(b, "no int8 equivalent in post-training quantization (supported: conv2d, depthwise, matmul, "
                     "add, mean, max/avg pool, softmax, reshape, pad, relu/relu6 clip, batch_norm after conv)")

    def conv(self, b):
        v, a = b.value, b.value.attrs
        if str(a.data_layout) != "NHWC":
            self.fail(b, f"data layout {a.data_layout}: post-training quantization needs NHWC models")
        w = self.const(v.args[1])
        if w is None:
            self.fail(b, "the weights are not constant")
        perm = {"HWIO": (0, 1, 2, 3), "OIHW": (2, 3, 1, 0), "OHWI": (1, 2, 3, 0), "HWOI": (0, 1, 3, 2)}
        w = w.transpose(perm[str(a.kernel_layout)])  # -> HWIO
        kh, kw, cig, cout = w.shape
        cin, groups = self.shape(v.args[0])[3], int(a.groups)
        stride, dil = _ints(a.strides), _ints(a.dilation)
        if groups == 1:
            kind, w, axis = "CONV_2D", w.transpose(3, 0, 1, 2), 0  # OHWI
        elif groups == cin and cig == 1:
            kind, w, axis = "DEPTHWISE_CONV_2D", w.reshape(1, kh, kw, cout), 3
            if dil != [1, 1]:
                self.fail(b, "dilated depthwise convolution has no int8 kernel")
        else:
            self.fail(b, f"grouped convolution ({groups} groups of {cig} channels) has no int8 kernel")
        cur, bias = self.fuse_bias(b.var, cout)
        cur, w, bias = self.fuse_bn(cur, w, bias, axis)
        cur, act = self.fuse_act(cur)
        pads = _ints(a.padding)
        pads = pads * 2 if len(pads) == 2 else pads
        padding = _padding(self.shape(v.args[0])[1:3], (kh, kw), stride, dil, pads)
        x = v.args[0]
        if padding is None:  # an explicit asymmetric pad: a PAD op, then VALID (as the converter writes it)
            top, left, bottom, right = pads
            n, h, wd, c = self.shape(x)
            self.layers.append(Layer("PAD", f"{b.var.name}_pad", [x], ("pad", b.var),
                                     {"paddings": [(0, 0), (top, bottom), (left, right), (0, 0)]},
                                     shape=(n, h + top + bottom, wd + left + right, c)))
            x, padding = ("pad", b.var), "VALID"
        opts = {"padding": padding, "stride": tuple(stride), "dilation": tuple(dil)}
        if kind == "DEPTHWISE_CONV_2D":
            opts["depth_multiplier"] = cout // cin
        return self.add_layer(kind, b, [x], cur, opts, w, bias, act)

    def pool(self, b, op):
        a = b.value.attrs
        if str(a.layout) != "NHWC" or bool(a.ceil_mode) or _ints(a.dilation) != [1, 1]:
            self.fail(b, "pooling must be NHWC, without ceil mode or dilation")
        k, stride = _ints(a.pool_size), _ints(a.strides)
        pads = _ints(a.padding)
        padding = _padding(self.shape(b.value.args[0])[1:3], k, stride, (1, 1), pads)
        if padding is None or (op == "relax.nn.avg_pool2d" and bool(a.count_include_pad) and any(pads)):
            self.fail(b, f"pool padding {pads} is neither SAME (padding not counted) nor VALID")
        kind = "MAX_POOL_2D" if op == "relax.nn.max_pool2d" else "AVERAGE_POOL_2D"
        return self.add_layer(kind, b, [b.value.args[0]], b.var,
                              {"padding": padding, "stride": tuple(stride), "filter": tuple(k)})

    def add_layer(self, kind, b, inputs, out, opts, weight=None, bias=None, act="NONE"):
        inputs = [self.alias.get(v, v) if not isinstance(v, tuple) else v for v in inputs]
        self.layers.append(Layer(kind, out.name, inputs, out, opts, weight, bias, act, self.shape(out)))


def extract_layers(model, trace: dict) -> list[Layer]:
    """The float graph as TFLite-shaped ops; `trace` is one reference run (constant values and shapes)."""
    if model.layout != "NHWC" or model.mod is None:
        raise ModelError(f"{model.source}: post-training quantization needs a float NHWC Relax model")
    return _Extractor(model, trace).run()


# ---------------------------------------------------------------- quantization parameters


def activation_qparams(lo: float, hi: float) -> tuple[float, int]:
    """TFLite's asymmetric int8 (scale, zero point) for a real range, widened to contain 0 (0 is exact)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(q8.tflite_round(np.float64(-128.0 - lo / scale)), -128, 127))
    return scale, zp


def weight_qparams(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8: scale = max|w| / 127 per output channel, q = round(w / scale) in [-127, 127]."""
    red = tuple(i for i in range(w.ndim) if i != axis)
    maxabs = np.abs(w).max(axis=red)
    scale = (np.maximum(maxabs, 1e-12) / 127.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = q8.tflite_round(w / scale.astype(np.float64).reshape(shape))
    return np.clip(q, -127, 127).astype(np.int8), scale


def input_range(model) -> tuple[float, float]:
    """The float input's real range from the preprocessing: pixels 0..255 through (x - mean) / std."""
    p = model.preprocess
    lows = [(0.0 - m) / s for m, s in zip(p.mean, p.std)]
    highs = [(255.0 - m) / s for m, s in zip(p.mean, p.std)]
    return min(lows), max(highs)


class _GraphBuilder:
    def __init__(self, source: str):
        self.tensors: dict[int, Tensor] = {}
        self.ops: list[Op] = []
        self.source = source

    def tensor(self, name, shape, dtype="int8", q=None, data=None) -> int:
        i = len(self.tensors)
        self.tensors[i] = Tensor(i, name, tuple(int(s) for s in shape), dtype, q, data)
        return i

    def op(self, kind, inputs, outputs, opts) -> None:
        self.ops.append(Op(len(self.ops), kind, inputs, outputs, opts))


def _qp(scale, zp=0, axis=0) -> q8.QParams:
    return q8.QParams(np.asarray(scale, np.float32), np.asarray(zp, np.int64), axis)


def build_int8_graph(model, layers: list[Layer], ranges: dict) -> tuple[Int8Graph, dict]:
    """The Int8Graph of the quantized model, and tensor index -> float Relax var (for the error report).

    ranges: float var -> (lo, hi) calibrated for every layer output that gets its own quantization.
    The input is int8, quantized over input_range(model).
    """
    gb = _GraphBuilder(model.source)
    s_in, z_in = activation_qparams(*input_range(model))
    x_var = model.mod["main"].params[0]
    env = {x_var: gb.tensor(model.input_name, model.input_shape, q=_qp(s_in, z_in))}
    to_var = {env[x_var]: x_var}
    for ly in layers:
        ins = [env[v] for v in ly.inputs]
        t_in = gb.tensors[ins[0]]
        if ly.kind in KEEPS_INPUT_QPARAMS:
            q = t_in.q
        elif ly.kind == "SOFTMAX":
            q = _qp(1.0 / 256.0, -128)
        elif ly.act == "RELU6":
            q = _qp(*activation_qparams(0.0, 6.0))
        else:
            q = _qp(*activation_qparams(*ranges[ly.output]))
        out = gb.tensor(ly.name, ly.shape, q=q)
        opts = dict(ly.opts, act=ACT_CODE[ly.act])
        if ly.weight is not None:
            axis = 3 if ly.kind == "DEPTHWISE_CONV_2D" else 0
            wq, ws = weight_qparams(ly.weight, axis)
            ins.append(gb.tensor(f"{ly.name}/weight", wq.shape, q=_qp(ws, np.zeros_like(ws, np.int64), axis),
                                 data=wq))
            if ly.bias is not None:
                bscale = np.float64(t_in.q.s) * ws.astype(np.float64)
                bq = q8.tflite_round(ly.bias / bscale)
                if np.abs(bq).max(initial=0) >= 2 ** 31:
                    raise ModelError(f"{model.source}: layer {ly.name}: bias does not fit int32 at scale S_in*S_w")
                ins.append(gb.tensor(f"{ly.name}/bias", bq.shape, "int32", _qp(bscale.astype(np.float32),
                                     np.zeros(bq.size, np.int64)), bq.astype(np.int32)))
        if ly.kind == "MEAN":
            ins.append(gb.tensor(f"{ly.name}/axes", (len(opts["axes"]),), "int32",
                                 data=np.asarray(opts.pop("axes"), np.int32)))
        if ly.kind == "PAD":  # pads with the zero point: real 0
            ins.append(gb.tensor(f"{ly.name}/paddings", (4, 2), "int32",
                                 data=np.asarray(opts.pop("paddings"), np.int32)))
        gb.op(ly.kind, ins, [out], opts)
        env[ly.output] = out
        to_var[out] = ly.output
    func = model.mod["main"]
    ret = _aliases(func).get(func.body.body, func.body.body)
    if ret not in env:
        raise ModelError(f"{model.source}: post-training quantization: the model output is not an op output")
    g = Int8Graph(Path(model.source), gb.tensors, gb.ops, [env[x_var]], [env[ret]])
    return g, to_var
