"""compiler/stack_scratch: a kernel's constant-size scratch is a stack alloca, not TVMBackendAllocWorkspace calls.

The kernel here keeps a whole row of int32 scratch per iteration of a parallel loop (compute_at), then reads
it back permuted: threads sharing one scratch buffer would read each other's rows and the sums would be wrong.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

ROWS = 16
HOOK = "@__TVMBackendAllocWorkspace"  # the LLVM global a kernel loads to call TVMBackendAllocWorkspace


def _scratch_kernel(width: int, *, rows_of_scratch: int = 1):
    """C[i] = sum_k B[i, k] * B'[i, (7k + 3) % width], B[i, :] = A[i, :] * 2 + i (and B'[i, :] = A[i, :] * 3 - i
    with rows_of_scratch 2, else B' = B) computed per row of the parallel loop into (1, width) int32 buffers:
    4 * width bytes of scratch each, per iteration."""
    import tvm
    from tvm import te

    a = te.placeholder((ROWS, width), "int32", name="A")
    b = te.compute((ROWS, width), lambda i, j: a[i, j] * 2 + i, name="B")
    b2 = te.compute((ROWS, width), lambda i, j: a[i, j] * 3 - i, name="B2") if rows_of_scratch == 2 else b
    k = te.reduce_axis((0, width), name="k")
    c = te.compute((ROWS,), lambda i: te.sum(b[i, k] * b2[i, (k * 7 + 3) % width], axis=k), name="C")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, c]))
    row = sch.get_loops(sch.get_sblock("C"))[0]
    sch.parallel(row)
    for name in ("B", "B2")[:rows_of_scratch]:
        sch.compute_at(sch.get_sblock(name), row)
    return sch.mod["main"]


def _reference(x: np.ndarray, *, rows_of_scratch: int = 1) -> np.ndarray:
    i = np.arange(ROWS)[:, None]
    b = x.astype(np.int64) * 2 + i
    b2 = x.astype(np.int64) * 3 - i if rows_of_scratch == 2 else b
    perm = (np.arange(x.shape[1]) * 7 + 3) % x.shape[1]
    return (b * b2[:, perm]).sum(axis=1).astype(np.int32)  # int32 wrap-around as the kernel's


def _build(width: int, *, ours: bool, rows_of_scratch: int = 1):
    import tvm

    from edge_sdk.compiler import stack_scratch
    from edge_sdk.targets import get_target

    extra = {"tir_pipeline": stack_scratch.tir_pipeline()} if ours else {}
    with get_target("host").tvm_target() as t:
        return tvm.compile(tvm.IRModule({"main": _scratch_kernel(width, rows_of_scratch=rows_of_scratch)}), target=t,
                           **extra)


def _run(lib, width: int, threads: int) -> np.ndarray:
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(0, threads)
    try:
        x = np.random.default_rng(width).integers(-1000, 1000, (ROWS, width), dtype=np.int32)
        out = tvm.runtime.tensor(np.zeros(ROWS, np.int32))
        lib["main"](tvm.runtime.tensor(x), out)
        return x, out.numpy()
    finally:
        tvm.get_global_func("runtime.config_threadpool")(0, 1)


def test_scratch_over_tvms_1kb_limit_is_on_the_stack_and_separate_per_thread():
    from edge_sdk.compiler.stack_scratch import STACK_BYTES, TVM_STACK_ALLOCA

    width = 1024  # 4 KB a row: over TVM's kMaxStackAlloca, under our budget
    assert TVM_STACK_ALLOCA < 4 * width <= STACK_BYTES
    assert HOOK in _build(width, ours=False).mod.inspect_source("ll")  # TVM's pipeline: a workspace per row
    lib = _build(width, ours=True)
    assert HOOK not in lib.mod.inspect_source("ll")
    for threads in (1, 4):
        x, got = _run(lib, width, threads)
        np.testing.assert_array_equal(got, _reference(x))


def test_scratch_over_the_budget_keeps_the_workspace_calls():
    from edge_sdk.compiler.stack_scratch import STACK_BYTES

    width = STACK_BYTES // 4 + 16  # one row is over the budget
    lib = _build(width, ours=True)
    assert HOOK in lib.mod.inspect_source("ll")
    x, got = _run(lib, width, 2)
    np.testing.assert_array_equal(got, _reference(x))


def test_buffers_fill_the_budget_in_program_order():
    """Two 40 KiB scratch rows in one kernel: the first goes on the stack, the second (over the 24 KiB left)
    stays a workspace; the sums are right either way."""
    from edge_sdk.compiler.stack_scratch import STACK_BYTES

    width = 10 * 1024
    assert 4 * width <= STACK_BYTES < 2 * 4 * width
    loads = "load ptr, ptr " + HOOK
    assert _build(width, ours=False, rows_of_scratch=2).mod.inspect_source("ll").count(loads) == 2
    lib = _build(width, ours=True, rows_of_scratch=2)
    assert lib.mod.inspect_source("ll").count(loads) == 1
    x, got = _run(lib, width, 2)
    np.testing.assert_array_equal(got, _reference(x, rows_of_scratch=2))


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("qemu-aarch64") is None, reason="qemu-user not installed")
def test_pi3_float_package_has_no_workspace_calls_and_matches_golden_at_4_threads(pi3_package, tmp_path):
    """The session's small MobileNetV1 float32 pi3 package (main before stack_scratch: both workspace hooks
    in its model.so): no kernel allocates from the runtime, and 4 threads still give the golden output."""
    from edge_sdk.compiler.stack_scratch import workspace_hooks
    from edge_sdk.package import open_package
    from edge_sdk.run import run_package

    assert workspace_hooks(open_package(pi3_package, tmp_path).member("model.so")) == []
    res = run_package(pi3_package, repeat=1, warmup=0, threads=4, model=False)
    assert res.emulated and res.golden_ok, res.golden_max_abs_err
