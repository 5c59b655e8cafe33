"""edge-sdk bench: our variants vs LiteRT / ONNX Runtime / LCE, timed on the host or counted under qemu.

    from edge_sdk.bench import run_bench
    result = run_bench(model, variants=["float32", "int8"], peers=True)   # -> BenchResult
    result.rows, result.to_json()

CLI (the CLI package's bench module): `edge-sdk bench MODEL --variants float32,int8,w1a2 [--threads 1,2] [--peers] [--emulate pi3]`.
"""
from edge_sdk.bench.bench import BenchResult, BenchRow, run_bench

__all__ = ["BenchResult", "BenchRow", "run_bench"]
