"""Lean bitserial packages: binary weights are stored bit-packed (1 bit per weight bit plane), the float
stem and head at 4 bytes, and params.bin is at most 1.05x the weights at their precision (issue 13).
The weights' size is computed here from the binarized network itself, not from the package."""
import numpy as np
import pytest

from edge_sdk.models.binarized import binarized_resnet18

tvm = pytest.importorskip("tvm")

# 32 classes: a whole number of the head's 16-wide float tiles, so the dense weight is not padded
OPTS = dict(alpha=0.5, resolution=64, classes=32, seed=3)


def _weights_bytes(net) -> dict:
    """Bytes of every weight at its precision: binary convs w_bits bits per weight, the float stem and
    head 4 bytes per value, each binary conv's glue (lshift, offset, rshift) as three int32 per channel."""
    binary = sum(c.w_codes.size * c.w_bits for c in net.convs) / 8
    floats = 4 * (net.stem.weight.size + net.stem.bias.size + net.fc_weight.size + net.fc_bias.size)
    glue = sum(3 * 4 * c.out_shape[3] for c in net.convs)
    return {"binary": binary, "float": floats, "glue": glue, "total": binary + floats + glue}


@pytest.mark.slow
def test_w1a2_package_stores_binary_weights_bit_packed(tmp_path):  # the float stem: its weights at 4 bytes
    from edge_sdk.cli import main
    from edge_sdk.package import open_package

    pkg = tmp_path / "r18_w1a2.edgepkg"
    assert main(["compile", "resnet18", "--alpha", str(OPTS["alpha"]), "--resolution", str(OPTS["resolution"]),
                 "--classes", str(OPTS["classes"]), "--seed", str(OPTS["seed"]), "--variant", "w1a2-float-stem",
                 "-o", str(pkg)]) == 0
    net = binarized_resnet18(a_bits=2, w_bits=1, stem="float32", **OPTS)  # the variant compiled above
    want = _weights_bytes(net)
    p = open_package(pkg, tmp_path / "open")
    params = tvm.runtime.load_param_dict_from_file(str(p.member("params.bin")))
    arrays = [v.numpy() for v in params.values()]
    # every binary conv's weight array holds exactly its bits: (KH, KW, C/W, B, O) words of W bits
    packed = sorted(a.nbytes for a in arrays if a.dtype.kind == "u")
    per_conv = sorted(int(np.prod(c.w_codes.shape)) * c.w_bits // 8 for c in net.convs)
    assert packed == per_conv
    stored = sum(a.nbytes for a in arrays)
    assert stored <= 1.05 * want["total"], (stored, want)
    assert p.member("params.bin").stat().st_size <= 1.05 * want["total"] + 4096  # + the file's headers
