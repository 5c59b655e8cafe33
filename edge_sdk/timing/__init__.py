"""A Cortex-A53 timing model: modelled Raspberry Pi cycles and milliseconds from the code qemu executes.

    qemu-aarch64 + libtiming.so (edge_sdk/qemu/plugins/timing.c)   per block: bytes, counts, cache misses
      -> profile.PerInference                                    one inference: (K=3 - K=1) / 2
      -> disasm (llvm-mc-14) -> isa.Op -> pipeline.block_cycles  per block: A53 issue rules (a53.py)
      -> model.model_profile -> threads.combine                  per thread, per parallel region
      -> modelled_cycles, modelled_ms at the target's clock

The public entry points are in api.py (model_package, model_ncnn, ...); this package imports nothing
heavy at import time.
"""
