"""A BinarizedNet as a Relax module: float stem/head as high-level ops, binary layers as call_tir.

    emit_network(net, target, glue="fused"|"unfused", output="scores"|"codes"|"both") -> (IRModule, names)

"codes" returns the last binary layer's int32 codes (N, H, W, C) instead of the scores, "both" a tuple
(codes, scores): what tests compare exactly against the reference (packages return "scores").

The integer stem (the default, net.stem.integer: int8 input, the int8 backend's conv with its epilogue
onto the a-bit codes, max pool on the codes, bitpack; bitserial/stem.py) is call_tir to scheduled
integer kernels; the float stem (stem="float32": conv + bias + ReLU, max pool) and the head (dense +
softmax) stay high-level Relax ops, so `compile_relax` hands them to the float path's kernels (ops/fuse.py). Every bitserial conv is a
call_tir to a PrimFunc from bitserial/kernels.py scheduled for `arch` and marked opaque/scheduled, so no
later pass merges or reschedules it. Weights are numpy-packed constants (lifted to params later).

fused:   quantize+bitpack after the stem; each conv's glue (and the block's residual add) and the
         bitpack run in the conv's epilogue: only packed codes travel between binary layers.
unfused: each conv writes int32 accumulators; the glue is separate float ops (to float, scale,
         bias, floor, add shortcut, clip, to int) and a separate bitpack, each its own kernel that
         reads and writes a whole tensor (Riptide's unfused layers), each scheduled (parallel rows,
         vectorized channels, bitserial/io.py) and opaque to FuseOps: fused vs unfused measures
         fusion, not TVM's default loops. The float codes of a block input are kept for its shortcut.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.compiler.bitserial import io, kernels as ops, schedule
from edge_sdk.compiler.bitserial.dw3x3_codes_int16 import dw3x3_codes_prim_func, integer_form
from edge_sdk.compiler.bitserial.schedule import network_word
from edge_sdk.compiler.bitserial.x86_popcnt import schedule_arch
from edge_sdk.errors import CompileError
from edge_sdk.models.binarized import DwPw
from edge_sdk.quant.bitserial import pack_conv_weights

DW_BAND_BYTES = 192 * 1024  # graph._Emitter.dw_packed: a band's float depthwise input, kept in L2
INT16_DEPTHWISE = True  # fused MobileNet depthwise on the codes in int16 where exact (False: the float bands)


class _Emitter:
    def __init__(self, net, target, *, glue: str):
        from tvm import relax

        from edge_sdk.compiler.ops.common import simd_of

        if glue not in ("fused", "unfused"):
            raise CompileError(f"bitserial network: glue '{glue}' is not 'fused' or 'unfused'")
        # the schedule row: the target's arch, or on x86 the row of the AVX-512 popcount its CPU has (x86_popcnt)
        self.relax, self.net, self.arch, self.glue = relax, net, schedule_arch(target), glue
        self.word = network_word(self.arch)  # packing word of weights, activations and outputs
        self.bb = relax.BlockBuilder()
        self.funcs: dict = {}
        self.io_funcs: dict = {}
        self.qmax = (1 << net.a_bits) - 1
        self.names: dict[str, str] = {}  # binding name -> binary conv name, for the layer table
        self.aux_rows: dict[str, dict] = {}  # binding name -> layer-table row fields (the integer stem)
        self.simd = simd_of(target.tvm_target())  # the integer stem's vector ISA, from the target's LLVM row

    def const(self, arr, dtype=None):
        import tvm

        return self.relax.const(tvm.runtime.tensor(np.ascontiguousarray(arr if dtype is None else np.asarray(arr, dtype))))

    def _func(self, spec: dict):
        """One scheduled PrimFunc per distinct conv spec (ResNet repeats shapes)."""
        key = tuple(sorted((k, str(v)) for k, v in spec.items()))
        if key not in self.funcs:
            name = f"edge_bitserial_conv_{len(self.funcs)}"
            func = ops.conv2d_prim_func(arch=self.arch, **spec)
            func = func.with_attrs({"global_symbol": name, "tirx.is_scheduled": True, "op_pattern": 8,
                                    "tirx.noalias": True})
            self.funcs[key] = self.bb.add_func(func, name)
        return self.funcs[key]

    def conv(self, conv, inp, *, glue_out: bool, residual: str | None = None, res_args=(), res_lshift: int = 0):
        n, h, w, c = conv.in_shape
        spec = dict(batch=n, height=h, width=w, channels=c, filters=conv.out_shape[3], kernel=conv.kernel,
                    stride=conv.stride, padding=conv.pad, a_bits=conv.a_bits, w_bits=conv.w_bits,
                    mode=self.net.mode, word=self.word)
        if glue_out:
            # 1-bit codes without a residual: one compare per 4 outputs instead of ushl, add, sshl, cmgt (Q-form
            # NEON ops, one a cycle: a53.py); 2 bits would take 3 compares + 2 adds, no fewer than the shifts
            spec.update(glue_out_bits=conv.out_bits, out_word=self.word, residual=residual, res_lshift=res_lshift,
                        thresholds=residual is None and conv.out_bits == 1)
        packed = pack_conv_weights(conv.w_codes, bits=conv.w_bits, word=self.word)
        spec["w_group"] = schedule.weight_group(spec, arch=self.arch)  # each popc tile's weights contiguous
        args = [inp, self.const(ops.group_weights(packed, spec["w_group"]) if spec["w_group"] else packed)]
        if glue_out:
            args += self.glue_consts(conv, thresholds=spec["thresholds"]) + list(res_args)
            shape = (*conv.out_shape[:3], -(-conv.out_shape[3] // ops.WORD_BITS[self.word]), conv.out_bits)
            ty = self.relax.TensorType(shape, self.word)
        else:
            ty = self.relax.TensorType(conv.out_shape, "int32")
        gv = self._func(spec)
        var = self.bb.emit(self.relax.call_tir(gv, args, ty), name_hint=conv.name.replace(".", "_"))
        self.names[var.name] = conv.name
        return var

    def glue_consts(self, conv, *, thresholds: bool = False):
        g = conv.glue
        vals = (ops.glue_thresholds(g.lshift, g.offset, g.rshift, conv.out_bits) if thresholds
                else (g.lshift, g.offset, g.rshift))
        return [self.const(v, "int32") for v in vals]

    def glue_op(self, kind: str, x, *others, clip_max: float | None = None):
        """One unfused glue op as its own scheduled kernel (bitserial/io.glue_op_prim_func)."""
        relax = self.relax
        args = [x, *others]
        shapes = [[int(d) for d in a.ty.shape] for a in args]
        dtypes = [str(a.ty.dtype) for a in args]
        key = ("glue", kind, str(shapes), str(dtypes), clip_max)
        if key not in self.funcs:
            func = io.glue_op_prim_func(kind, shapes[0], arg_shapes=shapes, arg_dtypes=dtypes, clip_max=clip_max)
            self.funcs[key] = self.bb.add_func(func, f"bitserial_glue_{kind}")
        out_dtype = "int32" if kind == "to_int" else "float32"
        return self.bb.emit(relax.call_tir(self.funcs[key], args, relax.TensorType(shapes[0], out_dtype)))

    def pack(self, codes_f):
        """Float codes -> packed words (the unfused graph's separate bitpack)."""
        return self.pack_ints(self.glue_op("to_int", codes_f))

    def pack_ints(self, ints):
        shape = [int(d) for d in ints.ty.shape]
        key = ("pack", str(shape))
        if key not in self.funcs:
            func = io.bitpack_prim_func(shape, bits=self.net.a_bits, word=self.word)
            self.funcs[key] = self.bb.add_func(func, "bitserial_pack")
        wb = ops.WORD_BITS[self.word]
        ty = self.relax.TensorType((*shape[:3], -(-shape[3] // wb), self.net.a_bits), self.word)
        return self.bb.emit(self.relax.call_tir(self.funcs[key], [ints], ty))

    def float_glue(self, conv, acc):
        """floor(acc * M + (B + 1/2)) in float32: the unfused glue before its clip, one kernel per op."""
        z = self.glue_op("to_float", acc)
        z = self.glue_op("scale", z, self.const(conv.mult, "float32"))
        z = self.glue_op("bias", z, self.const(conv.bias_half, "float32"))
        return self.glue_op("floor", z)

    def clip(self, t):
        return self.glue_op("clip", t, clip_max=float(self.qmax))

    # -- the network --------------------------------------------------------------------------
    def int8_stem(self, x):
        """The integer stem (bitserial/stem.py): packed codes (fused), packed + float codes for the
        first shortcut (unfused), or MobileNet's first depthwise input: packed codes with their channel count
        (fused: dw_packed dequantizes them per band) or dequantized values (unfused)."""
        from edge_sdk.compiler.bitserial.stem import emit_int8_stem

        mobilenet = isinstance(self.net.blocks[0], DwPw)
        out = "packed" if self.glue == "fused" else "values" if mobilenet else "codes"
        v, rows = emit_int8_stem(self.bb, x, self.net, simd=self.simd, word=self.word, out=out)
        self.aux_rows.update(rows)
        if mobilenet:
            return None, (v, int(self.net.stem.out_shape[3])) if out == "packed" else v
        if self.glue == "fused":
            return v, None
        return self.pack_ints(v), self.glue_op("to_float", v)  # unfused: its own bitpack, float codes kept

    def stem(self, x):
        op, s = self.relax.op, self.net.stem
        if s.integer:
            return self.int8_stem(x)
        y = self.bb.emit(op.nn.conv2d(x, self.const(s.weight), strides=s.stride, padding=s.pad,
                                      data_layout="NHWC", kernel_layout="HWIO"), name_hint="conv1")
        y = self.bb.emit(op.add(y, self.const(s.bias)), name_hint="conv1_bias")
        y = self.bb.emit(op.nn.relu(y), name_hint="conv1_relu")
        if s.pool and self.glue == "fused" and int(y.ty.shape[-1]) % ops.WORD_BITS[self.word] == 0:
            return self.pool_pack(y, s), None
        if s.pool:
            y = self.bb.emit(op.nn.max_pool2d(y, s.pool, s.pool_stride, padding=s.pool_pad, layout="NHWC"),
                             name_hint="pool")
        if isinstance(self.net.blocks[0], DwPw):  # MobileNet: the first depthwise reads dequantized codes
            return None, self.dequant(self.clip(self.quantize_float(y)))
        if self.glue == "fused":
            return self.quantize_pack(y), None
        q = self.clip(self.quantize_float(y))
        return self.pack(q), q

    def _kernel(self, key, make, name: str):
        """One GlobalVar per distinct io kernel (kept apart from self.funcs, which numbers the convs)."""
        if key not in self.io_funcs:
            self.io_funcs[key] = self.bb.add_func(make(), name)
        return self.io_funcs[key]

    def quantize_pack(self, y):
        """Float activations -> packed codes: one scheduled kernel per shape (io.quantize_pack_prim_func) when
        the channels fill whole words, else quantize_pack_compute left to TVM's default lowering."""
        shape, net, wb = [int(d) for d in y.ty.shape], self.net, ops.WORD_BITS[self.word]
        if shape[-1] % wb:
            return self.bb.emit_te(io.quantize_pack_compute, y, bits=net.a_bits, step=net.step, word=self.word,
                                   primfunc_name_hint="bitserial_quantize_pack")
        gv = self._kernel(("quantize_pack", str(shape)), lambda: io.quantize_pack_prim_func(
            shape, bits=net.a_bits, step=net.step, word=self.word), "bitserial_quantize_pack")
        ty = self.relax.TensorType((*shape[:3], shape[3] // wb, net.a_bits), self.word)
        return self.bb.emit(self.relax.call_tir(gv, [y], ty))

    def unpack_dequant(self, p, channels: int, rows: tuple | None = None):
        """Packed codes (rows r0:r1 of them, when given) -> float32 values (a float depthwise layer's input), as
        quantize_pack: scheduled (io.unpack_dequant_prim_func) for whole words, else default-lowered."""
        pshape, wb, op = [int(d) for d in p.ty.shape], ops.WORD_BITS[self.word], self.relax.op
        if channels != pshape[3] * wb:
            if rows is not None:
                p = self.bb.emit(op.strided_slice(p, axes=[1], begin=[rows[0]], end=[rows[1]]))
            return self.bb.emit_te(io.unpack_dequant_compute, p, channels=channels, step=self.net.step,
                                   primfunc_name_hint="bitserial_dequant")
        gv = self._kernel(("dequant", str(pshape), rows), lambda: io.unpack_dequant_prim_func(
            pshape, word=self.word, channels=channels, step=self.net.step, rows=rows), "bitserial_dequant")
        h = pshape[1] if rows is None else rows[1] - rows[0]
        return self.bb.emit(self.relax.call_tir(gv, [p], self.relax.TensorType((pshape[0], h, pshape[2], channels),
                                                                                  "float32")))

    def pool_pack(self, y, s):
        """The float stem's max pool, quantize and bitpack as one kernel (io.pool_quantize_pack_prim_func)."""
        shape = [int(d) for d in y.ty.shape]
        func = io.pool_quantize_pack_prim_func(shape, pool=s.pool, stride=s.pool_stride, pad=s.pool_pad,
                                               bits=self.net.a_bits, step=self.net.step, word=self.word)
        gv = self.bb.add_func(func.with_attr("global_symbol", "bitserial_pool_pack"), "bitserial_pool_pack")
        n, h, w, _ = s.out_shape
        ty = self.relax.TensorType((n, h, w, shape[3] // ops.WORD_BITS[self.word], self.net.a_bits), self.word)
        var = self.bb.emit(self.relax.call_tir(gv, [y], ty), name_hint="pool")
        self.aux_rows[var.name] = {"op": "max_pool2d", "flops": n * h * w * shape[3] * s.pool * s.pool,
                                   "epilogue": ["quantize", "bitpack"]}
        return var

    def quantize_float(self, y):
        """floor(y / step + 1/2) as float ops (step a power of two: exact), before the clip."""
        op = self.relax.op
        z = self.bb.emit(op.multiply(y, self.relax.const(1.0 / self.net.step, "float32")))
        return self.bb.emit(op.floor(self.bb.emit(op.add(z, self.relax.const(0.5, "float32")))))

    def dequant(self, q):
        return self.bb.emit(self.relax.op.multiply(q, self.relax.const(self.net.step, "float32")))

    def dw_float(self, d, v, pad):
        """Float depthwise + BN + ReLU on values v."""
        op, c = self.relax.op, d.weight.shape[2]
        y = self.bb.emit(op.nn.conv2d(v, self.const(d.weight.reshape(3, 3, 1, c)), strides=d.stride, padding=pad,
                                      groups=c, data_layout="NHWC", kernel_layout="HWIO"), name_hint=d.name)
        return self.bb.emit(op.nn.relu(self.bb.emit(op.add(y, self.const(d.bias)), name_hint=f"{d.name}_bias")),
                            name_hint=f"{d.name}_relu")

    def dw_packed(self, d, p, c: int):
        """dequant -> depthwise -> quantize+pack from packed codes p, in bands of output rows whose float
        input (DW_BAND_BYTES) stays in the A53's L2 (a53.py: 512 KB) with its output, the packed bands then
        joined: the float maps never go to DRAM. Exact: the depthwise's weights are snapped (any order)."""
        op = self.relax.op
        _, h, w, cw, _ = (int(x) for x in p.ty.shape)
        ints = integer_form(d, a_bits=self.net.a_bits, step=self.net.step) if INT16_DEPTHWISE else None
        if ints is not None and cw * ops.WORD_BITS[self.word] == c:
            return self.dw_codes(d, p, ints)
        oh, s, (top, left, _, right) = d.out_shape[1], d.stride, d.pad  # the bottom pad follows from i1
        rows = max(1, DW_BAND_BYTES // (w * c * 4 * s))
        if h * w * c * 4 <= 2 * DW_BAND_BYTES or rows >= oh:
            return self.quantize_pack(self.dw_float(d, self.unpack_dequant(p, c), d.pad))
        bands = []
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            i0, i1 = r0 * s - top, (r1 - 1) * s - top + 3  # the band's input rows (3x3)
            v = self.unpack_dequant(p, c, rows=(max(0, i0), min(h, i1)))
            bands.append(self.quantize_pack(self.dw_float(d, v, (max(0, -i0), left, max(0, i1 - h), right))))
        return self.bb.emit(op.concat(bands, axis=1), name_hint=f"{d.name}_packed")

    def dw_codes(self, d, p, ints):
        """The depthwise on packed codes in int16, codes out (bitserial/dw3x3_codes_int16.py): one kernel."""
        pshape = [int(x) for x in p.ty.shape]
        key = ("dw_codes", str(pshape), d.stride, d.pad)
        gv = self._kernel(key, lambda: dw3x3_codes_prim_func(
            pshape, ints, stride=d.stride, pad=d.pad, a_bits=self.net.a_bits, word=self.word,
            lanes=8 if self.arch == "aarch64" else 16),
            "bitserial_dw_codes")
        n, oh, ow, c = d.out_shape
        ty = self.relax.TensorType((n, oh, ow, pshape[3], self.net.a_bits), self.word)
        var = self.bb.emit(self.relax.call_tir(gv, [p, self.const(ints.weight), self.const(ints.thresholds)], ty),
                           name_hint=d.name)
        self.aux_rows[var.name] = {"op": "depthwise_conv2d", "flops": 2 * 9 * n * oh * ow * c,
                                   "epilogue": ["bias", "relu", "quantize", "bitpack"], "precision": "int16"}
        return var

    def dw_pw(self, b, v, last: bool):
        """MobileNet layer: float depthwise + BN + ReLU on values v (or, fused, on (packed codes, channels): see
        dw_packed), quantize+pack, bitserial pointwise. Returns (packed codes of the output when last, else
        None; the next layer's input when not last: fused (packed codes, channels), unfused its values)."""
        d = b.dw
        p = self.dw_packed(d, *v) if isinstance(v, tuple) else self.quantize_pack(self.dw_float(d, v, d.pad))
        if self.glue == "fused":
            p = self.conv(b.pw, p, glue_out=True)
            if last:
                return p, None
            return None, (p, b.pw.out_shape[3])
        q = self.clip(self.float_glue(b.pw, self.conv(b.pw, p, glue_out=False)))
        return (self.pack(q), None) if last else (None, self.dequant(q))

    def block(self, b, p, qf):
        if self.glue == "fused":
            h = self.conv(b.conv1, p, glue_out=True)
            if b.down is not None:
                acc_d = self.conv(b.down, p, glue_out=False)
                return self.conv(b.conv2, h, glue_out=True, residual="glue",
                                 res_args=[acc_d, *self.glue_consts(b.down)]), None
            return self.conv(b.conv2, h, glue_out=True, residual="codes", res_args=[p], res_lshift=b.res_lshift), None
        h = self.pack(self.clip(self.float_glue(b.conv1, self.conv(b.conv1, p, glue_out=False))))
        t = self.float_glue(b.conv2, self.conv(b.conv2, h, glue_out=False))
        if b.down is not None:
            res = self.float_glue(b.down, self.conv(b.down, p, glue_out=False))
        else:
            res = qf if not b.res_lshift else self.glue_op("scale", qf, self.const(
                np.full(int(qf.ty.shape[-1]), 1 << b.res_lshift), "float32"))
        q = self.clip(self.glue_op("add", t, res))
        return self.pack(q), q

    def head(self, p, output: str):
        op, net = self.relax.op, self.net
        c = net.convs[-1].out_shape[3]
        if output in ("codes", "both"):
            codes = self.bb.emit_te(io.unpack_compute, p, channels=c, primfunc_name_hint="bitserial_unpack")
            if output == "codes":
                return codes
        pshape = [int(d) for d in p.ty.shape]
        if pshape[3] * ops.WORD_BITS[self.word] == c:
            gv = self._kernel(("avgpool", str(pshape)), lambda: io.unpack_mean_prim_func(
                pshape, word=self.word, channels=c, step=net.step), "bitserial_avgpool")
            feat = self.bb.emit(self.relax.call_tir(gv, [p], self.relax.TensorType((pshape[0], c), "float32")))
        else:
            feat = self.bb.emit_te(io.unpack_mean_compute, p, channels=c, step=net.step,
                                   primfunc_name_hint="bitserial_avgpool")
        y = self.bb.emit(op.matmul(feat, self.const(net.fc_weight)), name_hint="fc")
        y = self.bb.emit(op.add(y, self.const(net.fc_bias)), name_hint="fc_bias")
        scores = self.bb.emit(op.nn.softmax(y, axis=-1), name_hint="softmax")
        return self.bb.emit(self.relax.Tuple([codes, scores])) if output == "both" else scores


def emit_network(net, target, *, glue: str = "fused", output: str = "scores", aux_rows=None):
    """The Relax module of `net` for an edge_sdk Target (see module docstring) and {binding name: binary
    conv name}. The target gives the kernels' schedules (its arch) and the integer stem's SIMD (its LLVM row).
    aux_rows, when given, receives {binding name: layer-table row fields} of the integer stem."""
    if output not in ("scores", "codes", "both"):
        raise CompileError(f"bitserial network: output '{output}' is not 'scores', 'codes' or 'both'")
    em = _Emitter(net, target, glue=glue)
    relax = em.relax
    x = relax.Var("input", relax.TensorType(net.input_shape, "float32"))
    with em.bb.function("main", [x]):
        with em.bb.dataflow():
            p, qf = em.stem(x)
            for i, b in enumerate(net.blocks):
                if isinstance(b, DwPw):
                    p, qf = em.dw_pw(b, qf, last=i == len(net.blocks) - 1)
                else:
                    p, qf = em.block(b, p, qf)
            gv = em.bb.emit_output(em.head(p, output))
        em.bb.emit_func_output(gv)
    if aux_rows is not None:
        aux_rows.update(em.aux_rows)
    return relax.transform.Normalize()(em.bb.get()), em.names
