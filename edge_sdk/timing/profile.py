"""libtiming.so's output (edge_sdk/qemu/plugins/timing.c) as data, and per-inference profiles from two runs.

A run's Profile holds every translation block (address + instruction bytes) and, per vCPU, the
block counters. `per_inference(k1, k3, ...)` is (run with K=3 - run with K=1) / 2 per block and
vCPU, matching blocks by address and bytes, as the instruction counts are made (start-up, loading
and exit cancel). It is what the cycle model prices, and what tests/data/timing/ commits.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import RuntimeFailure

# Per-block counters, in the plugin's C-line order after <vcpu> <id>.
FIELDS = ("exec", "taken", "pred", "ld_l1", "ld_l2", "st_l1", "st_l2", "if_l1", "if_l2", "pf_l1", "pf_l2", "st_w")
ADD = tuple(f for f in FIELDS if f != "pred")  # the counters that add up (pred is a block id + 1)
EPOCH_FIELDS = ("insns", "ld_l1", "ld_l2", "dram_lines")


@dataclass(frozen=True)
class Mapping:
    lo: int
    hi: int
    offset: int
    path: str


@dataclass
class Profile:
    """One plugin output file."""

    blocks: list  # id -> (vaddr, n_insns, code bytes)
    counts: dict  # vcpu -> ndarray (n_blocks, len(FIELDS)) int64
    epochs: dict  # vcpu -> ndarray (n_epochs, 4) int64: insns, load L1 misses, load L2 misses, DRAM lines
    maps: list    # Mapping, the guest's file mappings
    meta: dict = field(default_factory=dict)


def read_profile(path: Path) -> Profile:
    """Parse a libtiming.so output file (raises RuntimeFailure if it is cut short)."""
    blocks, rows, erows, maps, meta = [], [], [], [], {}
    with open(path) as f:
        for line in f:
            tag = line[:2]
            if tag == "C ":
                rows.append(line[2:].split())
            elif tag == "B ":
                _i, va, n, code = line[2:].split()
                blocks.append((int(va, 16), int(n), bytes.fromhex(code)))
            elif tag == "E ":
                erows.append([int(x) for x in line[2:].split()])
            elif tag == "M ":
                maps.append(line[2:].rstrip("\n"))
            elif tag == "T ":
                key, _, val = line[2:].strip().partition(" ")
                meta[key] = val
    if meta.get("end") != "1":
        raise RuntimeFailure(f"{path}: libtiming output is incomplete (the guest did not exit normally?)")
    counts: dict[int, np.ndarray] = {}
    arr = np.array(rows, dtype=np.int64)
    arr = arr.reshape(-1, arr.shape[1] if arr.ndim == 2 else 2 + len(FIELDS))
    if arr.shape[1] < 2 + len(FIELDS):  # an older plugin: its counters are a prefix of FIELDS
        arr = np.pad(arr, ((0, 0), (0, 2 + len(FIELDS) - arr.shape[1])))
    for v in np.unique(arr[:, 0]) if len(arr) else []:
        sel = arr[arr[:, 0] == v]
        m = np.zeros((len(blocks), len(FIELDS)), dtype=np.int64)
        m[sel[:, 1]] = sel[:, 2:]
        counts[int(v)] = m
    epochs: dict[int, np.ndarray] = {}
    n_epochs = int(meta.get("epochs", "0"))
    for v, e, *vals in erows:
        epochs.setdefault(v, np.zeros((n_epochs, len(EPOCH_FIELDS)), dtype=np.int64))[e] = vals
    return Profile(blocks, counts, epochs, parse_maps(maps), meta)


def parse_maps(lines: list[str]) -> list[Mapping]:
    """File-backed lines of /proc/self/maps (qemu user mode with guest_base 0: guest addresses)."""
    out = []
    for ln in lines:
        parts = ln.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        out.append(Mapping(lo, hi, int(parts[2], 16), parts[5].strip()))
    return out


@dataclass
class PerInference:
    """Blocks and per-vCPU counters of one inference: (K=3 - K=1) / 2."""

    blocks: list          # (vaddr, n_insns, code) of every block that ran in either run
    counts: dict          # vcpu -> float ndarray (n_blocks, len(ADD)), per inference
    pred: np.ndarray      # block index -> index of its most frequent predecessor (-1: none)
    maps: list
    epochs: dict = field(default_factory=dict)  # "k1"/"k3" -> {vcpu: ndarray}
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"blocks": [[va, n, code.hex()] for va, n, code in self.blocks],
                "counts": {str(v): c.round(3).tolist() for v, c in self.counts.items()},
                "pred": self.pred.tolist(), "maps": [m.__dict__ for m in self.maps],
                "epochs": {k: {str(v): e.tolist() for v, e in d.items()} for k, d in self.epochs.items()},
                "meta": self.meta}

    @staticmethod
    def from_json(d: dict) -> PerInference:
        return PerInference([(va, n, bytes.fromhex(c)) for va, n, c in d["blocks"]],
                            {int(v): _widen(np.array(c, dtype=float)) for v, c in d["counts"].items()},
                            np.array(d["pred"], dtype=np.int64), [Mapping(**m) for m in d["maps"]],
                            {k: {int(v): np.array(e, dtype=np.int64).reshape(-1, len(EPOCH_FIELDS))
                                 for v, e in x.items()}
                             for k, x in d.get("epochs", {}).items()}, d.get("meta", {}))

    def subset(self, keep: np.ndarray) -> PerInference:
        """The profile of the blocks where `keep` (bool per block) is true, predecessors remapped."""
        idx = np.nonzero(keep)[0]
        remap = np.full(len(self.blocks), -1, dtype=np.int64)
        remap[idx] = np.arange(len(idx))
        pred = np.where(self.pred[idx] >= 0, remap[np.maximum(self.pred[idx], 0)], -1)
        blocks = [self.blocks[i] for i in idx]
        maps = [m for m in self.maps if any(m.lo <= b[0] < m.hi for b in blocks)]  # the files of kept blocks
        return PerInference(blocks, {v: c[idx] for v, c in self.counts.items()}, pred, maps, self.epochs,
                            dict(self.meta))

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with gzip.open(tmp, "wt") as f:
            json.dump(self.to_json(), f, separators=(",", ":"))
        tmp.replace(path)

    @staticmethod
    def load(path: Path) -> PerInference:
        with gzip.open(path, "rt") as f:
            return PerInference.from_json(json.load(f))


def _widen(a: np.ndarray) -> np.ndarray:
    """Counters of an older profile (fewer columns: later counters appended) padded with zeros."""
    a = a.reshape(len(a), -1) if a.size else np.zeros((0, len(ADD)))
    return np.pad(a, ((0, 0), (0, len(ADD) - a.shape[1]))) if a.shape[1] < len(ADD) else a


def _index(p: Profile, keys: dict, blocks: list) -> np.ndarray:
    """Map p's block ids to indices in the merged block list (adding new ones)."""
    idx = np.empty(len(p.blocks), dtype=np.int64)
    for i, b in enumerate(p.blocks):
        k = (b[0], b[2])
        if k not in keys:
            keys[k] = len(blocks)
            blocks.append(b)
        idx[i] = keys[k]
    return idx


def per_inference(k1: Profile, k3: Profile, *, k_low: int = 1, k_high: int = 3, meta: dict | None = None,
                  keep_zero: bool = False) -> PerInference:
    """(k3 - k1) / (k_high - k_low) per block and vCPU; blocks that ran in neither inference are dropped."""
    keys: dict = {}
    blocks: list = []
    i1, i3 = _index(k1, keys, blocks), _index(k3, keys, blocks)
    add = [FIELDS.index(f) for f in ADD]
    counts = {}
    for v in sorted(set(k1.counts) | set(k3.counts)):
        m = np.zeros((len(blocks), len(ADD)))
        if v in k3.counts:
            np.add.at(m, i3, k3.counts[v][:, add])
        if v in k1.counts:
            np.subtract.at(m, i1, k1.counts[v][:, add])
        counts[v] = m / (k_high - k_low)
    pred = np.full(len(blocks), -1, dtype=np.int64)
    for v in sorted(k3.counts, reverse=True):  # vCPU 0 (the main thread) wins where threads disagree
        p = k3.counts[v][:, FIELDS.index("pred")]
        has = p > 0
        pred[i3[has]] = i3[p[has] - 1]
    if not keep_zero:
        total = sum((np.abs(c[:, 0]) for c in counts.values()), np.zeros(len(blocks)))
        keep = np.nonzero(total > 0)[0]
        remap = np.full(len(blocks), -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        blocks = [blocks[i] for i in keep]
        counts = {v: c[keep] for v, c in counts.items()}
        pred = np.where(pred[keep] >= 0, remap[np.maximum(pred[keep], 0)], -1)
    epochs = {"k1": k1.epochs, "k3": k3.epochs} if k1.epochs or k3.epochs else {}
    return PerInference(blocks, counts, pred, k3.maps, epochs, dict(meta or {}))
