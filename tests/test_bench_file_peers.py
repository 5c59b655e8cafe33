"""`edge-sdk bench FILE --peers` on a model the user brought: the peer engine runs that very file (LiteRT the
.tflite at the precision it holds, ONNX Runtime the .onnx), side by side with our package of it. The
figures only have to exist; the rows must name the file the peer ran and agree on the output shape."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.bench import peers as P
from bench_driver import bench_json

DATA = Path(__file__).parent / "data" / "edge_nets"
pytestmark = pytest.mark.slow  # compiles a (small) model per case


def _bench(argv, capsys) -> dict:
    code, js = bench_json([*argv, "--peers", "--warmup", "1", "--repeat", "2", "--min-time-ms", "0", "--rounds", "1",
                           "--json", "--no-store"], capsys)
    assert code == 0
    return js


@pytest.mark.parametrize("name,variant,engine", [
    ("mobilenet_v3_small_0.15_64_float.tflite", "float32", "litert"),
    ("mobilenet_v3_small_0.15_64_int8.tflite", "int8", "litert"),
    ("onnx/mnasnet_0.1_64_opset17.onnx", "float32", "onnxruntime")])
def test_the_users_file_is_its_own_peer(isolated, capsys, name, variant, engine):
    src = DATA / name
    js = _bench([str(src), "--variants", variant], capsys)
    key = js["model"]["peer_key"]
    assert key.startswith(P.FILE_KEY)
    peers = [r for r in js["rows"] if r["engine"] != "edge-sdk"]
    assert [(r["engine"], r["variant"], r["status"]) for r in peers] == [(engine, variant, "ok")]
    ran = Path(peers[0]["package"])
    assert ran.parent == isolated / "peers" / key and ran.read_bytes() == src.read_bytes()
    assert peers[0]["latency_ms"]["median"] > 0
    ours = [r for r in js["rows"] if r["engine"] == "edge-sdk"]
    assert [(r["variant"], r["status"]) for r in ours] == [(variant, "ok")]
