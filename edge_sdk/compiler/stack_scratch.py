"""Kernel scratch on the stack, not a TVMBackendAllocWorkspace call per kernel call.

    ex = compile_vm(mod, tvm_target)     # tvm.compile: TVM's VM lowering and finalization, our TIR pipeline
    tvm.compile(mod, target=..., relax_pipeline=..., tir_pipeline=tir_pipeline())   # the same, by hand

TVM 0.27's LowerTVMBuiltin turns every buffer a kernel allocates into a TVMBackendAllocWorkspace /
TVMBackendFreeWorkspace pair, unless it is in "global" scope and under runtime::kMaxStackAlloca (1 KB).
In a kernel that pair costs a call into libtvm_runtime (DeviceAPI -> the thread's WorkspacePool: a search
of its free list, bookkeeping, and the free) and, inside a parallel loop, one pair per loop iteration:
fer int8 on pi3 had 16-byte "local" NEON temporaries of the int8 smull step allocated 900 times a call
of one conv, and 1-8 KB packed panels once per call of others.

The pass here runs right before LowerTVMBuiltin (our TIR pipeline: TVM's default s_tir lowering, then
this, then TVM's host finalization). Each constant-size buffer a CPU function allocates gets LowerTVMBuiltin's
own opt-out annotation ("disable_lower_builtin", tirx/transform.h kDisableLowerTVMBuiltin) while the
function's allocations fit STACK_BYTES. LLVM's codegen then emits the buffer as an alloca in the entry
block of the function that holds it: the kernel's compute function, or the closure of the parallel loop
around it, which each worker thread calls once per task on its own stack. So every thread's scratch is
separate, as with the per-thread WorkspacePool, and a buffer inside a loop is one stack slot reused by each
iteration (its lifetime ends with the iteration, as the workspace's did).

STACK_BYTES bounds one PrimFunc's stack scratch, all its buffers together (the allocas of the compute
function and of its parallel closure are live at once on the calling thread, which runs task 0): 64 KiB,
1/128 of the 8 MiB that Raspberry Pi OS (glibc) gives the main thread and every std::thread of TVM's pool
(RLIMIT_STACK 8 MiB). A kernel needing more keeps TVM's workspace calls for the buffers over the budget.
"""
from __future__ import annotations

import functools

import tvm
from tvm import tirx

TIR_PIPELINE = "edge_sdk_stack_scratch"
STACK_BYTES = 64 * 1024
DISABLE_LOWER_BUILTIN = "disable_lower_builtin"  # tirx/transform.h kDisableLowerTVMBuiltin
TVM_STACK_ALLOCA = 1024  # runtime/device_api.h kMaxStackAlloca: "global" buffers below it are allocas already


def _bytes(buf) -> int | None:
    """A buffer's size in bytes when its shape is constant, else None."""
    n = 1
    for d in buf.ty.shape:
        if not isinstance(d, tirx.IntImm):
            return None
        n *= int(d)
    t = tvm.DataType(str(buf.ty.dtype))
    return n * t.bits * t.lanes // 8


def _scope(buf) -> str:
    return str(buf.ty.storage_scope)


class _Budget:
    def __init__(self, limit: int):
        self.left = limit
        self.kept: list[tuple[str, int]] = []  # (buffer name, bytes) put on the stack


def _rewrite(stmt, budget: _Budget):
    """stmt with the AllocBuffers that fit `budget` annotated to stay allocas (program order)."""
    if isinstance(stmt, tirx.SeqStmt):
        seq = [_rewrite(s, budget) for s in stmt.seq]
        return stmt if all(a.same_as(b) for a, b in zip(seq, stmt.seq, strict=True)) else tirx.SeqStmt(seq, stmt.span)
    if isinstance(stmt, tirx.AttrStmt):
        body = _rewrite(stmt.body, budget)
        return stmt if body.same_as(stmt.body) else tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body, stmt.span)
    if isinstance(stmt, tirx.For):
        body = _rewrite(stmt.body, budget)
        return stmt if body.same_as(stmt.body) else tirx.For(
            stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding, stmt.annotations,
            stmt.step, stmt.span)
    if isinstance(stmt, tirx.While):
        body = _rewrite(stmt.body, budget)
        return stmt if body.same_as(stmt.body) else tirx.While(stmt.condition, body, stmt.span)
    if isinstance(stmt, tirx.IfThenElse):
        then = _rewrite(stmt.then_case, budget)
        other = _rewrite(stmt.else_case, budget) if stmt.else_case is not None else None
        same = then.same_as(stmt.then_case) and (other is None or other.same_as(stmt.else_case))
        return stmt if same else tirx.IfThenElse(stmt.condition, then, other, stmt.span)
    if isinstance(stmt, tirx.AllocBuffer):
        return _keep_on_stack(stmt, budget)
    return stmt


def _keep_on_stack(stmt, budget: _Budget):
    buf = stmt.buffer
    ann = dict(stmt.annotations or {})
    size = _bytes(buf)
    if DISABLE_LOWER_BUILTIN in ann or size is None or size <= 0:
        return stmt
    if _scope(buf) == "global" and size < TVM_STACK_ALLOCA:
        budget.left -= size  # TVM keeps it on the stack anyway: it counts against the budget
        budget.kept.append((str(buf.name), size))
        return stmt
    if size > budget.left:
        return stmt  # stays a TVMBackendAllocWorkspace pair
    budget.left -= size
    budget.kept.append((str(buf.name), size))
    return tirx.AllocBuffer(buf, {**ann, DISABLE_LOWER_BUILTIN: tirx.IntImm("bool", 1)}, stmt.span)


def _is_cpu(func) -> bool:
    target = func.attrs.get("target") if func.attrs is not None else None
    return target is not None and int(target.get_target_device_type()) == 1  # kDLCPU


@tvm.transform.module_pass(opt_level=0, name="edge_sdk.StackScratch")
def stack_scratch(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Each CPU PrimFunc's constant-size buffers on its stack while they fit STACK_BYTES (module docstring)."""
    out = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc) and _is_cpu(func):
            body = _rewrite(func.body, _Budget(STACK_BYTES))
            if not body.same_as(func.body):
                func = func.with_body(body)
        out[gv] = func
    return tvm.IRModule(out, attrs=mod.attrs) if any(not f.same_as(mod[g]) for g, f in out.items()) else mod


def _finalize_host():
    return tvm.ir.transform.Sequential([stack_scratch, tirx.transform.LowerTVMBuiltin(), tirx.transform.LowerIntrin()])


def _pipeline():
    from tvm.s_tir import pipeline as s_tir_pipeline

    lower, _host, device = s_tir_pipeline.default_s_tir_pipeline()
    return lower, _finalize_host, device


@functools.cache
def tir_pipeline() -> str:
    """Our TIR pipeline's name for tvm.compile(tir_pipeline=...), registered with TVM on the first call."""
    from tvm.tirx import compilation_pipeline

    compilation_pipeline.register_tir_pipeline(TIR_PIPELINE, _pipeline)
    return TIR_PIPELINE


def compile_vm(mod: tvm.IRModule, tvm_target):
    """tvm.compile of a Relax module with the stock dataflow-lowering and VM finalization passes (what every
    package compile uses) and our TIR pipeline."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    finish = tvm.transform.Sequential(cpu.dataflow_lower_passes(tvm_target) + cpu.finalize_passes(tvm_target))
    return tvm.compile(mod, target=tvm_target, relax_pipeline=finish, tir_pipeline=tir_pipeline())


WORKSPACE_HOOKS = ("__TVMBackendAllocWorkspace", "__TVMBackendFreeWorkspace")


def workspace_hooks(lib) -> list[str]:
    """The workspace hooks a compiled model.so defines (nm -D): TVM's codegen emits the hook, a pointer the
    runtime fills at load, only where a kernel calls TVMBackendAllocWorkspace / FreeWorkspace, so [] means
    no kernel of the library allocates scratch from the runtime."""
    import shutil
    import subprocess

    from edge_sdk.errors import MissingDependency

    nm = shutil.which("nm") or shutil.which("aarch64-linux-gnu-nm")
    if nm is None:
        raise MissingDependency("nm (binutils) is needed to list a library's symbols: apt-get install binutils")
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    return [h for h in WORKSPACE_HOOKS if h in names]
