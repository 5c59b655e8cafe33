"""A strip of NT 4x4x16 int8 tiles in one call of A64 assembly for the Cortex-A53: gemm_int8_a53_ldr64's tile,
software-pipelined across tiles.

The strip: NT tiles that share one operand (rows outer: one row tile's A against NT channel tiles' W panels;
weights outer: one channel tile's W against NT row tiles' A), the other operand contiguous across the tiles
(gemm_int8_smull_neon's packings: W (CO/4, NB, 4, 16), A (M/4, NB, 4, 16)). C is the strip's 4 x 4NT (or
4NT x 4) int32 sums, stored, not added (as gemm_int8_a53_ldr64: the zeroed C is what the intrinsic's C += is on).

Why: one call a tile (gemm_int8_a53_ldr64) starts every tile from an empty pipeline and ends it with the lane
sums' dependency chain: the first smull waits for 128-bit operand loads (GCC f_load_many 4 cycles, a 128-bit
load holds the load pipe 2 cycles), the last sadalp -> addp -> addp -> str run back to back (a53.py
vec_int_wide 3 for ADDP, fp_alu 4 for SADALP), and the call's C tile goes through the stack to the requantize.
Here the pair sequence (smull, smlal2 two slots later, the accumulate two slots after that) runs on from one
tile into the next: tile t+1's step-0 operands load during tile t's last step (as every step's operands load
during the step before, ncnn's `ldr d` / `ldr x` / `ins` pattern), and tile t's lane sums (addp twice a row)
and stores issue between tile t+1's first multiplies, each row's a few slots after its last accumulate and
before tile t+1's first accumulate into those registers (16 slots later). Register use is the tile's: 16
accumulators v16-v31, temporaries v12-v15, A rows v8-v11, two weight sets v0-v3 / v4-v7 by the step's
parity over the whole strip (an odd NB alternates the sets' order from tile to tile: the tile loop's body
is then two tiles).

Code: tile 0 (no previous tile), a loop over the middle tiles (one or two a body), the last tile (no next
operands to load), then the last tile's lane sums. Inside each tile the steps between the previous tile's
lane sums and the next tile's loads are gemm_int8_a53_ldr64's two-step loop. aarch64 only.
"""
from __future__ import annotations

from edge_sdk.compiler.int8.gemm_int8_a53_ldr64 import _A, _GPR, _T, _W

NAME = "edge_a53_i8gemm_strip_4x4x16"
SCHEDULE_STEP = "strip"
_HEAD = 20          # the inner loop starts at this slot of a tile (after the previous tile's lane sums)
_SHARED = "x16"     # the shared operand's cursor (its base register stays put)
_CST, _S2, _S3, _TILES, _INNER = "x14", "x15", "x8", "x17", "x13"


def _loads_of_tile(nb: int, nxt: bool) -> dict[int, tuple[int, str, int, int]]:
    """tile slot -> (vector register base index (set / row), operand 'A'|'W', tile (0 this, 1 next), byte offset
    in that tile's blocks): steps 1..nb-1 as gemm_int8_a53_ldr64._loads, and with nxt the next tile's step 0
    (in this tile's last step, its row 3 in the next tile's slot 2)."""
    out = {}
    for k in range(1, nb + (1 if nxt else 0)):
        s0, tile, kk = 16 * (k - 1), (1 if k == nb else 0), k % nb
        for j in range(4):
            out[s0 + 3 + j] = (j, "W", tile, kk * 64 + j * 16)
        for i, o in enumerate((7, 10, 14)):
            out[s0 + o] = (i, "A", tile, kk * 64 + i * 16)
        out[16 * k + 2] = (3, "A", tile, kk * 64 + 48)
    return out


def _row_done(nb: int, i: int) -> int:
    """The tile slot of row i's last accumulate (pair 16(nb-1) + 4i + 3)."""
    return 16 * nb - 9 + 4 * i


class _Strip:
    """The kernel text for one (nb, nt, half_tail, shared operand)."""

    def __init__(self, nb: int, nt: int, half_tail: bool, shared: str):
        if nb < 2 or nt < 1 or shared not in ("A", "W"):
            raise ValueError(f"strip kernel: nb {nb} >= 2, nt {nt} >= 1, shared {shared!r} in A/W")
        self.nb, self.nt, self.half, self.shared = nb, nt, half_tail, shared
        self.reg = {"A": "$0", "W": "$1"}
        self.moving = "W" if shared == "A" else "A"
        self.n_loop = self._loop_count()

    # -- the per-tile timeline ---------------------------------------------------------------------
    def _loop_count(self) -> int:
        """Two-step inner loop iterations: each holds 16 of this tile's loads and ends before its last step."""
        nb, loads, n = self.nb, _loads_of_tile(self.nb, True), 0
        while _HEAD + 32 * (n + 1) <= 16 * (nb - 1) and sum(
                1 for s in range(_HEAD + 32 * n, _HEAD + 32 * (n + 1)) if s in loads and loads[s][2] == 0) == 16:
            n += 1
        return n

    def _in_loop(self, s: int) -> bool:
        return _HEAD <= s < _HEAD + 32 * self.n_loop

    def _adv(self, s: int) -> int:
        """Bytes the tile's cursors have advanced by at tile slot s (the inner loop adds 128 an iteration;
        inside the loop, offsets are from the iteration's start)."""
        if s < _HEAD:
            return 0
        if self._in_loop(s):
            return 128 * ((s - _HEAD) // 32)
        return 128 * self.n_loop

    def _qops(self, tile: int, s: int) -> list[tuple[str, str]]:
        """(kind, text) of tile's NEON ops in its slot s: pair s-4's accumulate, s-2's smlal2, s's smull."""
        nb, out = self.nb, []
        for p, kind in ((s - 4, "acc"), (s - 2, "smlal2"), (s, "smull")):
            if not 0 <= p < 16 * nb:
                continue
            k = p // 16
            if kind == "smlal2" and self.half and k == nb - 1 and not self._in_loop(s):
                continue
            i, t = p % 16 // 4, f"v{_T[p % 4]}"
            w = _W[(tile * nb + k) % 2][p % 4]
            if kind == "smull":
                out.append((kind, f"smull {t}.8h, v{_A[i]}.8b, v{w}.8b"))
            elif kind == "smlal2":
                out.append((kind, f"smlal2 {t}.8h, v{_A[i]}.16b, v{w}.16b"))
            else:
                out.append((kind, f"{'saddlp' if k == 0 else 'sadalp'} v{16 + p % 16}.4s, {t}.8h"))
        return out

    def _reduce(self, s: int) -> list[str]:
        """The tile's lane sums and stores in its slot s (each row 2-6 slots after its last accumulate)."""
        out = []
        for i in range(4):
            a, done = 16 + 4 * i, _row_done(self.nb, i)
            if s == done + 2:
                out += [f"addp v{a}.4s, v{a}.4s, v{a + 1}.4s", f"addp v{a + 2}.4s, v{a + 2}.4s, v{a + 3}.4s"]
            elif s == done + 4:
                out.append(f"addp v{a}.4s, v{a}.4s, v{a + 2}.4s")
            elif s == done + 6:
                off = ("", ", $3", f", {_S2}", f", {_S3}")[i]
                out.append(f"str q{a}, [{_CST}{off}]")
                if i == 3:
                    out.append(f"add {_CST}, {_CST}, #16" if self.shared == "A" else f"add {_CST}, {_CST}, {_S2}, lsl #1")
        return out

    def _load(self, tile: int, s: int, nxt: bool):
        """(vector register, base register, immediate, half form, general register) of the tile's load in its slot s, or None.
        Slots past the tile's end (16nb on) are in the next tile's code, where the cursors restarted."""
        loads = _loads_of_tile(self.nb, nxt)
        got = loads.get(s)
        if got is None:
            return None
        idx, op, rel, off = got
        g = _GPR[sorted(loads).index(s) % 4]  # by the load's place in the tile: the same in every tile and iteration
        v = _A[idx] if op == "A" else _W[(tile * self.nb + (off // 64 if rel == 0 else self.nb)) % 2][idx]
        half = self.half and rel == 0 and off >= (self.nb - 1) * 64 and not self._in_loop(s)
        if s >= 16 * self.nb:  # the next tile's row 3, from the next tile's cursors at their start
            base = _SHARED if op == self.shared else self.reg[op]
            return v, base, off, False, g
        adv = self._adv(s)
        if op == self.shared:
            if rel:  # the next tile's step 0 of the shared operand: from its base
                return v, self.reg[op], off, False, g
            return v, _SHARED, off - adv, half, g
        return v, self.reg[op], rel * self.nb * 64 + off - adv, half, g

    # -- emission ------------------------------------------------------------------------------------
    def _tile_code(self, tile: int, prev: bool, nxt: bool, pending: list, last: bool) -> list[str]:
        """The code of tile `tile`'s slots 0..16nb-1, with the previous tile's slots 16nb.. (prev) in them; the
        inner loop's iterations are checked to be the same text and emitted once."""
        nb, mv = self.nb, self.reg[self.moving]
        last_load = max(_loads_of_tile(nb, nxt))

        def slot_lines(s: int, pend: list) -> list[str]:
            q = self._qops(tile, s)
            load, red = self._load(tile, s, nxt), []
            if prev:
                q = [*self._qops(tile - 1, s + 16 * nb), *q]
                red = self._reduce(s + 16 * nb)
                got = self._load(tile - 1, s + 16 * nb, True)
                assert load is None or got is None, "one load a slot"
                load = load or got
            q.sort(key=lambda kq: ("acc", "smlal2", "smull").index(kq[0]))
            return self._slot([t for _k, t in q] + red, load, pend, flush=last and s > last_load) + self._reduce(s)

        lines, s = [], 0
        while s < 16 * nb:
            if self.n_loop and s == _HEAD:
                entry = list(pending)
                body = [ln for s2 in range(_HEAD, _HEAD + 32) for ln in slot_lines(s2, pending)]
                assert pending == entry, "the inner loop's back edge must carry the ins its body starts with"
                for m in range(1, self.n_loop):
                    p2 = list(entry)
                    again = [ln for s2 in range(_HEAD + 32 * m, _HEAD + 32 * (m + 1)) for ln in slot_lines(s2, p2)]
                    assert again == body, "the inner loop's body must be the same every iteration"
                lines += [f"mov {_INNER}, #{self.n_loop}", "1:", *body, f"add {mv}, {mv}, #128",
                          f"add {_SHARED}, {_SHARED}, #128", f"subs {_INNER}, {_INNER}, #1", "b.ne 1b"]
                s = _HEAD + 32 * self.n_loop
                continue
            lines += slot_lines(s, pending)
            s += 1
        return lines

    def _slot(self, ops: list[str], load, pending: list, flush: bool) -> list[str]:
        """A slot's lines: its load beside its NEON ops (ldr d, the previous load's ins, one NEON op, ldr x, the
        rest; each ins waits for the next ldr d to pair with)."""
        if load is None:
            if flush and pending:
                out = [*pending, *ops]
                pending.clear()
                return out
            return list(ops)
        v, base, off, half, g = load
        if half:
            out = [f"ldr d{v}, [{base}, #{off}]", *pending, *ops]
            pending.clear()
            return out
        out = [f"ldr d{v}, [{base}, #{off}]", *pending, *ops[:1], f"ldr {g}, [{base}, #{off + 8}]", *ops[1:]]
        pending[:] = [f"ins v{v}.d[1], {g}"]
        return out

    def lines(self) -> list[str]:
        nb, nt = self.nb, self.nt
        sh, mv = self.reg[self.shared], self.reg[self.moving]
        out = [f"mov {_CST}, $2", f"lsl {_S2}, $3, #1", f"add {_S3}, {_S2}, $3", f"mov {_SHARED}, {sh}"]
        a0, w0 = (_SHARED, mv) if self.shared == "A" else (mv, _SHARED)
        out += [f"ldp q0, q1, [{w0}]", f"ldp q8, q9, [{a0}]", f"ldp q2, q3, [{w0}, #32]", f"ldp q10, q11, [{a0}, #32]"]
        pending: list[str] = []
        # the pointer update at a tile's end: the moving operand on to the next tile, the shared cursor back
        step = f"add {mv}, {mv}, #{nb * 64 - 128 * self.n_loop}"
        reset = f"mov {_SHARED}, {sh}"
        out += self._tile_code(0, False, nt > 1, pending, nt == 1)
        if nt == 1:
            return out + pending + self._tail(nt - 1)
        out += [step, reset]
        unit = 1 if nb % 2 == 0 else 2
        middle = nt - 2
        reps, rest = divmod(middle, unit)
        if reps:
            entry = list(pending)
            body = []
            for u in range(unit):
                body += self._tile_code(1 + u, True, True, pending, False) + [step, reset]
            if reps > 1:
                assert pending == entry, "the tile loop's back edge must carry the ins its body starts with"
                again = []
                p2 = list(entry)
                for u in range(unit):
                    again += self._tile_code(1 + unit + u, True, True, p2, False) + [step, reset]
                assert again == body, "the tile loop's body must be the same every iteration"
                out += [f"mov {_TILES}, #{reps}", "2:", *body, f"subs {_TILES}, {_TILES}, #1", "b.ne 2b"]
            else:
                out += body
        t = 1 + reps * unit
        for _ in range(rest):
            out += self._tile_code(t, True, True, pending, False) + [step, reset]
            t += 1
        out += self._tile_code(t, True, False, pending, True)
        return out + pending + self._tail(t)

    def _tail(self, tile: int) -> list[str]:
        """The last tile's slots from 16nb on: its last accumulates and lane sums."""
        lines = []
        for s in range(16 * self.nb, 16 * self.nb + 12):
            lines += [t for _k, t in self._qops(tile, s)] + self._reduce(s)
        return lines


def kernel_lines(nb: int, nt: int, half_tail: bool = False, shared: str = "A") -> list[str]:
    """The asm for a strip of nt tiles of nb 16-byte blocks: $0 A, $1 W (the moving one advanced), $2 C,
    $3 C's row stride in bytes. shared: the operand all tiles share ("A": rows outer, "W": weights outer)."""
    return _Strip(nb, nt, half_tail, shared).lines()


def func_name(nb: int, nt: int, half_tail: bool, shared: str) -> str:
    """The kernel's symbol (and tensor intrinsic's name): NB blocks, NT tiles, "h" a half tail, the shared operand."""
    return f"{NAME}_nb{nb}_nt{nt}{'h' if half_tail else ''}_{shared.lower()}"


def llvm_ir(nb: int, nt: int, half_tail: bool, shared: str) -> str:
    """`i32 NAME(ptr C, ptr A, ptr W, i32 c_row_stride_ints)` as LLVM IR: one inline-asm statement."""
    text = "\\0A".join(kernel_lines(nb, nt, half_tail, shared))
    clobbers = ",".join([f"~{{x{i}}}" for i in (8, 9, 10, 11, 12, 13, 14, 15, 16, 17)] + [f"~{{v{i}}}" for i in range(32)]
                        + ["~{memory}", "~{cc}"])
    return (f"define i32 @{func_name(nb, nt, half_tail, shared)}(ptr %c, ptr %a, ptr %w, i32 %ldc) {{\nentry:\n"
            "  %ldc4 = mul i32 %ldc, 4\n  %s = sext i32 %ldc4 to i64\n"
            f"  %r = call {{ ptr, ptr }} asm sideeffect \"{text}\", \"=r,=r,r,r,0,1,{clobbers}\""
            "(ptr %c, i64 %s, ptr %a, ptr %w)\n  ret i32 0\n}\n")


def intrin(nb: int, nt: int, half_tail: bool, shared: str) -> str:
    """The tensor intrinsic of one strip (registered once), a whole reduction with its zeroing (the caller tensorizes
    the undecomposed block, then drops the outer block's zeroing: the kernel stores every sum, reads none).
    Rows outer (shared "A"): C[i, t, j] = sum_{b, k} A[b, i, k] W[t, b, j, k], C (4, NT, 4) with the tile stride 4;
    weights outer ("W"): C[t, i, j] = sum A[t, b, i, k] W[b, j, k], C (NT, 4, 4) with the tile stride 4 rows.
    half_tail: valid only where W[..., nb - 1, :, 8:] is zero (the caller checks)."""
    from tvm.s_tir import TensorIntrin

    name = func_name(nb, nt, half_tail, shared)
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    if shared == "A":
        desc, impl = _funcs_rows_outer(nb, nt, name)
    else:
        desc, impl = _funcs_weights_outer(nb, nt, name)
    TensorIntrin.register(name, desc, impl)
    return name


def _funcs_rows_outer(nb: int, nt: int, name: str):
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        W = T.match_buffer(w, (nt, nb, 4, 16), "int8", offset_factor=1, strides=[nb * 64, 64, 16, 1])
        C = T.match_buffer(c, (4, nt, 4), "int32", offset_factor=1, strides=[sc, 4, 1])
        with T.sblock("root"):
            T.reads(A[0:nb, 0:4, 0:16], W[0:nt, 0:nb, 0:4, 0:16])
            T.writes(C[0:4, 0:nt, 0:4])
            with T.init():
                for i, t, j in T.grid(4, nt, 4):
                    with T.sblock("init"):
                        vi, vt, vj = T.axis.remap("SSS", [i, t, j])
                        C[vi, vt, vj] = 0
            for t, b, i, j, k in T.grid(nt, nb, 4, 4, 16):
                with T.sblock("update"):
                    vi, vt, vj, vb, vk = T.axis.remap("SSSRR", [i, t, j, b, k])
                    C[vi, vt, vj] = C[vi, vt, vj] + T.Cast("int32", A[vb, vi, vk]) * T.Cast("int32", W[vt, vb, vj, vk])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        W = T.match_buffer(w, (nt, nb, 4, 16), "int8", offset_factor=1, strides=[nb * 64, 64, 16, 1])
        C = T.match_buffer(c, (4, nt, 4), "int32", offset_factor=1, strides=[sc, 4, 1])
        with T.sblock("root"):
            T.reads(A[0:nb, 0:4, 0:16], W[0:nt, 0:nb, 0:4, 0:16])
            T.writes(C[0:4, 0:nt, 0:4])
            T.evaluate(T.call_extern("int32", name, C.access_ptr("w"), A.access_ptr("r"), W.access_ptr("r"), sc))

    return desc, impl


def _funcs_weights_outer(nb: int, nt: int, name: str):
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, (nt, nb, 4, 16), "int8", offset_factor=1, strides=[nb * 64, 64, 16, 1])
        W = T.match_buffer(w, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        C = T.match_buffer(c, (nt, 4, 4), "int32", offset_factor=1, strides=[sc * 4, sc, 1])
        with T.sblock("root"):
            T.reads(A[0:nt, 0:nb, 0:4, 0:16], W[0:nb, 0:4, 0:16])
            T.writes(C[0:nt, 0:4, 0:4])
            with T.init():
                for t, i, j in T.grid(nt, 4, 4):
                    with T.sblock("init"):
                        vt, vi, vj = T.axis.remap("SSS", [t, i, j])
                        C[vt, vi, vj] = 0
            for t, b, i, j, k in T.grid(nt, nb, 4, 4, 16):
                with T.sblock("update"):
                    vt, vi, vj, vb, vk = T.axis.remap("SSSRR", [t, i, j, b, k])
                    C[vt, vi, vj] = C[vt, vi, vj] + T.Cast("int32", A[vt, vb, vi, vk]) * T.Cast("int32", W[vb, vj, vk])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, (nt, nb, 4, 16), "int8", offset_factor=1, strides=[nb * 64, 64, 16, 1])
        W = T.match_buffer(w, (nb, 4, 16), "int8", offset_factor=1, strides=[64, 16, 1])
        C = T.match_buffer(c, (nt, 4, 4), "int32", offset_factor=1, strides=[sc * 4, sc, 1])
        with T.sblock("root"):
            T.reads(A[0:nt, 0:nb, 0:4, 0:16], W[0:nb, 0:4, 0:16])
            T.writes(C[0:nt, 0:4, 0:4])
            T.evaluate(T.call_extern("int32", name, C.access_ptr("w"), A.access_ptr("r"), W.access_ptr("r"), sc))

    return desc, impl
