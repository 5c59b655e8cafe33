"""What runs on the device, and how the host builds and drives it.

- bundle.py: the versioned runtime bundle (edge-runner + libtvm_runtime/libtvm_ffi + loader.py).
- execute.py: run a compiled model through the bundle here (natively, or under qemu for aarch64).
- loader.py: pure-Python loader (numpy + tvm_ffi + libtvm_runtime.so); shipped inside the bundle.
- runner.cc: the C++ runner the bundle builds.

Nothing here imports the TVM compiler.
"""
from edge_sdk.runtime.bundle import bundle_archive, ensure_bundle, read_bundle_manifest, verify_bundle
from edge_sdk.runtime.execute import LocalRun, RunnerResult, run_compiled

__all__ = ["LocalRun", "RunnerResult", "bundle_archive", "ensure_bundle", "read_bundle_manifest", "run_compiled",
           "verify_bundle"]
