"""Modelled Raspberry Pi time of a package or a peer, in one call (what bench, run and the demo use).

    model_package(pkg_path, target, threads) -> dict
    model_ncnn(param_path, target, threads) -> dict

Both run the code under qemu-aarch64 (our runner, or ncnn's wheel in the guest Python) with
libinsn.so and libtiming.so, K=1 and K=3 inferences, and price one inference with the A53 timing
model at the target's clock. The dict (model.model_profile) carries:
  modelled_cycles, modelled_ms           the figures (modelled Pi time, not a measurement)
  instructions                           executed per inference (counted)
  cycles_split                           issue / neon / load_store / dependency / branch /
                                         l2_stall / dram_stall / bandwidth / fork_join / ...
  misses, dram_bytes                     L1D, L1I, L2 misses and DRAM traffic per inference
  functions                              the most expensive functions (per layer for our packages)
  target, clock_ghz, threads, model      where and how
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from edge_sdk.errors import RuntimeFailure
from edge_sdk.timing.model import model_profile
from edge_sdk.timing.profile import PerInference


def _target(target):
    from edge_sdk.targets import get_target

    return get_target(target) if isinstance(target, str) else target


def price(pi: PerInference, target, *, threads: int = 1, layers: int = 12, files: dict | None = None) -> dict:
    """The model's figures for a per-inference profile at `target` (a Target or its name); files:
    basename -> local copy of a guest library, for its symbols."""
    tgt = _target(target)
    out = model_profile(pi, threads_n=threads, clock_ghz=tgt.clock_ghz, mem_gbps=tgt.mem_gbps, layers=layers,
                        symbol_files=files)
    return out | {"target": tgt.name}


def model_package(pkg_path: Path, target=None, threads: int = 1, *, layers: int = 12) -> dict:
    """Modelled Pi cycles and ms of one inference of a Pi package (target: the package's own by default)."""
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing.session import timing_session
    from edge_sdk.package import open_package

    with tempfile.TemporaryDirectory(prefix="edge-timing-") as tmp:
        pkg = open_package(Path(pkg_path), Path(tmp))
        tgt = _target(target or pkg.manifest["target"]["name"])
        with timing_session(target=tgt, layers=layers):
            count = E.count_runner(lib=pkg.member("model.so"), params=pkg.member("params.bin"),
                                   input=pkg.golden_input, cpu=tgt.qemu_cpu(), threads=threads)
    return _figures(count, pkg_path)


def model_ncnn(param: Path, target="pi3plus", threads: int = 1, *, layers: int = 12) -> dict:
    """Modelled Pi cycles and ms of one benchncnn-style inference of an ncnn .param (zero weights)."""
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing.session import timing_session

    tgt = _target(target)
    with timing_session(target=tgt, layers=layers):
        count = E.count_ncnn(Path(param), threads, cpu=tgt.qemu_cpu())
    return _figures(count, param)


def _figures(count, what) -> dict:
    if count.modelled is None:
        raise RuntimeFailure(f"{what}: the timing plugin produced no profile")
    return count.modelled | {"instructions_counted": count.per_inference}
