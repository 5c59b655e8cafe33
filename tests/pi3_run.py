"""Run a compiled Relax executable on the emulated Pi 3: cross-linked for aarch64, its params saved as the
runner reads them, executed once by our runner under qemu-aarch64 -cpu cortex-a53 (the kernel tests' harness).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import tvm

from edge_sdk.runtime.execute import LocalRun, run_compiled
from edge_sdk.targets import get_target


def run_executable_on_pi3(ex, arrays: list[np.ndarray]) -> np.ndarray:
    """ex's main(input, p0000, p0001, ...) on arrays[0] with arrays[1:] as the params; its output."""
    pi3 = get_target("pi3")
    with tempfile.TemporaryDirectory() as d:
        lib, pfile = Path(d) / "m.so", Path(d) / "params.bin"
        ex.export_library(str(lib), fcompile=pi3.compiler())
        tvm.runtime.save_param_dict_to_file({f"p{i:04d}": tvm.runtime.tensor(a) for i, a in enumerate(arrays[1:])},
                                            str(pfile))
        res = run_compiled(lib=lib, params=pfile, input=arrays[0], arch="aarch64", emulate_cpu="cortex-a53",
                           how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    return res.output


def run_prim_func_on_pi3(func, ins: list[np.ndarray], out_shape, out_dtype: str) -> np.ndarray:
    """One PrimFunc (compiled for pi3) on `ins`, all passed as params: a Relax main calls it behind a 1-byte
    dummy input (the runner's input is float32/int8/uint8 only); its output."""
    from tvm import relax

    bb = relax.BlockBuilder()
    rvars = [relax.Var(f"a{i}", relax.TensorType(list(v.shape), str(v.dtype))) for i, v in enumerate(ins)]
    dummy = relax.Var("x", relax.TensorType([1], "uint8"))
    with bb.function("main", [dummy, *rvars]):
        gv = bb.add_func(func, "kernel")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, rvars, relax.TensorType(list(out_shape), out_dtype))))
    ex = tvm.compile(bb.get(), target=get_target("pi3").tvm_target())
    return run_executable_on_pi3(ex, [np.zeros(1, np.uint8), *[np.ascontiguousarray(v) for v in ins]])
