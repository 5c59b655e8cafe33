"""What a stripped aarch64 ELF file still tells about its code: function extents, PLT stubs, direct calls.

A stripped shared library (the aarch64 wheel's libtvm_runtime.so) keeps only its dynamic symbols, so its hidden
functions have no name. But unwinding needs every function's extent, and the compiler writes one FDE (frame
description entry: pc_begin, pc_range) for each into .eh_frame (.eh_frame_hdr's table is its sorted index):
fde_extents. Format: the Linux Standard Base Core spec, "Exception Frames" (CIE / FDE, the 'zR' augmentation,
DW_EH_PE pointer encodings). A call to another library's function, or to an exported one of its own, goes
through a PLT stub (adrp x16 / ldr x17 / add / br x17: binutils' bfd/elfnn-aarch64.c, elfNN_aarch64_small_plt_entry)
whose GOT slot .rela.plt names: plt_names. direct_calls lists a code range's BL / B
targets (Arm ARM, "BL", "B": imm26 x 4, PC-relative). Read with the standard library only (no binutils):
ELF64 little-endian, what aarch64 Linux uses.
"""
from __future__ import annotations

import functools
import struct
from pathlib import Path

import numpy as np

# DW_EH_PE_* value formats (low nibble) -> struct format; 0x1 uleb128 and 0x9 sleb128 are read separately
_FORMATS = {0x0: "<Q", 0x2: "<H", 0x3: "<I", 0x4: "<Q", 0xA: "<h", 0xB: "<i", 0xC: "<q"}
_PCREL, _OMIT = 0x10, 0xFF


def _leb(data: bytes, pos: int, signed: bool = False) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if signed and byte & 0x40:
        value -= 1 << shift
    return value, pos


def _pointer(data: bytes, pos: int, enc: int, addr: int) -> tuple[int, int]:
    """(value, next pos) of a DW_EH_PE-encoded pointer at data[pos], whose own address is `addr`."""
    fmt = enc & 0x0F
    if fmt in (0x1, 0x9):
        value, end = _leb(data, pos, signed=fmt == 0x9)
    elif fmt in _FORMATS:
        end = pos + struct.calcsize(_FORMATS[fmt])
        (value,) = struct.unpack_from(_FORMATS[fmt], data, pos)
    else:
        raise ValueError(f"pointer encoding 0x{enc:02x} not understood")
    if enc & 0x70 == _PCREL:
        value += addr
    return value & 0xFFFF_FFFF_FFFF_FFFF, end


def _sections(data: bytes) -> dict[bytes, tuple[int, bytes]]:
    """{name: (address, bytes)} of an ELF64 LE file's sections ({} if it is not one)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return {}
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab, out = headers[shstrndx], {}
    for sh_name, sh_type, _flags, addr, offset, size in headers:
        start = strtab[4] + sh_name
        out[data[start:data.index(b"\0", start)]] = (addr, b"" if sh_type == 8 else data[offset:offset + size])  # 8: NOBITS
    return out


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime: float) -> dict[bytes, tuple[int, bytes]]:
    p = Path(path)
    return _sections(p.read_bytes()) if p.is_file() else {}


def _cie_encoding(eh: bytes, pos: int) -> int:
    """The FDE pointer encoding of the CIE whose body (after its id) starts at eh[pos] ('R'; absptr without)."""
    version = eh[pos]
    end = eh.index(b"\0", pos + 1)
    aug = eh[pos + 1:end].decode("ascii", "replace")
    pos = end + 1
    if "eh" in aug:
        pos += 8
    _, pos = _leb(eh, pos)               # code alignment
    _, pos = _leb(eh, pos, signed=True)  # data alignment
    pos = pos + 1 if version == 1 else _leb(eh, pos)[1]  # return address register
    if not aug.startswith("z"):
        return 0x00
    _, pos = _leb(eh, pos)               # augmentation data length
    for ch in aug[1:]:
        if ch == "R":
            return eh[pos]
        if ch == "P":
            pos = _pointer(eh, pos + 1, eh[pos] & 0x0F, 0)[1]  # the personality routine: skipped
        elif ch == "L":
            pos += 1
        elif ch not in "SB":
            break
    return 0x00


@functools.lru_cache(maxsize=16)
def fde_extents(path: str, mtime: float = 0.0) -> tuple[tuple[int, int], ...]:
    """(start, end) ELF addresses of every FDE of the file's .eh_frame, by start; () if the file has none or
    is not an ELF64 little-endian file. mtime only keys the cache."""
    found = _read(path, mtime).get(b".eh_frame")
    if found is None:
        return ()
    base, eh = found
    out, pos, encodings = set(), 0, {}
    while pos + 8 <= len(eh):
        length, = struct.unpack_from("<I", eh, pos)
        if length == 0:
            break
        head = 12 if length == 0xFFFF_FFFF else 4
        if head == 12:
            length, = struct.unpack_from("<Q", eh, pos + 4)
        body, nxt = pos + head, pos + head + length
        cie_id, = struct.unpack_from("<I", eh, body)
        if cie_id == 0:
            encodings[pos] = _cie_encoding(eh, body + 4)
        else:
            cie = body - cie_id  # the CIE pointer: this field's offset from its CIE's start
            if cie not in encodings:  # a CIE not read yet: read it where it is
                cie_head = 12 if struct.unpack_from("<I", eh, cie)[0] == 0xFFFF_FFFF else 4
                encodings[cie] = _cie_encoding(eh, cie + cie_head + 4)
            enc = encodings[cie]
            if enc != _OMIT:
                start, q = _pointer(eh, body + 4, enc, base + body + 4)
                size, _ = _pointer(eh, q, enc & 0x0F, 0)
                if size:
                    out.add((start, start + size))
        pos = nxt
    return tuple(sorted(out))


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


@functools.lru_cache(maxsize=16)
def plt_names(path: str, mtime: float = 0.0) -> dict[int, tuple[str, int]]:
    """{PLT stub address: (the symbol its GOT slot is bound to, as .dynsym spells it (mangled), its address in
    this file or 0 if another file defines it)} of an aarch64 ELF file ({} without a .plt). mtime only keys
    the cache."""
    sec = _read(path, mtime)
    if not {b".plt", b".rela.plt", b".dynsym", b".dynstr"} <= set(sec):
        return {}
    dynstr, dynsym = sec[b".dynstr"][1], sec[b".dynsym"][1]
    slot = {}
    rela = sec[b".rela.plt"][1]
    for i in range(len(rela) // 24):
        r_offset, r_info, _addend = struct.unpack_from("<QQq", rela, 24 * i)
        st_name, _info, _other, shndx, value = struct.unpack_from("<IBBHQ", dynsym, 24 * (r_info >> 32))
        slot[r_offset] = (dynstr[st_name:dynstr.index(b"\0", st_name)].decode("ascii", "replace"),
                          value if shndx else 0)
    base, plt = sec[b".plt"]
    out = {}
    for pos in range(0, len(plt) - 7, 4):  # adrp x16, page ; ldr x17, [x16, #off]
        adrp, ldr = struct.unpack_from("<II", plt, pos)
        if adrp & 0x9F00001F != 0x90000010 or ldr & 0xFFC003FF != 0xF9400211:
            continue
        pc = base + pos
        page = (pc & ~0xFFF) + (_sext(((adrp >> 5) & 0x7FFFF) << 2 | (adrp >> 29) & 3, 21) << 12)
        got = page + ((ldr >> 10) & 0xFFF) * 8
        if got in slot:
            out[pc] = slot[got]
    return out


@functools.lru_cache(maxsize=16)
def branch_edges(path: str, mtime: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(pc, target) ELF addresses of every BL and B instruction in the file's .text (int64 arrays). mtime only
    keys the cache."""
    addr, text = _read(path, mtime).get(b".text", (0, b""))
    words = np.frombuffer(text, dtype="<u4", count=len(text) // 4)
    branch = (words & 0x7C000000) == 0x14000000  # B (0x14...) and BL (0x94...): imm26
    pcs = addr + 4 * np.nonzero(branch)[0].astype(np.int64)
    imm = (words[branch] & 0x03FFFFFF).astype(np.int64)
    return pcs, pcs + 4 * np.where(imm & 0x02000000, imm - (1 << 26), imm)
