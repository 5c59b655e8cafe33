"""Write docs/OPS.md from the code: which ops each variant family takes, so a user knows before trying.

    .venv/bin/python tools/make_ops_doc.py            # rewrites docs/OPS.md
    .venv/bin/python tools/make_ops_doc.py --check    # exit 1 if docs/OPS.md's op lists are not the code's

Sources: int8 -- the op registry edge_sdk.graph.ops (one entry per op: its readers, numpy reference and
kernel; edge_sdk.models.tflite_int8.SUPPORTED is its list); ONNX QDQ --
edge_sdk.models.onnx_qdq_ops (MAP, BECOMES, REFUSED); float .tflite -- the
Relax TFLite frontend's converter table; float activations -- edge_sdk.graph.ops.float_act; ONNX -- the Relax ONNX frontend's converters per opset 13..18
and the numpy reference's Relax ops (an ONNX model's golden output comes from it); bitserial -- the zoo's
binarized models and the LCE ops edge_sdk.models.lce reads. `*` marks the ops that occur in the committed
test models (every .tflite / .onnx under tests/data).
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "docs" / "OPS.md"
OPSETS = range(13, 19)


def _tested() -> dict[str, set[str]]:
    """Op names per kind ('tflite', 'onnx', 'lce') in the committed test models (every .tflite and .onnx file)."""
    import onnx
    import tflite

    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    seen: dict[str, set[str]] = {"tflite": set(), "onnx": set(), "lce": set()}
    for path in sorted(REPO.glob("tests/data/**/*.tflite")):
        m = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
        ops = set()
        for i in range(m.OperatorCodesLength()):
            c = m.OperatorCodes(i)
            seen["tflite"].add(names.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "CUSTOM"))
            custom = c.CustomCode().decode() if c.CustomCode() else ""
            ops.add(custom or names.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "CUSTOM"))
        if any(o.startswith("Lce") for o in ops):  # an LCE file: its ops for the LCE table ('lce')
            seen["lce"] |= ops
    for path in sorted(REPO.glob("tests/data/**/*.onnx")):
        seen["onnx"].update(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)
    return seen


def _tflite_float() -> list[str]:
    from tvm.relax.frontend.tflite import tflite_frontend as fe

    return sorted(set(re.findall(r'^\s+"([A-Z0-9_]+)":', inspect.getsource(fe.OperatorConverter.__init__), re.M)))


def _onnx() -> dict[str, list[int]]:
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    out = {}
    for name, conv in fe._get_convert_map().items():
        ok = []
        for v in OPSETS:
            try:
                conv.get_converter(v)
                ok.append(v)
            except Exception:  # noqa: BLE001 - no implementation for that opset
                pass
        out[name] = ok
    return out


def _mark(names, tested: set[str]) -> str:
    return ", ".join(f"{n}{' *' if n in tested else ''}" for n in names)


def _reference_ops() -> list[str]:
    """The Relax ops relax_ref evaluates: the float ops' (graph/ops/float_ops) and the activations' (float_act)."""
    from edge_sdk.graph.ops import float_act, float_ops

    return sorted(set(float_ops.FLOAT_OPS) | {d.relax_op for d in float_act.ACTS.values() if d.relax_op})


def _float_ops(tested: dict[str, set[str]]) -> list[str]:
    """The float Relax ops (edge_sdk.graph.ops.float_ops), one row each."""
    from edge_sdk.graph.ops import float_ops

    def mark(names, kind):
        return _mark(names, tested[kind])

    rows = []
    for d in float_ops.FLOAT_OPS.values():
        ours = f"`{_short(d.kernel or d.legalize)}`" if d.kernel or d.legalize else "TVM's legalization (TOPI)"
        rows.append(f"| {d.relax_op} | {mark(d.tflite, 'tflite')} | {mark(d.onnx, 'onnx')} | `{_short(d.reference)}` | "
                    f"{ours} | {d.doc} |")
    return ["Each float op is one entry in `edge_sdk/graph/ops/float_ops.py`, which ties the file ops the Relax",
            "frontends import as it, the numpy reference (quant/relax_ref.py dispatches to it; any op without an",
            "entry is an error naming it) and our kernel (the float rewriter's planner, compiler/ops/fuse.py, or a",
            "legalization, compiler/lower.py; else TVM's own); a new op is one entry there plus its numpy body:", "",
            "| Relax op | .tflite | ONNX | numpy reference | kernel | |", "|---|---|---|---|---|---|", *rows, ""]


def _cols(items, tested: set[str], width: int = 6) -> list[str]:
    cells = [f"{i}{' *' if i in tested else ''}" for i in items]
    rows = [cells[i:i + width] for i in range(0, len(cells), width)]
    return ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]


def _qdq() -> list[str]:
    """The ONNX QDQ section: models/onnx_qdq_ops.MAP (each op type and the int8 op it becomes), REFUSED."""
    import onnx

    from edge_sdk.models.onnx_qdq_ops import BECOMES, MAP, REFUSED

    tested = {n.op_type for p in sorted(REPO.glob("tests/data/**/qdq/*.onnx"))
              for n in onnx.load(str(p), load_external_data=False).graph.node}  # the QDQ test files only
    rows = [f"| {k}{' *' if k in tested else ''} | {BECOMES.get(k, '')} |" for k in sorted(MAP)]
    return ["## int8 from ONNX QDQ (onnxruntime.quantization's quantize_static, QuantFormat.QDQ)", "",
            "Each float op between DequantizeLinear and QuantizeLinear becomes the int8 op on the right, with",
            "per-channel int8 weights and int8 activations, and compiles with the same integer kernels. Compiled",
            "output is bit-exact with our numpy int8 reference of that graph; against ONNX Runtime, which",
            "requantizes in float where TFLite's arithmetic is fixed-point, each op is within 1 LSB on the same",
            "int8 input and the test models' outputs within 8 LSB (tests/test_onnx_qdq.py). Not read (an error",
            "naming the node, its op type and the file, exit code 4): " + "; ".join(REFUSED) + ".", "",
            "| ONNX op | int8 op |", "|---|---|", *rows, ""]


def _short(name: str) -> str:
    """ "edge_sdk.quant.int8_pointwise:hard_swish_table" -> "quant/int8_pointwise.hard_swish_table" """
    module, _, attr = name.partition(":")
    return f"{module.removeprefix('edge_sdk.').replace('.', '/')}.{attr}"


def _registry(tested: set[str]) -> list[str]:
    """The registered int8 ops (edge_sdk.graph.ops), one row each."""
    from edge_sdk.graph import ops as registry

    rows = []
    for d in registry.OPS.values():
        opts = ", ".join(key for key, _, _ in d.tflite.fields) if d.tflite else ""
        rows.append(f"| {d.kind}{' *' if d.kind in tested else ''} | {d.family} | {opts} | {', '.join(d.onnx)} | "
                    f"`{_short(d.reference)}` | `{_short(d.kernel)}` | {d.doc} |")
    return ["Each op above is one entry in `edge_sdk/graph/ops/` (in the module of its family), which ties the",
            ".tflite options read, the ONNX QDQ op types, the numpy reference and the kernel; a new op is one",
            "entry there plus its numpy body:", "",
            "| op | family | .tflite options | ONNX QDQ | numpy reference | kernel | |", "|---|---|---|---|---|---|---|",
            *rows, ""]


def _float_acts(tested: dict[str, set[str]]) -> list[str]:
    """The float activations (edge_sdk.graph.ops.float_act), with the int8 op that computes the same function."""
    from edge_sdk.graph import ops as registry
    from edge_sdk.graph.ops import float_act

    def mark(names, kind):
        return _mark(names, tested[kind])

    rows = []
    for d in float_act.ACTS.values():
        found = d.relax_op or ("the elementwise subgraph" if d.subgraph else "")
        if d.relax_op and d.subgraph:
            found += " or the subgraph"
        i8 = registry.of(d.int8)
        int8 = f"{d.int8} (`{_short(i8.reference)}`)" if i8 else d.int8
        rows.append(f"| {d.kind}{'(' + ', '.join(d.params) + ')' if d.params else ''} | {mark(d.tflite, 'tflite')} | "
                    f"{mark(d.onnx, 'onnx')} | {found} | `{_short(d.reference)}` | `{_short(d.kernel)}` | {int8} | "
                    f"{d.doc} |")
    return ["## Activations fused into float kernels (float32, both importers), beside their int8 op", "",
            "The Relax frontends import these ops as Relax ops; the float rewriter (compiler/ops/fuse.py, chain.py)",
            "folds the Relax op, or an elementwise subgraph equal to the numpy reference on sample points, into",
            "the epilogue of the conv / depthwise / dense before it. One entry each in",
            "`edge_sdk/graph/ops/float_act.py` ties the importers' ops, the numpy reference and the kernel",
            "expression; the int8 column is the registered int8 op computing the same function.", "",
            "| activation | .tflite | ONNX | matched as | numpy reference | float kernel | int8 op | |",
            "|---|---|---|---|---|---|---|---|", *rows, ""]


def _lce(tested: set[str]) -> list[str]:
    """The LCE importer's ops (edge_sdk.graph.ops.lce), one row each."""
    from edge_sdk.graph.ops import lce

    rows = []
    for d in lce.OPS.values():
        opts = ", ".join(d.required) if d.custom else ", ".join(k for k, _, _ in d.tflite.fields) if d.tflite else ""
        rows.append(f"| {d.kind}{' *' if d.kind in tested else ''} | {'Larq custom' if d.custom else 'builtin'} | "
                    f"{opts} | `{_short(d.reference)}` | `{_short(d.kernel)}` | {d.doc} |")
    return ["Each op an LCE file may hold is one entry in `edge_sdk/graph/ops/lce.py` (options read, numpy",
            "reference, Relax emitter); any other op is an error naming it, its index and the file (exit code 4):",
            "", "| op | kind | options | numpy reference | emitter | |", "|---|---|---|---|---|---|", *rows, ""]


def render() -> str:
    from edge_sdk.models.lce import LCE_OPS
    from edge_sdk.models.tflite_int8 import SUPPORTED

    tested = _tested()
    onnx = _onnx()
    hdr = "| " + " | ".join([""] * 6) + " |\n|" + "---|" * 6
    lines = ["# Ops per variant family", "",
             "Generated by `tools/make_ops_doc.py` from the code (do not edit by hand). `*`: the op occurs in a",
             "committed test model (tests/data), so it is compiled and compared with LiteRT / ONNX Runtime there.", "",
             "## int8 (full-integer .tflite, int8 or float input): our reader and integer kernels",
             "", "Bit-exact with LiteRT's reference kernels (BUILTIN_REF). Any other op is an error naming the op,",
             "its index and the file (exit code 4).", "", hdr, *_cols(sorted(SUPPORTED), tested["tflite"]), "",
             *_registry(tested["tflite"]),
             *_qdq(),
             *_float_acts(tested),
             "## float32 from .tflite: the Relax TFLite frontend, then our kernels", "",
             "Golden output from LiteRT. Ops the frontend converts:", "", hdr,
             *_cols(_tflite_float(), tested["tflite"]), "",
             "## float32 from ONNX (opsets 13-18): the Relax ONNX frontend, shapes folded first", "",
             "Shape arithmetic of a static input (Shape/Gather/Div/Slice chains from torch's chunk and view) is",
             "folded before import; an op without a converter is an error naming the node, its op type and the",
             "file (exit code 4). `(vN..)`: the opsets of 13-18 the converter has.", "", hdr,
             *_cols([f"{k}{'' if v == list(OPSETS) else f' (v{v[0]}..)' if v else ' (none)'}" for k, v in
                     sorted(onnx.items())], {f"{k}" for k in tested["onnx"]}), "",
             "The golden output of an ONNX model comes from our numpy reference, which evaluates these Relax ops",
             "(a graph with any other is an error naming it):", "", hdr, *_cols(_reference_ops(), set()), "",
             *_float_ops(tested),
             "## bitserial (w1a1, w1a2, w2a2 ...)", "",
             "The zoo's binarized ResNet18 / MobileNet (first and last layer in higher precision), and Larq",
             f"Compute Engine .tflite files with {', '.join(LCE_OPS)} (w1a1).", "", *_lce(tested["lce"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/OPS.md differs from the code")
    args = ap.parse_args(argv)
    text = render()
    if args.check:  # the op lists; the test-model marks change whenever someone adds a test model
        def bare(t: str) -> str:
            return t.replace(" *", "")

        same = OUT.is_file() and bare(OUT.read_text()) == bare(text)
        print("docs/OPS.md is up to date" if same else "docs/OPS.md differs: run tools/make_ops_doc.py")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
