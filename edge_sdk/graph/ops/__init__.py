"""One registration per int8 op: its reader(s), numpy reference and kernel tied in one entry.

    OPS["HARD_SWISH"] -> OpDef(kind, family, reference, kernel, tflite=..., onnx=..., ...)
    of(kind) -> OpDef | None          the entry, or None: the int8 path does not take that op
    resolve("edge_sdk.quant.int8_pointwise:hard_swish_table") -> the function

In the style of TVM's `@register_legalize("relax.nn.conv2d")`: the consumers look the op up here instead of
keeping their own lists. The .tflite int8 reader (models/tflite_int8_ops.py) reads `tflite` (options) and the
structural flags; the ONNX QDQ reader (models/onnx_qdq_ops.py) maps `onnx` op types with its converter of the
op's family; the numpy reference (quant/tflite_int8_ref_ops.py) calls `reference`; the int8 backend
(compiler/int8/backend.py) calls `kernel`; docs/OPS.md (tools/make_ops_doc.py) lists them.

Every op the int8 path reads is here (conv, pool, softmax, quantize, movement, binary, unary, resize).
Adding an op is one entry in the module of its family (int8_conv, int8_pool, int8_softmax, int8_quantize,
int8_binary, int8_unary, int8_movement, int8_resize), plus its numpy body (a unary op: a 256-entry table
function; its kernel is the table lookup every unary op shares). The entries are data: references and kernels are named "module:function" and
resolved by the layer that calls them (quant/ resolves references, compiler/ kernels), so graph/ stays
below models/ and quant/ and imports neither. A real import from here would be an upward edge; instead
tests/test_ops_registry.py resolves every name, and tests/test_architecture.py counts each name as an
import by its resolver (quant/tflite_int8_ref_ops for references, compiler/int8/backend for kernels), so
the one-way folder rules and the circle check see them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

FAMILIES = ("conv", "pool", "binary", "unary", "softmax", "movement", "resize", "quantize")


@dataclass(frozen=True)
class TfliteOptions:
    """The op's builtin options in a .tflite: the tflite package's options class and the fields read."""

    table: str  # e.g. "LeakyReluOptions"
    # (Op.opts key, flatbuffer getter or a tuple of them (-> a tuple of values), the cast of each value)
    fields: tuple[tuple[str, str | tuple[str, ...], object], ...] = ()


@dataclass(frozen=True)
class OpDef:
    kind: str  # the TFLite builtin name, also Op.kind in an Int8Graph
    family: str  # one of FAMILIES: which converter, reference shape and kernel emitter it uses
    reference: str  # "module:function" in edge_sdk.quant: the numpy truth (signature per family, below)
    kernel: str  # "module:function" in edge_sdk.compiler: emit(bb, g, op, env, *, name) -> values | None
    tflite: TfliteOptions | None = None  # None: the op has no builtin options we read
    onnx: tuple[str, ...] = ()  # ONNX op types the QDQ reader turns into this op (with its family's converter)
    data_inputs: str = "first"  # which inputs carry int8 data: "first", "all" (>= 0), "second" (SPLIT)
    same_quant: bool = False  # one scale / zero point for data inputs and outputs (values are moved, not computed)
    const_operands: bool = False  # the inputs after the first (shapes, indices, sizes) must be constants
    # (option, message with {value}[, the values accepted]): a ModelError when the option is set (or, with
    # a third element, when it is none of those values)
    refuse: tuple[tuple, ...] = ()
    weights: bool = False  # input 1 is the weights: constant int8 with zero zero points (conv, depthwise, dense)
    int8_io: bool = True  # inputs and outputs are int8 (False: QUANTIZE / DEQUANTIZE convert float or rescale)
    reference_opts: tuple[tuple[str, object], ...] = ()  # unary: options (with defaults) the table takes first
    doc: str = ""  # one line for docs/OPS.md

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"{self.kind}: family {self.family!r} is not one of {FAMILIES}")
        if self.data_inputs not in ("first", "all", "second"):
            raise ValueError(f"{self.kind}: data_inputs {self.data_inputs!r}")


# reference signatures per family:
#   binary    f(g, op, a, b) -> int8 array (numpy broadcasting; a, b the two operands' int8 values)
#   unary     f(*reference_opts values, s_in, z_in, s_out, z_out) -> the 256-entry table (index q + 128)
#   movement  f(g, op, env) -> array, or a list of arrays for several outputs
#   the rest  f(g, op, env) -> array (conv, pool, softmax, resize, quantize)
# kernel: emit(bb, g, op, env, *, name) -> [one relax value per output]; the int8 backend
# (compiler/int8/backend.build_relax) calls it for every op, inside `with target`.

OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.kind in OPS:
        raise ValueError(f"{op.kind} is registered twice")
    OPS[op.kind] = op
    return op


def of(kind: str) -> OpDef | None:
    return OPS.get(kind)


def kinds(family: str | None = None) -> tuple[str, ...]:
    """The registered op kinds (of one family), in registration order."""
    return tuple(k for k, d in OPS.items() if family is None or d.family == family)


def onnx_kinds(family: str | None = None) -> dict[str, str]:
    """ONNX op type -> the int8 op kind it becomes, for the registered ops (of one family)."""
    return {t: d.kind for d in OPS.values() if family is None or d.family == family for t in d.onnx}


# the module that resolves each kind of name (its resolve() call is the import tests/test_architecture.py
# counts: resolver -> the named module)
RESOLVED_BY = {"reference": ("edge_sdk.quant.tflite_int8_ref_ops",), "kernel": ("edge_sdk.compiler.int8.backend",)}


def links() -> list[tuple[str, str]]:
    """(resolver module, "module:function") for every name in the registry."""
    return [(r, getattr(d, f)) for d in OPS.values() for f, rs in RESOLVED_BY.items() for r in rs]


@cache
def resolve(name: str):
    """The object a "package.module:attribute" name points at (imported on first use)."""
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


from edge_sdk.graph.ops import (  # noqa: E402,F401 - each module registers its family's ops
    int8_binary, int8_conv, int8_movement, int8_pool, int8_quantize, int8_resize, int8_softmax, int8_unary)
