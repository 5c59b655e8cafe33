"""The bitserial backend of compile_model: a zoo model -> binarized network -> Relax VM executable.

    lower_bitserial(model, variant, target, *, progress, seed) -> Lowered

1. models/binarized.py turns the float zoo model into the Riptide layout (integer stem straight to
   codes, float head, every other conv bitserial with fused glue, residual adds on codes) at the
   variant's bit widths.
2. quant/bitserial_net_ref.py computes the golden output in plain numpy on a 1/128-grid input, so the
   integer part of a correct build (stem included) matches it exactly and the float head within 1e-4.
3. bitserial/graph.py emits the Relax module; compile_relax (lower.py) schedules the float head (and a
   float stem, when selected) with the float kernels, lifts every weight to p0000... and builds.
4. The manifest's layer table gets one "bitserial_conv2d" row per binary conv: binary ops, bytes, and
   the glue's estimated share of the layer's work (an op count, not a timing).
"""
from __future__ import annotations

import math

import numpy as np

from edge_sdk.compiler.bitserial.kernels import WORD_BITS
from edge_sdk.errors import CompileError

GOLDEN_TOL = 1e-4  # the float head (avg pool, dense, softmax) in float32 vs the float64 reference


def compile_binarized(net, target, *, glue: str = "fused", output: str = "scores", progress=None):
    """(executable, params, layer rows) for a BinarizedNet on an edge_sdk Target."""
    from edge_sdk.compiler.bitserial.graph import emit_network
    from edge_sdk.compiler.layers import layer_table
    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.compiler.bitserial.schedule import network_word
    from edge_sdk.compiler.bitserial.x86_popcnt import schedule_arch

    aux: dict = {}
    mod, names = emit_network(net, target, glue=glue, output=output, aux_rows=aux)
    rows = layer_rows(net, layer_table(mod), names, glue=glue, word=network_word(schedule_arch(target)),
                      aux_rows=aux)
    sites: list = []
    ex, params = compile_relax(mod, target, progress=progress, kernel_sites=sites)
    from edge_sdk.compiler.kernel_map import assign_kernels

    # the integer stem's rows are named after their bindings: their kernels are those rows' own
    return ex, params, assign_kernels(rows, sites, var_to_layer={**names, **{v: v for v in aux}})


def conv_row(conv, *, glue: str, word: str, residual: str | None) -> dict:
    """Layer-table row of one bitserial conv: binary ops, bytes, and the glue's share (an estimate)."""
    n, oh, ow, o = conv.out_shape
    c, k, wb = conv.in_shape[3], conv.kernel, WORD_BITS[word]
    outs = n * oh * ow * o
    macs = outs * k * k * c
    word_ops = outs * k * k * -(-c // wb) * conv.a_bits * conv.w_bits  # AND + popcount + add per word pair
    glue_ops = outs * (5 + conv.out_bits + (4 if residual == "glue" else conv.out_bits if residual else 0))
    words = lambda shape, bits: math.prod(shape[:3]) * -(-shape[3] // wb) * bits * (wb // 8)  # noqa: E731
    read = words(conv.in_shape, conv.a_bits) + k * k * -(-c // wb) * conv.w_bits * o * (wb // 8) + 3 * 4 * o
    if glue == "fused":
        written = words(conv.out_shape, conv.out_bits)
        glue_bytes = 0
    else:  # int32 accumulators out, float tensors through the glue ops, codes packed again
        written = outs * 4
        glue_bytes = outs * 4 * 6 + words(conv.out_shape, conv.out_bits)
    row = {
        "op": "bitserial_conv2d", "inputs": [list(conv.in_shape)], "weights": [list(conv.w_codes.shape)],
        "output": list(conv.out_shape), "flops": 2 * macs * conv.a_bits * conv.w_bits,
        "bytes_read": int(read), "bytes_written": int(written), "epilogue": [f"glue:{glue}"] + (
            [f"residual:{residual}"] if residual else []),
        "bits": {"weights": conv.w_bits, "activations": conv.a_bits, "out": conv.out_bits},
        "word_ops": int(word_ops),
        "glue": {"mode": glue, "ops": int(glue_ops), "bytes": int(glue_bytes),
                 "share_est": round(glue_ops / (3 * word_ops + glue_ops), 4)},
    }
    row["intensity"] = round(row["flops"] / max(1, read + written), 3)
    return row


def layer_rows(net, float_rows: list[dict], names: dict[str, str], *, glue: str, word: str,
               aux_rows: dict | None = None) -> list[dict]:
    """The float rows of the emitted graph, with each binary conv's call_tir row replaced by conv_row and
    the integer stem's call_tir rows named by aux_rows (op, FLOPs, epilogue)."""
    aux_rows = aux_rows or {}
    residual = {}
    for b in net.blocks:
        if hasattr(b, "conv2"):
            residual[b.conv2.name] = "glue" if b.down is not None else "codes"
    convs = {c.name: c for c in net.convs}
    out = []
    for r in float_rows:
        if r["name"] in names:
            conv = convs[names[r["name"]]]
            res = residual.get(conv.name) if glue == "fused" else None
            out.append({"name": conv.name, **conv_row(conv, glue=glue, word=word, residual=res)})
        elif r["name"] in aux_rows:
            extra = aux_rows[r["name"]]
            row = {**r, **extra}
            row["intensity"] = round(row["flops"] / max(1, row["bytes_read"] + row["bytes_written"]), 3)
            out.append(row)
        elif r["op"] == "call_tir":
            out.append({**r, "op": "bitserial_aux"})  # quantize+pack, unpack+avgpool, bitpack
        else:
            out.append(r)
    return out


def lower_bitserial(model, variant, target, *, progress, seed: int):
    from edge_sdk.compiler.build import Lowered
    from edge_sdk.models.binarized import DEFAULT_STEM, binarize, golden_input
    from edge_sdk.quant.bitserial_net_ref import run_reference

    if variant.glue not in ("fused", "unfused"):
        raise CompileError(f"variant '{variant.name}': glue mode {variant.glue!r} is not 'fused' or 'unfused'")
    if model.options.get("format") == "lce":  # a Larq Compute Engine model: binary already
        from edge_sdk.compiler.bitserial.lce import lower_lce

        return lower_lce(model, variant, target, progress=progress, seed=seed)
    net = binarize(model, a_bits=variant.activation_bits, w_bits=variant.weight_bits,
                   polarity=variant.polarity or "unipolar", stem=variant.stem or DEFAULT_STEM)
    x = golden_input(net.input_shape, seed=seed)
    trace = run_reference(net, x, glue=variant.glue)
    progress(f"binarized {model.name}: {len(net.convs)} bitserial convs, glue {variant.glue}; "
             f"golden output from the numpy reference")
    ex, params, rows = compile_binarized(net, target, glue=variant.glue, progress=progress)
    extra = {"polarity": net.mode, "glue": variant.glue, "shiftnorm": net.shiftnorm, "activation_step": net.step,
             "binary_layers": len(net.convs), "stem": "int8" if net.stem.integer else "float32", "head": "float32",
             "code_histogram": {str(k): round(v, 4) for k, v in trace.histogram.items()}}
    return Lowered(ex, params, x, trace.scores.astype(np.float32), "numpy-bitserial", extra=extra,
                   rtol=GOLDEN_TOL, atol=GOLDEN_TOL, layers=rows)
