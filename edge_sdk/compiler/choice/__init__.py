"""Per-layer schedule choice for Pi targets: every candidate schedule of a layer priced by the A53 clock.

A kernel family (float GEMM, float KxK conv, float depthwise, int8 GEMM, bitserial conv, ...) may offer
several schedules for the same layer: register tiles, loop orders, Winograd tile sizes, micro-kernel
steps. Which one is cheapest depends on the layer (gemm8's two 4x4x16 steps each win 2x on different
layers). At a Pi-target compile, for each distinct layer workload, compile/choice builds every
candidate alone as an aarch64 library, runs it under qemu with the timing plugin, prices it in
modelled Cortex-A53 cycles (edge_sdk/timing), checks its output against the numpy reference of that
workload (a wrong candidate is never kept), and keeps the cheapest. Results are cached
(compile/choice/cache.py) by workload + candidates' code + timing-model version + SDK version.
That pricing is `compile --choice`; by default compile applies the shipped choice records of the zoo
models instead (tune/choice_records.py, made by tools/make_choice_records.py), pricing nothing.

How a kernel offers an alternative schedule (three steps, no other file to touch):

1. The kernel builder takes a keyword that names the schedule, "default" meaning today's rule, e.g.

       def gemm(m, k, npad, simd, *, epi=NO_EPILOGUE, nr=None, name="edge_gemm", schedule="default"):
           order = _tile_order_rule(...) if schedule == "default" else {"rows_outer": ..., ...}[schedule]

2. The family lists its candidates for a workload, registered once in the kernel's own module (or in
   compile/choice/families.py, which registers today's families):

       from edge_sdk.compiler.choice import register_candidates

       @register_candidates("float.gemm")
       def _gemm_orders(workload: dict) -> list[str]:
           return ["rows_outer", "panels_outer"] if workload["k"] * 4 > 256 else []

   Several functions may register for one family (each kernel helper its own); candidates() returns
   "default" first, then every registered name once, in registration order. A name must be one the
   builder understands; a candidate whose PrimFunc is structurally equal to one already listed is
   priced once (the chooser dedupes by code).

3. Where the layer is emitted, the compiler describes it as a Site (below): its family, its workload
   (a JSON-able dict of everything the code depends on: shapes, epilogue, zero points, ...), a
   `build(schedule, name, acts)` that returns the kernel alone with all its inputs (Built), the
   logical activation inputs (Spec) and a numpy `reference(acts)`. `active().choose(site)` (the
   compile's Chooser, or DEFAULT_CHOOSER when the choice is off or the target is not a Pi) returns the
   schedule name to emit. Families that have a Site today: compile/choice/families.py (float) and
   compile/choice/int8.py.

Building one layer's workload alone with a named candidate (what the chooser and tests do):

       built = site.build("panels_outer", "edge_choice_kernel", site.random_acts(seed=0))
       built.func     # the scheduled PrimFunc;  built.args: every input array, in the PrimFunc's order
       compile/choice/standalone.py: price(site, "panels_outer", target) -> Priced(cycles, ok, ...)

The reference returns the output in the kernel's own layout without channel padding (e.g. (M, N) of a
GEMM whose kernel writes (M, Npad)); a candidate's output is cropped to the reference's shape and
compared with (rtol, atol) (0, 0 for integer kernels: bit-exact).
"""
from __future__ import annotations

import contextvars
import hashlib
import importlib
import json
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

DEFAULT = "default"

_CANDIDATES: dict[str, list[Callable[[dict], list[str]]]] = {}

# Every module that registers candidates (tests/test_choice_providers.py checks the list against the source):
# candidates() imports them first, so a family's list never depends on which kernels the caller happened to
# import (the int8 Winograd schedules were missing from int8.gemm8 unless compiler/int8/kernels was loaded).
PROVIDERS = (
    "edge_sdk.compiler.choice.families", "edge_sdk.compiler.choice.int8", "edge_sdk.compiler.ops.conv2d",
    "edge_sdk.compiler.ops.depthwise", "edge_sdk.compiler.int8.winograd_int8_f23",
    "edge_sdk.compiler.int8.winograd_int8_f23_blocked",
)
_loaded = False


def _load_providers() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in PROVIDERS:
            importlib.import_module(name)


def register_candidates(family: str):
    """Decorator: `fn(workload) -> [schedule names]`, added to the family's candidates (see module docstring)."""
    def deco(fn):
        _CANDIDATES.setdefault(family, []).append(fn)
        return fn
    return deco


def candidates(family: str, workload: dict) -> list[str]:
    """"default" then every registered schedule name for this workload, each once."""
    _load_providers()
    names = [DEFAULT]
    for fn in _CANDIDATES.get(family, []):
        names += [n for n in fn(workload) if n not in names]
    return names


def family_names() -> list[str]:
    _load_providers()
    return sorted(_CANDIDATES)


@dataclass(frozen=True)
class Spec:
    """An activation input of a layer: its shape and dtype (random values at choice time)."""

    shape: tuple[int, ...]
    dtype: str

    def random(self, rng: np.random.Generator) -> np.ndarray:
        if self.dtype.startswith("float"):
            return rng.standard_normal(self.shape).astype(self.dtype)
        info = np.iinfo(self.dtype)
        return rng.integers(info.min, int(info.max) + 1, size=self.shape).astype(self.dtype)


@dataclass
class Built:
    """One layer's kernel built alone with one schedule: the PrimFunc, every input (activations and
    constants, in the PrimFunc's argument order) and the output it writes."""

    func: object  # tvm.tirx.PrimFunc
    args: list[np.ndarray]
    out: Spec


@dataclass
class Site:
    """One layer as the chooser sees it (see the module docstring)."""

    family: str
    workload: dict
    build: Callable[[str, str, list[np.ndarray]], Built]
    acts: list[Spec]
    reference: Callable[[list[np.ndarray]], np.ndarray]
    rtol: float = 1e-4
    atol: float = 1e-4
    layer: str = ""  # the layer table's row name (for the manifest)
    extra: dict = field(default_factory=dict)

    def candidates(self) -> list[str]:
        return candidates(self.family, self.workload)

    def random_acts(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [s.random(rng) for s in self.acts]

    def key(self) -> str:
        """A digest of the family and workload (what the cache and the manifest name it by)."""
        text = json.dumps({"family": self.family, "workload": self.workload}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check(out: np.ndarray, ref: np.ndarray, *, rtol: float, atol: float) -> tuple[bool, float]:
    """(within tolerance?, max abs error) of a candidate's output cropped to the reference's shape."""
    if out.ndim != ref.ndim:
        out = out.reshape(ref.shape[:-1] + (-1,)) if out.size % max(1, int(np.prod(ref.shape[:-1]))) == 0 else out
    if out.ndim != ref.ndim or any(o < r for o, r in zip(out.shape, ref.shape)):
        return False, float("inf")
    crop = out[tuple(slice(0, r) for r in ref.shape)]
    err = np.abs(crop.astype(np.float64) - ref.astype(np.float64))
    worst = float(err.max()) if err.size else 0.0
    ok = bool(np.all(err <= atol + rtol * np.abs(ref.astype(np.float64)))) and bool(np.all(np.isfinite(crop)))
    return ok, worst


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("edge_sdk_choice", default=None)


@contextmanager
def using(chooser):
    """Within it, active() is `chooser` (compile_model sets it around the variant family's backend)."""
    token = _ACTIVE.set(chooser)
    try:
        yield chooser
    finally:
        _ACTIVE.reset(token)


def active():
    """The running compile's chooser, or DEFAULT_CHOOSER (no choice: every kernel's rule)."""
    return _ACTIVE.get() or DEFAULT_CHOOSER


class DefaultChooser:
    """No choice (compile --no-choice, or a target that is not a Pi): today's rule everywhere."""

    enabled = False

    def choose(self, site: Site) -> str:
        return DEFAULT

    def report(self) -> dict:
        return {"enabled": False}


DEFAULT_CHOOSER = DefaultChooser()
