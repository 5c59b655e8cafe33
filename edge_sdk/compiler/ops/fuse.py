"""Rewrite a float Relax graph so every heavy op runs one of our scheduled kernels.

A conv2d / dense with constant weights, followed by any run of per-channel constant add / subtract /
multiply / divide (bias, decomposed batch norm), at most one residual add, and a ReLU or clip, becomes
ONE call_tir to a scheduled PrimFunc: scales fold into the weights and shifts into one bias vector
(in numpy, at compile time), the weights are pre-packed for the micro-kernel, and the rest is the
kernel's epilogue. Pools and spatial means become our pool kernel. Intermediate results of a chain
must have no other user; everything we do not match is left for LegalizeOps.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from edge_sdk.compiler import choice
from edge_sdk.compiler.choice import families
from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops import winograd
from edge_sdk.compiler.ops.chain import Chain, Graph, input_affine, ints, match_activation, op_name, shape_of
from edge_sdk.compiler.ops.common import Epilogue, Simd, round_up
from edge_sdk.compiler.ops.depthwise import depthwise_conv2d
from edge_sdk.compiler.ops.pool import pool2d
from edge_sdk.compiler.ops.weight_transform import TRANSFORM_PREFIX, winograd_weight
from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_ops

@mutator
class KernelRewriter(PyExprMutator):
    """Replace matched chains by call_tir to our scheduled PrimFuncs (see module docstring)."""

    def __init__(self, mod: tvm.IRModule, simd: Simd, chooser=choice.DEFAULT_CHOOSER):
        super().__init__(mod)
        self.simd = simd
        self.chooser = chooser  # compile/choice: which candidate schedule each layer's kernel runs
        self.kernels: dict = {}
        self.plans: dict = {}
        self.counts: dict[str, int] = {}
        self.claimed: set = set()
        self.emitted: list[tuple[str, str]] = []  # (layer = head binding name, PrimFunc name), in order

    def rewrite(self) -> tvm.IRModule:
        func = self.builder_.get()["main"]
        graph = Graph(func)
        for var, value in list(graph.value.items()):
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                self._plan(graph, var, value)
        new = self.visit_expr(func)
        self.builder_.update_func(self.builder_.get().get_global_var("main"), new)
        return self.builder_.get()

    # -- planning -----------------------------------------------------------------------------
    def _plan(self, graph: Graph, var, call) -> None:
        d = float_ops.of(call.op.name)  # the op's registry entry names the planner of our kernel for it
        if d is None or not d.kernel:
            return
        head = registry.resolve(d.kernel)(self, graph, call)
        if head is None:
            return
        if head["kind"] == "pool":
            self.plans[var] = ({**head, "layer": var.name}, None)
            return
        head["layer"] = var.name  # the layer table's row name (layers.py names rows by the op's binding)
        out_shape = shape_of(call)
        cout = out_shape[-1]
        m = int(np.prod(out_shape[:-1]))
        chain = Chain(cout, allow_residual=head["kind"] == "dw" or round_up(cout, self._nr(head, m, cout)) == cout)
        chain.end = var
        self._extend(graph, chain, out_shape)
        self.plans[chain.end] = (head, chain)

    def _nr(self, head, m: int, cout: int) -> int:
        """The register tile's channel count the emitted kernel will use (conv_ops.choose_nr)."""
        w = head["w"]
        if head["kind"] == "dense" or (head["kind"] == "conv" and tuple(w.shape[:2]) == (1, 1)
                                       and head["strides"] == [1, 1] and not any(head["pad"])):
            return conv_ops.choose_nr(self.simd, m, cout, k=int(np.prod(w.shape[:-1])))
        return conv_ops.choose_nr(self.simd, 2, cout)

    def _extend(self, graph: Graph, chain: Chain, out_shape) -> None:
        """Grow the chain from its head while the next op folds into the epilogue."""
        cur = chain.end
        while True:
            nxt = graph.users.get(cur, [])
            # an op joins one chain only: in conv + BN + add(shortcut conv + BN) + relu both
            # convs reach the add; the first one planned takes it, the other ends before it
            if len(nxt) == 1 and graph.single_user(cur, nxt[0][1]):
                v, c = nxt[0]
                if v in self.claimed or not chain.absorb(graph, cur, c, out_shape):
                    return
                cur = chain.end = v
                self.claimed.add(v)
                continue
            found = match_activation(graph, cur, out_shape) if chain.act == ("none",) else None
            if found is None or any(n in self.claimed for n in found[2]):
                return
            chain.act, cur = found[0], found[1]
            chain.end = cur
            self.claimed.update(found[2])

    @staticmethod
    def _gate(graph, x, shape):
        """x = multiply(feature, gate) with a (1, 1, 1, C) gate computed in the graph (squeeze-excite),
        used once: (feature, gate) for a GEMM to fold, else (x, None)."""
        val = graph.value.get(x)
        if op_name(val) != "relax.multiply" or not graph.single_user(x, val) or graph.uses.get(x, 0) != 1:
            return x, None
        for feat, gate in (val.args, val.args[::-1]):
            gshape = shape_of(gate)
            if (shape_of(feat) == tuple(shape) and gshape == (1, 1, 1, shape[3]) and graph.const(gate) is None
                    and graph.const(feat) is None):
                return feat, gate
        return x, None

    @staticmethod
    def _fold_pad(graph, x, pad):
        """x = nn.pad(y) with zeros on H/W only, used once: read y and pad in the kernel instead
        (the Keras/TFLite ZeroPadding2D + VALID conv pattern)."""
        val = graph.value.get(x)
        if not (isinstance(val, relax.Call) and isinstance(val.op, tvm.ir.Op)
                and val.op.name == "relax.nn.pad" and graph.uses.get(x, 0) == 1
                and isinstance(x, relax.DataflowVar)):
            return x, pad
        pw = ints(val.attrs.pad_width)
        if (str(val.attrs.pad_mode) != "constant" or float(val.attrs.pad_value) != 0.0 or len(pw) != 8
                or any(pw[i] for i in (0, 1, 6, 7)) or shape_of(val.args[0]) is None):
            return x, pad
        return val.args[0], [pad[0] + pw[2], pad[1] + pw[4], pad[2] + pw[3], pad[3] + pw[5]]

    def _conv_head(self, graph, call):
        attrs = call.attrs
        shape, w = shape_of(call.args[0]), graph.const(call.args[1])
        if (shape is None or w is None or len(shape) != 4 or attrs.data_layout != "NHWC"
                or attrs.out_layout != "NHWC" or ints(attrs.dilation) != [1, 1]):
            return None
        w = np.transpose(w, [str(attrs.kernel_layout).index(ch) for ch in "HWIO"])
        groups, ci = int(attrs.groups), shape[3]
        pad = ints(attrs.padding)
        pad = pad * 2 if len(pad) == 2 else pad
        x, pad = self._fold_pad(graph, call.args[0], pad)
        shape = shape_of(x)
        common = dict(x=x, shape=shape, kernel=w.shape[:2], strides=ints(attrs.strides), pad=pad)
        if groups == 1:
            gate = None
            if tuple(w.shape[:2]) == (1, 1) and common["strides"] == [1, 1] and not any(pad) \
                    and x not in self.claimed:
                common["x"], gate = self._gate(graph, x, shape)
            head = dict(kind="conv", w=w, gate=gate, **common)
            return self._fold_input_affine(graph, head)
        if groups == ci and w.shape[2] == 1 and w.shape[3] % ci == 0:  # depth multiplier w.shape[3] // ci
            return dict(kind="dw", w=w.reshape(w.shape[0], w.shape[1], w.shape[3]), **common)
        return None

    def _fold_input_affine(self, graph, head):
        """A per-channel scale/shift of the conv's input (the model's Rescaling) folds into the
        weights and the bias; the conv's own border then reads the value the affine maps to 0."""
        found = input_affine(graph, head["x"], head["shape"][3]) if head["gate"] is None else None
        if found is None or head["x"] in self.claimed:
            return head
        padded = any(head["pad"])
        fill = tuple(float(v) for v in -found[2] / found[1])
        if padded and (len(set(fill)) > 1 and len(fill) > 4 or winograd.choose_m(
                self.simd, head["shape"], head["w"].shape[:2], head["strides"], head["w"].shape[3], pad=head["pad"]) is not None):
            return head
        w = head["w"]
        return {**head, "x": found[0], "w": w * found[1][None, None, :, None],
                "in_bias": np.einsum("hwio,i->o", w.astype("float64"), found[2]),
                "pad": list(head["pad"]) + ([fill] if padded else [])}

    def _dense_head(self, graph, call):
        shape, w = shape_of(call.args[0]), graph.const(call.args[1])
        if shape is None or w is None or len(shape) != 2 or w.ndim != 2:
            return None
        return dict(kind="dense", x=call.args[0], shape=shape, w=w.astype("float32"))

    def _pool_head(self, call):
        shape = shape_of(call.args[0])
        if shape is None or len(shape) != 4:
            return None
        if call.op.name == "relax.mean":
            axes = sorted(int(a) % 4 for a in call.attrs.axis) if call.attrs.axis is not None else []
            if axes != [1, 2]:
                return None
            return dict(kind="pool", pool="avg", x=call.args[0], shape=shape, kernel=shape[1:3],
                        strides=[1, 1], pad=[0, 0, 0, 0], include_pad=True)
        a = call.attrs
        if (a.layout != "NHWC" or a.out_layout != "NHWC" or ints(a.dilation) != [1, 1] or a.ceil_mode):
            return None
        pad = ints(a.padding)
        pad = pad * 2 if len(pad) == 2 else pad
        kind = "max" if call.op.name == "relax.nn.max_pool2d" else "avg"
        include = bool(getattr(a, "count_include_pad", False))
        return dict(kind="pool", pool=kind, x=call.args[0], shape=shape, kernel=ints(a.pool_size),
                    strides=ints(a.strides), pad=pad, include_pad=include)

    # -- emission -----------------------------------------------------------------------------
    def visit_var_binding_(self, binding) -> None:
        plan = self.plans.get(binding.var)
        if plan is None:
            return super().visit_var_binding_(binding)
        value = self._emit(*plan, shape_of(binding.var))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))
        return None

    def _kernel(self, key, make):
        if key not in self.kernels:
            name = f"edge_{key[0]}_{len(self.kernels)}"
            self.kernels[key] = self.builder_.add_func(make(name), name)
        self.emitted.append((self._layer, self.kernels[key].name_hint))
        return self.kernels[key]

    def _wino_weight(self, w: np.ndarray, m: int, nr: int):
        """U = G w G^T as a call on the stored weights, lifted to run once at load (lower.py)."""
        ci, co = w.shape[2], w.shape[3]
        key = ("wino_wt", ci, co, m, nr)
        if key not in self.kernels:  # not in `emitted`: it runs at load, in no layer's inference
            name = f"{TRANSFORM_PREFIX}_{len(self.kernels)}"
            self.kernels[key] = self.builder_.add_func(
                winograd_weight(ci, co, m, nr, lanes=self.simd.lanes, name=name), name)
        shape = (m + 2, m + 2, round_up(co, nr) // nr, ci, nr)
        return self.builder_.emit(relax.call_tir(self.kernels[key], [relax.const(w)],
                                                 relax.TensorType(shape, "float32")))

    def _emit(self, head, chain, out_shape):
        kind = head["kind"]
        self._layer = head["layer"]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        x = self.visit_expr(head["x"])
        if kind == "pool":
            return self._emit_pool(head, x, out_shape)
        w = (head["w"] * chain.scale.astype("float32")).astype("float32")
        bias = (chain.bias + head.get("in_bias", 0.0) * chain.scale).astype("float32")
        if chain.alpha is not None:  # PRELU: the slopes ride in the bias argument (common.Epilogue.bias_rows)
            bias = np.stack([bias, chain.alpha.astype("float32")])
        res = self.visit_expr(chain.residual) if chain.residual is not None else None
        gate = head.get("gate")
        epi = Epilogue(chain.act, res is not None, gate is not None)
        if kind == "dw":
            return self._emit_dw(head, x, w, bias, res, epi, out_shape)
        one_by_one = kind == "conv" and tuple(w.shape[:2]) == (1, 1) and head["strides"] == [1, 1] \
            and not any(head["pad"])
        if kind == "dense" or one_by_one:
            if gate is not None:
                head = {**head, "gate": self.visit_expr(gate)}
            return self._emit_gemm(head, x, w, bias, res, epi, out_shape)
        return self._emit_conv(head, x, w, bias, res, epi, out_shape)

    def _emit_pool(self, head, x, out_shape):
        n, h, w, c = head["shape"]
        key = ("pool", head["pool"], head["shape"], tuple(head["kernel"]), tuple(head["strides"]),
               tuple(head["pad"]), head["include_pad"])
        gv = self._kernel(key, lambda name: pool2d(
            head["shape"], head["pool"], head["kernel"], head["strides"], head["pad"], self.simd,
            count_include_pad=head["include_pad"], name=name))
        oh = (h + head["pad"][0] + head["pad"][2] - head["kernel"][0]) // head["strides"][0] + 1
        ow = (w + head["pad"][1] + head["pad"][3] - head["kernel"][1]) // head["strides"][1] + 1
        out = self.builder_.emit(relax.call_tir(gv, [x], relax.TensorType((n, oh, ow, c), "float32")))
        return relax.op.reshape(out, out_shape) if tuple(out_shape) != (n, oh, ow, c) else out

    def _emit_dw(self, head, x, w, bias, res, epi: Epilogue, out_shape):
        mult = w.shape[-1] // head["shape"][3]
        sched = self.chooser.choose(families.dw_site(self.simd, head["shape"], w, head["strides"], head["pad"], bias,
                                                     epi, mult, layer=self._layer))
        key = ("dw", head["shape"], tuple(w.shape[:2]), tuple(head["strides"]), tuple(head["pad"]),
               epi.act, epi.residual, mult, sched)
        gv = self._kernel(key, lambda name: depthwise_conv2d(
            head["shape"], w.shape[:2], head["strides"], head["pad"], self.simd, epi=epi, multiplier=mult,
            name=name, schedule=sched))
        args = [x, relax.const(w), relax.const(bias.reshape(-1))] + ([res] if res is not None else [])
        return relax.call_tir(gv, args, relax.TensorType(out_shape, "float32"))

    def _emit_gemm(self, head, x, w, bias, res, epi: Epilogue, out_shape):
        """A dense layer, or a 1x1 stride-1 unpadded conv, as the packed GEMM."""
        cout = w.shape[-1]
        wkn = w.reshape(-1, cout)
        m = int(np.prod(head["shape"][:-1]))
        nr = conv_ops.choose_nr(self.simd, m, cout, k=wkn.shape[0])
        npad = round_up(cout, nr)
        sched = self.chooser.choose(families.gemm_site(self.simd, m, wkn, bias, epi, nr, layer=self._layer))
        key = ("gemm", m, wkn.shape[0], npad, nr, epi, sched)
        gv = self._kernel(key, lambda name: conv_ops.gemm(m, wkn.shape[0], npad, self.simd, epi=epi, nr=nr,
                                                          name=name, schedule=sched))
        dense = head["kind"] == "dense"
        a = x if dense else self.builder_.emit(relax.op.reshape(x, (m, wkn.shape[0])))
        args = [a, relax.const(conv_ops.pack_gemm_weight(wkn, nr)), relax.const(conv_ops.pad_bias(bias, npad))]
        if epi.gate:
            args.append(self.builder_.emit(relax.op.reshape(head["gate"], (wkn.shape[0],))))
        if res is not None:
            args.append(self.builder_.emit(relax.op.reshape(res, (m, npad))))
        out = self.builder_.emit(relax.call_tir(gv, args, relax.TensorType((m, npad), "float32")))
        if npad != cout:
            out = self.builder_.emit(relax.op.strided_slice(out, [1], [0], [cout]))
        return relax.op.reshape(out, out_shape) if not dense else out

    def _emit_conv(self, head, x, w, bias, res, epi: Epilogue, out_shape):
        """A KxK conv: Winograd where it measured faster (ops/winograd.py _TABLE), else the direct conv;
        on a Pi target the chooser may pick another (compile/choice/families.py conv_site)."""
        cout = w.shape[-1]
        nr = conv_ops.choose_nr(self.simd, 2, cout)
        cpad = round_up(cout, nr)
        sched = self.chooser.choose(families.conv_site(self.simd, head["shape"], w, head["strides"], head["pad"], bias,
                                                       epi, layer=self._layer))
        wino_m, direct = families.conv_plan(self.simd, head["shape"], w.shape[:2], head["strides"], head["pad"], cout,
                                            sched)
        if wino_m is not None:
            key = ("conv_winograd", head["shape"], tuple(head["pad"]), cpad, nr, wino_m, epi.act, epi.residual, direct)
            gv = self._kernel(key, lambda name: families.winograd_kernel(direct)(
                head["shape"], head["pad"], cpad, wino_m, self.simd, epi=epi, nr=nr, name=name))
            wpack = self._wino_weight(w, wino_m, nr)
        else:
            key = ("conv", head["shape"], tuple(w.shape[:2]), tuple(head["strides"]), tuple(head["pad"]),
                   cpad, epi.act, epi.residual, direct)
            gv = self._kernel(key, lambda name: conv_ops.conv2d_direct(
                head["shape"], w.shape[:2], head["strides"], head["pad"], cpad, self.simd, epi=epi, name=name,
                schedule=direct))
            wpack = relax.const(conv_ops.pack_conv_weight(w, nr))
        args = [x, wpack, relax.const(conv_ops.pad_bias(bias, cpad))]
        if res is not None:
            args.append(res)
        n, oh, ow, _ = out_shape
        out = self.builder_.emit(relax.call_tir(gv, args, relax.TensorType((n, oh, ow, cpad), "float32")))
        if cpad != cout:
            out = relax.op.strided_slice(out, [3], [0], [cout])
        return out


# the planners graph/ops/float_ops.py names as each op's `kernel`: f(rewriter, graph, call) -> plan | None
def plan_conv(rw: KernelRewriter, graph: Graph, call):
    return rw._conv_head(graph, call)


def plan_dense(rw: KernelRewriter, graph: Graph, call):
    return rw._dense_head(graph, call)


def plan_pool(rw: KernelRewriter, graph: Graph, call):
    return rw._pool_head(call)
