"""A sample results database, and a screenshot of the dashboard over it (docs/dashboard.png).

The sample uses the real layer tables of two small zoo models (so the roofline has true FLOPs and
bytes) and made-up latencies from a simple roofline cost model, on three devices; one device has
per-layer times and accuracy. tests/test_dashboard.py uses `fill_sample_store`; run this file to
refresh the README's screenshot:

    .venv/bin/python tools/dashboard_screenshot.py [--out docs/dashboard.png]
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

# device, target, peak GFLOP/s, GB/s, threads, per-layer profile and accuracy?
DEVICES = [("kitchen-pi", "pi3", 38.4, 3.6, 4, True), ("door-pi", "pi-zero2w", 32.0, 3.2, 4, False),
           ("localhost", "host", 150.0, 20.0, 1, False)]
# variant -> (compute speedup, bytes divisor); made-up but in the range the anchors report
VARIANTS = {"float32": (1.0, 1), "int8": (1.8, 4), "w1a2": (5.0, 8)}
ACCURACY = {("mobilenet_v1", "float32"): 0.702, ("mobilenet_v1", "int8"): 0.695, ("mobilenet_v1", "w1a2"): 0.561,
            ("resnet18", "float32"): 0.697, ("resnet18", "int8"): 0.691}


def _layer_tables() -> dict[str, list[dict]]:
    from edge_sdk.compiler.layers import layer_table
    from edge_sdk.models.zoo import build_zoo_model

    return {"mobilenet_v1": layer_table(build_zoo_model("mobilenet_v1", alpha=0.25, resolution=64, classes=10).mod),
            "resnet18": layer_table(build_zoo_model("resnet18", resolution=64, classes=10).mod)}


def _variant_layers(layers: list[dict], variant: str) -> list[dict]:
    _, div = VARIANTS[variant]
    out = []
    for r in layers:
        conv = r["op"] in ("conv2d", "depthwise_conv2d", "dense")
        rd, wr = (r["bytes_read"] // div, r["bytes_written"] // div) if conv else (r["bytes_read"], r["bytes_written"])
        out.append(dict(r, bytes_read=rd, bytes_written=wr, intensity=round(r["flops"] / max(1, rd + wr), 3)))
    return out


def fill_sample_store(store, *, seed: int = 0) -> int:
    """Record the sample runs into `store`; returns how many runs were recorded."""
    rng = np.random.default_rng(seed)
    tables, count = _layer_tables(), 0
    for model, base_layers in tables.items():
        for device, target, peak, bw, threads, profiled in DEVICES:
            for variant, (speed, _) in VARIANTS.items():
                if model == "resnet18" and variant == "w1a2" and device == "door-pi":
                    continue  # not every combination exists: the page must cope
                layers = _variant_layers(base_layers, variant)
                per_layer = []
                for r in layers:
                    conv = r["op"] in ("conv2d", "depthwise_conv2d", "dense")
                    eff = 0.35 * (speed if conv else 1.0)
                    ms = max(r["flops"] / (peak * eff * 1e6), (r["bytes_read"] + r["bytes_written"]) / (bw * 0.5 * 1e6))
                    per_layer.append({"name": r["name"], "ms": round(ms * float(rng.uniform(0.9, 1.1)), 5)})
                median = sum(x["ms"] for x in per_layer) + 0.05
                lat = median * np.sort(rng.normal(1.0, 0.04, 20))
                manifest = {"model": {"name": model}, "variant": variant, "created": "2025-01-01T00:00:00+00:00",
                            "target": {"name": target, "arch": "x86_64" if target == "host" else "aarch64",
                                       "peak_gflops": peak, "mem_gbps": bw},
                            "versions": {"edge_sdk": "0.1.0", "tvm": "0.27.0"}, "layers": layers,
                            "totals": {"flops": sum(r["flops"] for r in layers),
                                       "bytes": sum(r["bytes_read"] + r["bytes_written"] for r in layers)}}
                run = {"package": f"/sample/{model}_{variant}_{target}.edgepkg", "model": model, "variant": variant,
                       "target": target, "emulated": False, "threads": threads, "repeats": len(lat),
                       "latency_ms": {"median": float(np.median(lat)), "min": float(lat.min()), "max": float(lat.max()),
                                      "p10": float(np.percentile(lat, 10)), "p90": float(np.percentile(lat, 90))},
                       "load_ms": 12.5, "golden": {"ok": True, "max_abs_err": 1e-6},
                       "per_layer_ms": per_layer if profiled else []}
                sha = hashlib.sha256(f"{model}/{variant}/{target}".encode()).hexdigest()
                extra = {"package_sha256": sha, "source": "sample", "cpu_model": f"sample {target} CPU"}
                if profiled and (model, variant) in ACCURACY:
                    extra["accuracy"] = ACCURACY[(model, variant)]
                if count == 0:  # an older run of the same key, which the dashboard must not show
                    stale = dict(run, latency_ms={k: v * 3 for k, v in run["latency_ms"].items()})
                    store.record_run(stale, manifest, device=device, extra=dict(extra, time="2024-12-31T00:00:00+00:00"))
                store.record_run(run, manifest, device=device, extra=extra)
                count += 1
    return count + 1


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "tools"))
    from cdp import Chromium

    from edge_sdk.dashboard.server import make_server
    from edge_sdk.results.store import ResultsStore

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=root / "docs" / "dashboard.png")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edge-dash-") as tmp:
        db = Path(tmp) / "results.sqlite"
        with ResultsStore(db) as store:
            fill_sample_store(store)
        server = make_server(db=db, port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with Chromium(Path(tmp) / "chrome") as browser:
                browser.load(f"http://127.0.0.1:{server.server_address[1]}/")
                errors = browser.errors()
                browser.screenshot(args.out)
        finally:
            server.shutdown()
            server.server_close()
    print(f"wrote {args.out}" + (f"; page errors: {errors}" if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
