"""Per-layer times from `edge-runner --profile` and the manifest's per-layer kernel list.

Why here (and not in the compiler): a device has the manifest and the runner's JSON, nothing else;
this module imports neither TVM nor the compiler, so the same numbers come out on a Pi.

The runner reports, per call site (the k-th call of a kernel symbol in one inference), the mean time
per call over the profiled runs; each manifest layer lists its sites ("kernels": [{"name", "call",
"role", "glue_share_est"?}], written by compiler/kernel_map.py). For a layer:

    conv_ms = main kernels x (1 - glue_share_est)              (conv/dense layers; 0 for the rest)
    glue_ms = main kernels x glue_share_est + its glue kernels (all of it for pools, softmax, ...)
    ms      = conv_ms + glue_ms

glue_share_est splits a fused kernel by op counts (an estimate); separate glue kernels (unfused
bitserial glue, quantize/bitpack, slices) are measured. Time no layer owns (VM allocation, views,
shape checks: the vm.builtin.* calls) is `other_ms`.
"""
from __future__ import annotations

from dataclasses import dataclass

CONV_LIKE = ("conv", "dense", "matmul")  # as the dashboard's layer_kind: conv time vs glue time
OUTSIDE = "outside the layers"  # the op of a modelled per-layer row that is no layer's (timing/per_layer.py)


@dataclass
class LayerProfile:
    """Per-layer rows ({"name", "op", "ms", "conv_ms", "glue_ms"}, in layer order) and the totals."""

    layers: list[dict]
    run_ms: float  # median of the profiled runs (the hook adds a little per call)
    other_ms: float  # per-inference time in calls no layer owns (VM builtins, unmapped kernels)
    kernels: list[dict]  # the runner's per-symbol list: {"kernel", "calls", "total_ms", "mean_ms"}

    def per_layer_ms(self) -> list[dict]:
        """The results store's per_layer_ms: [{"name", "op", "ms", "conv_ms", "glue_ms"}]."""
        return [{"name": r["name"], "op": r["op"], **{k: round(r[k], 6) for k in ("ms", "conv_ms", "glue_ms")}}
                for r in self.layers]


def layer_times(layers: list[dict], profile: dict) -> LayerProfile:
    """Join the runner's "profile" object with the manifest's layer rows (see the module docstring).

    Layers without a "kernels" list (older packages, the int8 path) get no row. A site the runner
    never saw (a reshape TVM turned into a view) counts 0 ms.
    """
    site_ms = {(s["kernel"], s["call"]): s["total_ms"] / max(1, s["calls"]) for s in profile.get("sites", [])}
    runs = max(1, int(profile.get("runs", 1)))
    rows, owned = [], 0.0
    for lyr in layers:
        ks = lyr.get("kernels")
        if not ks:
            continue
        conv_like = any(s in lyr["op"] for s in CONV_LIKE)
        conv = glue = 0.0
        for k in ks:
            ms = site_ms.get((k["name"], k["call"]), 0.0)
            if k["role"] == "main" and conv_like:
                share = float(k.get("glue_share_est", 0.0))
                conv += ms * (1 - share)
                glue += ms * share
            else:
                glue += ms
        owned += conv + glue
        row = {"name": lyr["name"], "op": lyr["op"], "ms": conv + glue, "conv_ms": conv, "glue_ms": glue,
               "flops": lyr.get("flops", 0), "intensity": lyr.get("intensity")}
        rows.append(row)
    all_ms = sum(k["total_ms"] for k in profile.get("kernels", [])) / runs
    return LayerProfile(layers=rows, run_ms=float(profile.get("median_run_ms", 0.0)),
                        other_ms=max(0.0, all_ms - owned), kernels=list(profile.get("kernels", [])))


def format_table(prof: LayerProfile, *, peak_gflops: float | None = None, emulated: bool = False) -> str:
    """A plain-text per-layer table: name, op, ms, % of the profiled run, GFLOP/s (and % of the
    target's peak), arithmetic intensity (FLOP/byte): the roofline's data, one layer a line."""
    total = prof.run_ms or sum(r["ms"] for r in prof.layers) or 1.0
    head = f"{'layer':<24} {'op':<18} {'ms':>9} {'%':>6} {'glue%':>6} {'GFLOP/s':>9} {'%peak':>6} {'FLOP/B':>8}"
    lines = [head, "-" * len(head)]
    for r in prof.layers:
        gflops = r["flops"] / (r["ms"] * 1e6) if r["ms"] > 0 and r["flops"] else None
        peak = f"{100 * gflops / peak_gflops:6.1f}" if gflops is not None and peak_gflops else f"{'-':>6}"
        glue = f"{100 * r['glue_ms'] / r['ms']:6.1f}" if r["ms"] > 0 else f"{'-':>6}"
        lines.append(f"{r['name'][:24]:<24} {r['op'][:18]:<18} {r['ms']:9.4f} {100 * r['ms'] / total:6.1f} {glue} "
                     f"{gflops if gflops is not None else float('nan'):9.2f} {peak} "
                     f"{r['intensity'] if r['intensity'] is not None else float('nan'):8.2f}")
    summed = sum(r["ms"] for r in prof.layers)
    lines.append("-" * len(head))
    lines.append(f"layers {summed:.4f} ms + other (VM builtins) {prof.other_ms:.4f} ms; profiled run "
                 f"{prof.run_ms:.4f} ms (median; the timing hook adds a little per call)"
                 + ("; emulated under qemu: not a Pi's times" if emulated else ""))
    return "\n".join(lines)


def format_modelled_table(rows: list[dict], *, modelled_ms: float, label: str, flops: dict[str, int] | None = None,
          peak_gflops: float | None = None) -> str:
    """A plain-text table of timing/per_layer.layer_split's rows: name, op, modelled ms, % of the model, glue %, GFLOP/s."""
    flops = flops or {}
    head = f"{'layer':<40} {'op':<18} {label:>16} {'%':>6} {'glue%':>6} {'GFLOP/s':>8} {'%peak':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        f = flops.get(r["name"]) if r["op"] != OUTSIDE else None
        gf = f / (r["ms"] * 1e6) if f and r["ms"] > 0 else None
        lines.append(f"{r['name'][:40]:<40} {r['op'][:18]:<18} {r['ms']:16.4f} {100 * r['ms'] / modelled_ms:6.1f} "
                     f"{100 * r['glue_ms'] / r['ms'] if r['ms'] > 0 else 0:6.1f} "
                     f"{'-' if gf is None else f'{gf:.2f}':>8} "
                     f"{'-' if gf is None or not peak_gflops else f'{100 * gf / peak_gflops:.1f}':>6}")
    summed = sum(r["ms"] for r in rows)
    lines += ["-" * len(head), f"sum {summed:.4f} {label} of the model's {modelled_ms:.4f} "
              f"({100 * (summed - modelled_ms) / modelled_ms:+.2f} %): the A53 timing model's price of each "
              "layer's functions, not a measurement"]
    return "\n".join(lines)
