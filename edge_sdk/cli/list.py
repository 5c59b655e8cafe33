"""`edge-sdk list [--json]`: the targets, variants and zoo models (the two tables and the zoo)."""
from __future__ import annotations

from edge_sdk.cli.common import print_json


def add_list_parser(sub) -> None:
    p = sub.add_parser("list", help="list the targets, variants and zoo models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(drive=drive_list)


def drive_list(args) -> int:
    from edge_sdk.models.zoo import ZOO
    from edge_sdk.targets import TARGET_NAMES, get_target
    from edge_sdk.variants import VARIANTS

    targets = [get_target(n) for n in TARGET_NAMES]
    data = {
        "targets": [{"name": t.name, "arch": t.arch, "description": t.description, "cores": t.cores,
                     "clock_ghz": t.clock_ghz, "peak_gflops": t.peak_gflops, "mem_gbps": t.mem_gbps} for t in targets],
        "variants": [{"name": v.name, "description": v.description, "available": v.available} for v in VARIANTS.values()],
        "models": sorted(ZOO),
    }
    if args.json:
        print_json(data)
        return 0
    for t in data["targets"]:
        print(f"target  {t['name']:<10} {t['arch']:<8} {t['peak_gflops']:>7.1f} GFLOP/s {t['mem_gbps']:>5.1f} GB/s  {t['description']}")
    for v in data["variants"]:
        print(f"variant {v['name']:<10} {'' if v['available'] else '(not yet) '}{v['description']}")
    print("models  " + ", ".join(data["models"]))
    return 0
