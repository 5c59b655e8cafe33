"""The AVX-512 VBMI table lookup (compiler/int8/lut.py) behind HARD_SWISH, LOGISTIC and swish: every int8
value, vector steps and a scalar tail, equal to the table the numpy reference computes (TFLite's kernels,
tests/test_int8_ops_tflite_ref.py), and the compiled HARD_SWISH model equal to LiteRT's reference kernels."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"


def _vbmi_target():
    from edge_sdk.compiler.int8.lut import has_vbmi
    from edge_sdk.targets import get_target

    tgt = get_target("host").tvm_target()
    with tgt:
        if not has_vbmi():
            pytest.skip("host without AVX-512 VBMI")
    return tgt


@pytest.mark.parametrize("shape", [(1, 16, 16, 1), (1, 7, 9, 13), (2, 3, 5, 64)])
def test_vbmi_lookup_equals_the_table_on_every_value(shape):
    import tvm

    from edge_sdk.compiler.int8 import glue

    tgt = _vbmi_target()
    rng = np.random.default_rng(sum(shape))
    table = rng.integers(-128, 128, 256).astype(np.int8)
    x = np.resize(rng.permutation(np.arange(-128, 128)), shape).astype(np.int8)  # all 256 values
    with tgt:
        k = glue.logistic(shape, table, name="lut")
        ir_lib = tvm.compile(tvm.IRModule({"lut": k.func}), target=tgt)
    assert "vpermi2var" in ir_lib.mod.inspect_source("ll")
    out = tvm.runtime.tensor(np.zeros(shape, np.int8))
    ir_lib["lut"](tvm.runtime.tensor(x), tvm.runtime.tensor(k.consts[0]), out)
    np.testing.assert_array_equal(out.numpy(), table[x.astype(np.int32) + 128])


def test_compiled_hard_swish_equals_tflite_reference():
    import tvm
    from tvm import relax

    from edge_sdk.compiler.int8.backend import compile_int8, example_input
    from edge_sdk.models.tflite_int8 import read_int8_tflite
    from edge_sdk.runtime.litert import run_tflite
    from edge_sdk.targets import get_target

    _vbmi_target()
    path = DATA / "edge_nets" / "ops" / "hard_swish.tflite"
    x = example_input(read_int8_tflite(path), seed=4)
    ex, params, _ = compile_int8(path, get_target("host"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    np.testing.assert_array_equal(got, run_tflite(path, x, reference_kernels=True))
