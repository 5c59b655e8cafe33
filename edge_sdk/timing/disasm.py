"""AArch64 disassembly with Debian's llvm-mc-14, each distinct instruction word once, cached on disk.

    llvm-mc-14 --disassemble -triple=aarch64 -mattr=+neon,...  (one "0xNN 0xNN 0xNN 0xNN" per line)

The cache ($EDGE_SDK_CACHE/timing/disasm-<tool>.tsv, "word<TAB>text" lines, appended under a lock)
keeps every word ever seen, so a block is disassembled only the first time any run executes it.
Words llvm-mc rejects (it warns with the input line) become "<invalid>".
"""
from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from edge_sdk.errors import MissingDependency, RuntimeFailure
from edge_sdk.runtime.bundle import cache_root

TOOL = "llvm-mc-14"
MATTR = "+neon,+fp-armv8,+crc,+fullfp16,+dotprod,+lse,+rcpc,+rdm"  # decode all; the model prices them
INVALID = "<invalid>"
_MEMO: dict[int, str] = {}


def _cache_file() -> Path:
    return cache_root() / "timing" / f"disasm-{TOOL}.tsv"


def _load_cache() -> None:
    f = _cache_file()
    if _MEMO or not f.is_file():
        return
    for line in f.read_text().splitlines():
        word, _, text = line.partition("\t")
        if text:
            _MEMO[int(word, 16)] = text


def _run_llvm_mc(words: list[int]) -> list[str]:
    tool = shutil.which(TOOL)
    if tool is None:
        raise MissingDependency(f"the A53 timing model disassembles with {TOOL}, which is not installed",
                                hint="apt-get install llvm-14")
    src = "".join(" ".join(f"0x{(w >> (8 * i)) & 0xff:02x}" for i in range(4)) + "\n" for w in words)
    proc = subprocess.run([tool, "--disassemble", "-triple=aarch64", f"-mattr={MATTR}"], input=src,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeFailure(f"{TOOL} failed (exit {proc.returncode}): {proc.stderr[-500:]}")
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"<stdin>:(\d+):\d+: warning: invalid instruction", proc.stderr)}
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip() and not ln.strip().startswith(".text")]
    it = iter(lines)
    out = [INVALID if i in bad else next(it, INVALID) for i in range(len(words))]
    if next(it, None) is not None:
        raise RuntimeFailure(f"{TOOL} printed more instructions than it was given ({len(lines)} for {len(words)})")
    return [" ".join(t.split("\t", 1)) if "\t" in t else t for t in out]


def disassemble(words: Iterable[int]) -> dict[int, str]:
    """word -> "mnemonic operands" for every word (32-bit little-endian A64 encodings)."""
    _load_cache()
    want = sorted({w for w in words if w not in _MEMO})
    if want:
        texts = _run_llvm_mc(want)
        f = _cache_file()
        f.parent.mkdir(parents=True, exist_ok=True)
        with open(f, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write("".join(f"{w:08x}\t{t}\n" for w, t in zip(want, texts, strict=True)))
        _MEMO.update(zip(want, texts, strict=True))
    return {w: _MEMO[w] for w in words}


def block_words(code: bytes) -> list[int]:
    """The A64 instruction words of a block's bytes (4 bytes each, little-endian)."""
    if len(code) % 4:
        raise RuntimeFailure(f"a translation block of {len(code)} bytes is not whole A64 instructions")
    return [int.from_bytes(code[i:i + 4], "little") for i in range(0, len(code), 4)]
