"""A64 instructions as the A53 pipeline sees them: class, registers read and written, memory bytes.

`decode("fmla v0.4s, v1.4s, v2.s[1]")` gives an Op whose `cls` picks the latency and unit rules in
pipeline.py and a53.py. Registers are unified (w0/x0 -> r0, b0..q0/v0 -> v0, NZCV flags -> nzcv);
the zero register is no register. A Q-form (128-bit) vector op is one with any 16b/8h/4s/2d operand.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Operand roles a consumer reads a register in (see a53.py: latency by producer and role).
ALU, SHIFT, ADDR, STORE, BRANCH, R2F, R2F_CVT, MAC_ACC, FP, FP_ACC = (
    "alu", "shift", "addr", "store", "branch", "r2f", "r2f_cvt", "mac_acc", "fp", "fp_acc")


@dataclass(frozen=True, slots=True)
class Op:
    text: str
    cls: str                      # see CLASSES
    q: bool = False               # 128-bit vector: both NEON halves, issue slot 0 only
    dsts: tuple = ()
    reads: tuple = ()             # (register, role) pairs
    load_bytes: int = 0
    store_bytes: int = 0
    wb: str | None = None         # base register written back by pre/post-indexing
    branch: str | None = None     # cond | jump | call | ret | indirect
    target: int | None = None     # pc-relative offset of a direct branch

    @property
    def is_mem(self) -> bool:
        return self.cls in ("load", "f_load64", "f_load128", "store", "prefetch")


def _w(words: str) -> frozenset:
    return frozenset(words.split())


_INT_ALU = _w("""add adds sub subs and ands orr eor bic bics orn eon mov movz movn movk mvn neg negs ngc ngcs adc adcs
sbc sbcs cmp cmn tst ccmp ccmn csel csinc csinv csneg cset csetm cinc cinv cneg adr adrp lsl lsr asr ror clz cls
rbit rev rev16 rev32 mrs nop""")
_INT_SHIFTY = _w("sxtb sxth sxtw uxtb uxth ubfx sbfx ubfiz sbfiz bfi bfxil bfm ubfm sbfm extr")
_MUL = _w("mul madd msub mneg smull umull smaddl umaddl smsubl umsubl smulh umulh smnegl umnegl")
_MAC3 = _w("madd msub smaddl umaddl smsubl umsubl")  # accumulator is the last operand
_FLAGS_W = _w("adds subs ands bics negs ngcs adcs sbcs cmp cmn tst ccmp ccmn")
_FLAGS_R = _w("adc adcs sbc sbcs ngc ngcs ccmp ccmn csel csinc csinv csneg cset csetm cinc cinv cneg fcsel fccmp "
               "fccmpe")
_NO_DST = _w("cmp cmn tst ccmp ccmn fcmp fcmpe fccmp fccmpe")
_SYS = _w("hint dmb dsb isb svc dc clrex msr yield brk sev sevl wfe wfi")
_READS_DST = _w("""fmla fmls mla mls smlal smlal2 umlal umlal2 smlsl smlsl2 umlsl umlsl2 sqdmlal sqdmlal2 sqdmlsl
sqdmlsl2 sadalp uadalp bsl bit bif movk bfi bfxil bfm sli sri usra ssra ursra srsra saba uaba sabal sabal2 uabal
uabal2 tbx sdot udot xtn2 sqxtn2 uqxtn2 sqxtun2 shrn2 rshrn2 sqshrn2 uqshrn2 sqrshrn2 sqshrun2 sqrshrun2 fcvtn2
fcvtxn2 addhn2 raddhn2 subhn2 rsubhn2 ins""")
_VEC_MUL = _w("""fmul fmulx mul smull smull2 umull umull2 mla mls smlal smlal2 umlal umlal2 smlsl smlsl2 umlsl umlsl2
sqdmulh sqrdmulh sqdmull sqdmull2 sqdmlal sqdmlal2 sqdmlsl sqdmlsl2 pmul pmull pmull2 sdot udot""")
_VEC_FP = _w("""fadd fsub fabd fmax fmin fmaxnm fminnm faddp fmaxp fminp fmaxnmp fminnmp fabs fneg frinta frinti
frintm frintn frintp frintx frintz fcvtas fcvtau fcvtms fcvtmu fcvtns fcvtnu fcvtps fcvtpu fcvtzs fcvtzu scvtf ucvtf
fcmeq fcmge fcmgt fcmle fcmlt facge facgt fmaxv fminv fmaxnmv fminnmv fcvtl fcvtl2 fcvtn fcvtn2 fcvtxn fcvtxn2
fcvt""")
_VEC_INT2 = _w("add sub neg shadd uhadd srhadd urhadd shsub uhsub")
_VEC_INT3 = _w("abs addp sabd uabd saddlp uaddlp sqadd uqadd sqsub uqsub sqneg suqadd usqadd addv saddlv uaddlv")
_RECP_STEP, _RECP_EST = {"frecps", "frsqrts"}, {"frecpe", "frsqrte", "urecpe", "ursqrte", "frecpx"}
_FP_ALU_S = _w("""fadd fsub fabs fneg fmov fcvt fcmp fcmpe fccmp fccmpe fcsel frinta frinti frintm frintn frintp
frintx frintz fmin fmax fminnm fmaxnm fabd""")
_FP_MAC_S = _w("fmadd fmsub fnmadd fnmsub")
_Q_ARR = ("16b", "8h", "4s", "2d", "1q")
_GP = re.compile(r"^([xw])(\d+|zr)$|^(w?sp)$")
_VR = re.compile(r"^([bhsdqv])(\d+)(?:\.(\w+))?(?:\[\d+\])?$")
_ESIZE = {"b": 1, "h": 2, "s": 4, "d": 8, "q": 16}
_CLS_LOAD = re.compile(r"^(ld(r|ur|p|np|ar|xr|axr|apr|1|2|3|4)\w*)$")
_CLS_STORE = re.compile(r"^(st(r|ur|p|np|lr|xr|lxr|1|2|3|4)\w*)$")


def _split(ops: str) -> list[str]:
    """Top-level operands (commas inside {} and [] do not split)."""
    out, depth, cur = [], 0, ""
    for ch in ops:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()] if cur.strip() else out


def reg(tok: str) -> tuple[str | None, str, int]:
    """(unified name or None, kind 'gp'|'vec'|'', bytes): x3 -> (r3, gp, 8), q1 -> (v1, vec, 16)."""
    tok = tok.strip().lower()
    m = _GP.match(tok)
    if m:
        if m.group(3):
            return "sp", "gp", 8
        return (None if m.group(2) == "zr" else f"r{m.group(2)}"), "gp", 8 if m.group(1) == "x" else 4
    m = _VR.match(tok)
    if m:
        kind, arr = m.group(1), m.group(3) or ""
        size = 16 if kind == "q" or arr in _Q_ARR else _ESIZE.get(kind, 8) if kind != "v" else 8
        if "[" in tok and arr:
            size = _ESIZE.get(arr[-1], 4)
        return f"v{m.group(2)}", "vec", size
    return None, "", 0


def _reg_list(tok: str) -> list[str]:
    """'{ v0.4s, v1.4s }[1]' or '{ v0.4s-v3.4s }' -> ['v0.4s', 'v1.4s', ...]."""
    inner = tok[tok.index("{") + 1:tok.index("}")]
    parts = [p.strip() for p in inner.split(",") if p.strip()]
    if len(parts) == 1 and "-" in parts[0]:
        a, b = parts[0].split("-")
        n0, n1, arr = int(a.split(".")[0][1:]), int(b.split(".")[0][1:]), a.split(".", 1)[1]
        parts = [f"v{(n0 + i) % 32}.{arr}" for i in range((n1 - n0) % 32 + 1)]
    lane = tok[tok.index("}") + 1:].strip()
    return [p + lane if lane else p for p in parts]


@dataclass
class _Parsed:
    mn: str
    regs: list  # (name, kind, bytes, token) of register operands, in order
    mem: str | None = None
    post: str | None = None
    shifted: set | None = None
    target: int | None = None


def _parse(text: str) -> _Parsed:
    mn, _, rest = text.strip().partition(" ")
    p = _Parsed(mn.lower(), [], shifted=set())
    ops = _split(rest)
    for i, tok in enumerate(ops):
        if tok.startswith("["):
            p.mem = tok
            if i + 1 < len(ops):
                p.post = ops[i + 1]
            break
        if tok.startswith("{"):
            p.regs += [(*reg(t), t) for t in _reg_list(tok)]
        elif tok.startswith("#"):
            if p.mn.startswith(("b", "cb", "tb")) and re.match(r"#-?\d+$", tok):
                p.target = int(tok[1:])
        elif re.match(r"(lsl|lsr|asr|ror|[su]xt[bhwx]|msl)\b", tok):
            if p.regs:
                p.shifted.add(p.regs[-1][0])
        else:
            name, kind, size = reg(tok)
            if kind:
                p.regs.append((name, kind, size, tok))
    return p


def _mem_reads(p: _Parsed) -> tuple[list, str | None]:
    """Address registers of a memory operand and the written-back base (pre/post-index)."""
    inner = p.mem.strip("[]!").split(",") if p.mem else []
    addr = [reg(t)[0] for t in inner if reg(t)[1] == "gp" and reg(t)[0]]
    wb = addr[0] if addr and (p.mem.endswith("!") or p.post is not None) else None
    if p.post and reg(p.post)[0]:
        addr.append(reg(p.post)[0])
    return addr, wb


def _is_q(p: _Parsed) -> bool:
    return any(k == "vec" and (t.split(".")[-1].split("[")[0] in _Q_ARR or t.lower().startswith("q"))
               for _n, k, _s, t in p.regs if "[" not in t or "." not in t)


def _mem_op(text: str, p: _Parsed, load: bool) -> Op:
    addr, wb = _mem_reads(p)
    reads = [(r, ADDR) for r in addr]
    regs = [r for r in p.regs if r[0] is not None or r[1]]
    if p.mn.startswith(("stxr", "stlxr", "stxp", "stlxp")):  # status register first
        status, regs = regs[0], regs[1:]
    else:
        status = None
    nbytes = sum(s for _n, _k, s, _t in regs)
    if p.mn in ("strb", "sturb", "ldrb", "ldurb", "ldrsb", "ldursb", "ldarb", "stlrb", "ldxrb", "ldaxrb"):
        nbytes = 1
    elif p.mn in ("strh", "sturh", "ldrh", "ldurh", "ldrsh", "ldursh", "ldarh", "stlrh", "ldxrh", "ldaxrh"):
        nbytes = 2
    elif p.mn in ("ldrsw", "ldursw"):
        nbytes = 4
    elif p.mn.startswith("ld1r") or p.mn[:4] in ("ld2r", "ld3r", "ld4r"):
        nbytes = len(regs) * _ESIZE.get(regs[0][3].split(".")[-1][-1], 4) if regs else 0
    lane = any("[" in t for *_x, t in regs)
    names = [n for n, _k, _s, _t in regs if n]
    if load:
        vec = any(k == "vec" for _n, k, _s, _t in regs)
        cls = "f_load128" if vec and nbytes > 8 else "f_load64" if vec else "load"
        if lane:  # a lane load merges into its registers
            reads += [(n, FP) for n in names]
        dsts = tuple(names) + ((wb,) if wb else ())
        return Op(text, cls, dsts=dsts, reads=tuple(reads), load_bytes=nbytes, wb=wb)
    reads += [(n, STORE) for n in names]
    dsts = ((status[0],) if status and status[0] else ()) + ((wb,) if wb else ())
    return Op(text, "store", dsts=dsts, reads=tuple(reads), store_bytes=nbytes, wb=wb)


def _branch_op(text: str, p: _Parsed) -> Op:
    mn, names = p.mn, [n for n, *_ in p.regs if n]
    if mn.startswith("b.") or mn in ("cbz", "cbnz", "tbz", "tbnz"):
        reads = ((("nzcv", BRANCH),) if mn.startswith("b.") else ()) + tuple((n, BRANCH) for n in names[:1])
        return Op(text, "branch", reads=reads, branch="cond", target=p.target)
    if mn in ("b", "bl"):
        return Op(text, "branch", dsts=("r30",) if mn == "bl" else (), branch="call" if mn == "bl" else "jump",
                  target=p.target)
    if mn == "ret":
        return Op(text, "branch", reads=((names[0] if names else "r30", BRANCH),), branch="ret")
    return Op(text, "branch", dsts=("r30",) if mn == "blr" else (), reads=tuple((n, BRANCH) for n in names),
              branch="call" if mn == "blr" else "indirect")


def _int_op(text: str, p: _Parsed) -> Op:
    names = [n for n, *_ in p.regs]
    dst = [] if p.mn in _NO_DST else names[:1]
    srcs = names[1:] if dst or not names else names
    if p.mn in _NO_DST:
        srcs = names
    role = SHIFT if p.mn in _INT_SHIFTY else ALU
    reads = [(r, SHIFT if r in p.shifted else role) for r in srcs if r]
    if p.mn in _READS_DST and dst and dst[0]:
        reads.append((dst[0], ALU))
    if p.mn in _FLAGS_R:
        reads.append(("nzcv", ALU))
    dsts = tuple(d for d in dst if d) + (("nzcv",) if p.mn in _FLAGS_W else ())
    if p.mn in _MUL:
        if p.mn in _MAC3 and len(srcs) == 3 and srcs[2]:
            reads = [(r, ALU) for r in srcs[:2] if r] + [(srcs[2], MAC_ACC)]
        return Op(text, "mul", dsts=dsts, reads=tuple(reads))
    if p.mn in ("sdiv", "udiv"):
        return Op(text, "div", dsts=dsts, reads=tuple(reads))
    return Op(text, "alu", dsts=dsts, reads=tuple(reads))


def _fp_cls(mn: str, p: _Parsed, q: bool) -> str:
    """Class of an FP / Advanced SIMD data-processing instruction."""
    kinds = [k for _n, k, _s, _t in p.regs]
    if mn in ("fmov", "dup", "ins", "mov", "umov", "smov") and "gp" in kinds:
        to_gp = kinds[0] == "gp"
        if mn == "fmov" and "[" not in (p.regs[0][3] + p.regs[-1][3]):
            return "f2r" if to_gp else "r2f"
        return "f2r_cvt" if to_gp else "r2f_cvt"
    if mn in ("scvtf", "ucvtf") and "gp" in kinds:
        return "r2f_cvt"
    if mn.startswith("fcvt") and kinds and kinds[0] == "gp":
        return "f2r_cvt"
    if mn in ("fdiv", "fsqrt"):
        first = p.regs[0][3].lower() if p.regs else ""
        return "fdiv_d" if first.startswith("d") or first.endswith(".2d") else "fdiv_s"
    vec = any(t.lower().startswith("v") for *_x, t in p.regs)
    if mn in ("fmla", "fmls") or (not vec and mn in _FP_MAC_S):
        return "fp_mac"
    if mn in ("fmul", "fnmul", "fmulx") or mn in _VEC_MUL:
        return "fp_mul"
    if mn in _RECP_STEP:
        return "recp_step"
    if mn in _RECP_EST:
        return "recp_est"
    if vec and mn in _VEC_INT2:
        return "vec_int2"
    if vec and mn in _VEC_INT3:
        return "vec_int3"
    if mn in ("movi", "mvni") or (mn == "fmov" and any(t.startswith("#") for t in text_of(p).split())):
        return "fp_const"
    return "fp_alu"


def text_of(p: _Parsed) -> str:
    return " ".join(t for *_x, t in p.regs)


def _fp_op(text: str, p: _Parsed) -> Op:
    q = _is_q(p)
    cls = _fp_cls(p.mn, p, q)
    names = [n for n, *_ in p.regs]
    dst = [] if p.mn in _NO_DST else names[:1]
    srcs = names if p.mn in _NO_DST else names[1:]
    role = R2F_CVT if cls == "r2f_cvt" else R2F if cls == "r2f" else FP
    reads = [(r, role) for r in srcs if r]
    into_lane = bool(p.regs) and "[" in p.regs[0][3] and p.mn in ("mov", "ins", "fmov", "ld1")
    if dst and dst[0] and (p.mn in _READS_DST or into_lane):
        reads.append((dst[0], FP_ACC if cls == "fp_mac" else FP))
    if not any(t.lower().startswith("v") for *_x, t in p.regs) and p.mn in _FP_MAC_S and len(srcs) == 3:
        reads = [(r, FP) for r in srcs[:2] if r] + [(srcs[2], FP_ACC)]
    if p.mn in _FLAGS_R:
        reads.append(("nzcv", ALU))
    dsts = tuple(d for d in dst if d) + (("nzcv",) if p.mn in ("fcmp", "fcmpe", "fccmp", "fccmpe") else ())
    keep_q = q and cls not in ("r2f", "r2f_cvt", "f2r", "f2r_cvt")
    return Op(text, "fcmp" if "nzcv" in dsts else cls, q=keep_q, dsts=dsts, reads=tuple(reads))


def decode(text: str) -> Op:
    """One instruction's Op from llvm-mc's text ("mnemonic operands")."""
    if text.startswith("<"):
        return Op(text, "sys")
    p = _parse(text)
    mn = p.mn
    if mn == "prfm" or mn == "prfum":
        return Op(text, "prefetch", reads=tuple((r, ADDR) for r in _mem_reads(p)[0]))
    if p.mem is not None and _CLS_LOAD.match(mn):
        return _mem_op(text, p, load=True)
    if p.mem is not None and _CLS_STORE.match(mn):
        return _mem_op(text, p, load=False)
    if mn in ("b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz") or mn.startswith("b."):
        return _branch_op(text, p)
    if mn in _SYS:
        return Op(text, "sys")
    if any(k == "vec" for _n, k, _s, _t in p.regs) or mn.startswith("f"):
        return _fp_op(text, p)
    return _int_op(text, p)
