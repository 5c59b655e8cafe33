"""`edge-sdk inspect PKG [--json]`: a package's manifest (layers, FLOPs, sizes) as a table or JSON.
`edge-sdk inspect FILE.tflite|FILE.onnx`: a model file before compile (ops supported or not and why,
inputs, outputs, weight storage; models/inspect_file.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from edge_sdk.cli.common import print_json


def add_inspect_parser(sub) -> None:
    p = sub.add_parser("inspect", help="print a package's manifest (layers, FLOPs, sizes), or a model file's ops "
                       "(supported or not, and why), outputs and weight storage")
    p.add_argument("package", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(drive=drive_inspect)


def drive_inspect(args) -> int:
    if args.package.suffix.lower() in (".tflite", ".onnx"):
        return _inspect_file(args)
    from edge_sdk.package import read_manifest

    m = read_manifest(args.package)
    if args.json:
        print_json(m)
        return 0
    from rich.console import Console
    from rich.markup import escape

    out = Console(width=None if sys.stdout.isatty() else 140)
    i = m["input"]
    out.print(f"[bold]{escape(m['model']['name'])}[/] " + escape(
              f"{m['variant']} for {m['target']['name']} "
              f"({m['target']['llvm'].get('mcpu')}), built {m['created']} with edge-sdk {m['versions']['edge_sdk']}, "
              f"TVM {m['versions']['tvm']}"))
    text = lambda s: out.print(s, markup=False, highlight=False)  # noqa: E731 - manifest text is data, not markup
    text(f"source: {m['model']['source']}")
    text(f"input: {i['name']} {i['shape']} {i['dtype']} {i['layout']}, preprocess {i['preprocess']}")
    text(f"output: {m['output']['shape']} {m['output']['dtype']}; labels: "
         f"{len(m['labels']) if m.get('labels') else 'none'}")
    out.print(_layer_table(m))
    ch = m.get("choice") or {}
    if ch.get("enabled"):
        text(_choice_summary(ch))
    sizes = ", ".join(f"{n} {v['size'] / 1e6:.2f} MB" for n, v in m["members"].items())
    out.print(f"total {m['totals']['flops'] / 1e9:.3f} GFLOP; {m['params']['count']} parameter tensors "
              f"({m['params']['bytes'] / 1e6:.2f} MB); members: {sizes}")
    return 0


def _layer_table(m: dict):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"{len(m['layers'])} layers")
    chosen = (m.get("choice") or {}).get("enabled")
    cols = ("layer", "op", "output", "MFLOP", "KB read", "KB written", "FLOP/byte") + (
        ("schedule", "modelled Mcyc", "rule Mcyc") if chosen else ())
    for col in cols:
        t.add_column(col, justify="right" if col not in ("layer", "op", "output", "schedule") else "left")
    for r in m["layers"]:
        op = r["op"] + ("+" + "+".join(r["epilogue"]) if r["epilogue"] else "")
        row = [escape(r["name"]), escape(op), "x".join(map(str, r["output"])), f"{r['flops'] / 1e6:.2f}",
               f"{r['bytes_read'] / 1024:.0f}", f"{r['bytes_written'] / 1024:.0f}", f"{r['intensity']:.2f}"]
        if chosen:
            row += _choice_cells(r.get("choice"))
        t.add_row(*row)
    return t


def _choice_summary(ch: dict) -> str:
    saved = f"~{ch['saved_cycles_est'] / 1e6:.1f} M modelled cycles saved by the estimate"
    if ch.get("mode") == "records":
        return (f"schedule choice from the shipped records ({', '.join(ch['records']) or 'none matched'}; timing model "
                f"{ch['timing_model'] or '-'}): {ch['workloads']} workloads, {ch['from_records']} from a record (^), "
                f"{ch['rule']} without one (rule), {ch['skipped']} records skipped, {ch['checked']} checked under qemu, "
                f"{ch['changed_layers']} layers off the rule, {saved}; nothing priced")
    return (f"schedule choice: {ch['workloads']} workloads on the {ch['target']} timing model ({ch['timing_model']}), "
            f"{ch['priced']} candidates priced, {ch['cached']} cached, {ch['changed_layers']} layers off the rule, "
            f"{saved} (* cached)")


def _choice_cells(c: dict | None) -> list[str]:
    """schedule, its modelled cycles and the rule's (compile/choice), in M modelled A53 cycles."""
    if not c:
        return ["", "", ""]
    mc = lambda v: f"{v / 1e6:.2f}" if isinstance(v, (int, float)) else "-"  # noqa: E731
    return [c["schedule"] + ("*" if c.get("cached") else "") + ("^" if c.get("source") == "record" else ""),
            mc(c.get("modelled_cycles")), mc(c.get("default_cycles"))]


def _inspect_file(args) -> int:
    from edge_sdk.models.inspect_file import inspect_model_file

    r = inspect_model_file(args.package)
    if args.json:
        print_json(r)
        return 0
    say = lambda s: print(s)  # noqa: E731
    say(f"{r['file']} ({r['format']}{', opset ' + str(r['opset']) if r.get('opset') else ''})")
    for kind in ("inputs", "outputs"):
        for t in r[kind]:
            say(f"  {kind[:-1]} {t['name']}: {t['shape']} {t['dtype']}"
                + (f" (signature {t['shape_signature']})" if t.get("shape_signature") else ""))
    say("  ops:")
    for o in r["ops"]:
        say(f"    {'ok ' if o['supported'] else 'NO '} {o['op']} x{o['count']}: {o['why']}")
    w = r["weights"]
    say(f"  weights: {', '.join(f'{k} {v / 1e6:.3f} MB' for k, v in w['bytes_by_dtype'].items()) or 'none'}"
        + (f"; {w['sparse_tensors']} sparse tensors" if w["sparse_tensors"] else ""))
    imp = r["import"]
    say("  import: ok (compile will read it)" if imp["ok"] else f"  import: FAILS: {imp['error']}")
    return 0
