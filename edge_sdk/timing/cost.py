"""Per-block A53 core cycles for a profile's blocks: disassemble once, decode, schedule, cache.

A block's cost is pipeline.block_cycles after its most frequent predecessor, plus its bounds
(what it would take if only dual issue, only the NEON datapath, or only the load/store pipe
limited it), which split the modelled cycles into issue / NEON / load-store / dependency terms.
Costs are cached on disk by (block bytes, predecessor bytes, core constants).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from edge_sdk.runtime.bundle import cache_root
from edge_sdk.timing import disasm, isa, pipeline
from edge_sdk.timing.a53 import A53

_DECODED: dict[int, isa.Op] = {}
_MEMORY_KEYS = ("l2_hit", "dram", "store_miss_stalls", "fork_join", "line_fills_in_flight", "pf_trigger", "pf_window",
                "pf_depth", "pf_streams", "ws_l1", "ws_l2")


@dataclass(frozen=True)
class BlockCost:
    cycles: np.ndarray      # marginal core cycles per execution
    issue: np.ndarray       # n / issue width
    neon: np.ndarray        # Q-form NEON ops + D-form / 2
    ls: np.ndarray          # load/store pipe cycles
    cond: np.ndarray        # bool: ends in a conditional branch
    instructions: np.ndarray


def decode_blocks(blocks: list) -> list[list[isa.Op]]:
    """Ops of every block (vaddr, n, code)."""
    words_of = [disasm.block_words(code) for _va, _n, code in blocks]
    need = {w for ws in words_of for w in ws if w not in _DECODED}
    if need:
        for w, text in disasm.disassemble(need).items():
            _DECODED[w] = isa.decode(text)
    return [[_DECODED[w] for w in ws] for ws in words_of]


def _core_key(c: A53) -> str:
    core = {k: v for k, v in asdict(c).items() if k not in _MEMORY_KEYS}
    return hashlib.sha1(json.dumps(core, sort_keys=True).encode()).hexdigest()[:12]


class _Cache:
    def __init__(self, c: A53):
        self.path = cache_root() / "timing" / f"blockcost-{_core_key(c)}.json"
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.dirty = False

    def get(self, key: str):
        return self.data.get(key)

    def put(self, key: str, value: int) -> None:
        self.data[key] = value
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{id(self)}.tmp")
        on_disk = json.loads(self.path.read_text()) if self.path.is_file() else {}
        tmp.write_text(json.dumps(on_disk | self.data))
        tmp.replace(self.path)


def _bounds(ops: list[isa.Op], c: A53) -> tuple[float, float, float]:
    neon = sum((1.0 if o.q else 0.5) for o in ops if o.cls in pipeline._NEON)
    ls = sum(pipeline.reservation(o, c)[2] for o in ops)
    return len(ops) / c.issue_width, neon, float(ls)


def block_costs(blocks: list, pred: np.ndarray, c: A53) -> BlockCost:
    """Cycles and bounds of every block, each after its most frequent predecessor."""
    ops = decode_blocks(blocks)
    cache = _Cache(c)
    n = len(blocks)
    cyc, issue, neon, ls = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    cond = np.zeros(n, dtype=bool)
    for i, (_va, _n, code) in enumerate(blocks):
        p = int(pred[i])
        pcode = b"self" if p == i else blocks[p][2] if p >= 0 else b""
        key = hashlib.sha1(code + b"|" + pcode).hexdigest()
        got = cache.get(key)
        if got is None:
            got = pipeline.block_cycles(ops[i], ops[i] if p == i else ops[p] if p >= 0 else None, c)
            cache.put(key, got)
        cyc[i] = got
        issue[i], neon[i], ls[i] = _bounds(ops[i], c)
        cond[i] = bool(ops[i]) and ops[i][-1].branch == "cond"
    cache.save()
    return BlockCost(cyc, issue, neon, ls, cond, np.array([len(o) for o in ops], dtype=float))
