"""Per-layer profile of a host int8 package compiled from a converter-written full-int8 .tflite.

Before the int8 layer table listed its kernels, `run --profile` of such a package printed no layer at all
("layers 0.0000 ms + other (VM builtins)"). What is checked: the rows carry the model file's names (read
here with the `tflite` package, not our reader), each conv / depthwise / dense / pool row names a kernel the
runner timed, with a positive time, and conv + glue add up. No speed is asserted.
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def int8_package(data_dir, tmp_path_factory):
    from edge_sdk.cli import main

    pkg = tmp_path_factory.mktemp("int8prof") / "aw8.edgepkg"
    assert main(["compile", str(data_dir / "awkward_37x30_int8.tflite"), "--variant", "int8", "-o", str(pkg)]) == 0
    return pkg


def _op_output_names(path) -> list[str]:
    import tflite

    m = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sg = m.Subgraphs(0)
    return [sg.Tensors(sg.Operators(i).Outputs(0)).Name().decode() for i in range(sg.OperatorsLength())]


def test_int8_rows_list_kernels_and_profile_times_them(int8_package, data_dir):
    from edge_sdk.package import read_manifest
    from edge_sdk.run import run_package

    layers = read_manifest(int8_package)["layers"]
    names = _op_output_names(data_dir / "awkward_37x30_int8.tflite")
    assert [r["name"] for r in layers] == [f"{i}:{n}"[:80] for i, n in enumerate(names)]
    computing = [r for r in layers if r["op"] in ("conv2d", "depthwise_conv2d", "dense", "average_pool_2d")]
    assert len(computing) >= 5
    for r in computing:
        main = [k for k in r.get("kernels", []) if k["role"] == "main"]
        assert len(main) == 1, r

    res = run_package(int8_package, repeat=5, profile=True)
    assert res.golden_ok
    prof = res.layer_profile
    timed = {k["kernel"] for k in prof.kernels}
    by_name = {r["name"]: r for r in prof.layers}
    for r in computing:
        assert r["kernels"][0]["name"] in timed, (r["name"], sorted(timed))
        t = by_name[r["name"]]
        assert t["ms"] > 0 and t["conv_ms"] + t["glue_ms"] == pytest.approx(t["ms"])
        assert (t["conv_ms"] > 0) == (r["op"] != "average_pool_2d"), t
    assert sum(r["ms"] for r in prof.layers) > 0.3 * (sum(r["ms"] for r in prof.layers) + prof.other_ms)
    assert "layers 0.0000 ms" not in str(res)
