"""aarch64 instructions per inference of a binarized network's stem alone (image -> packed codes), under qemu.

    .venv/bin/python tools/count_stem.py [--stem int8,float32] [--glue fused] [--ab 2] [--resolution 224]

Why: the whole-network count (edge-sdk bench --emulate pi3) does not split by layer, and --profile under
qemu times emulation, not an A53. This compiles only the stem the network emitter writes (the same
code as in the package: bitserial.graph._Emitter.stem) for pi3, and counts it with the bench's counter
(edge_sdk.qemu.runner.count_runner: (K=3 - K=1) / 2, deterministic).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def stem_module(net, target, *, glue: str, upto: str | None = None):
    """The stem as emitted into a network; upto="quantize"|"conv1": the integer stem's module cut after
    that kernel (the binding names of bitserial/stem.emit_int8_stem), to split the count."""
    from tvm import relax

    from edge_sdk.compiler.bitserial.graph import _Emitter

    em = _Emitter(net, target, glue=glue)
    x = relax.Var("input", relax.TensorType(net.input_shape, "float32"))
    with em.bb.function("main", [x]):
        with em.bb.dataflow():
            p, _ = em.stem(x)
            gv = em.bb.emit_output(p)
        em.bb.emit_func_output(gv)
    mod = relax.transform.Normalize()(em.bb.get())
    if upto:
        want = {"quantize": "conv1_quantize", "conv1": "conv1"}[upto]
        func = mod["main"]
        block = func.body.blocks[0]
        keep = []
        for b in block.bindings:
            keep.append(b)
            if b.var.name == want:
                break
        last = relax.VarBinding(relax.Var(want, keep[-1].var.ty), keep[-1].value)  # the function's output
        new_block = relax.DataflowBlock(keep[:-1] + [last])
        mod["main"] = relax.Function(func.params, relax.SeqExpr([new_block], last.var), last.var.ty, attrs=func.attrs)
        mod = relax.transform.Normalize()(mod)
    return mod


def count(stem: str, *, glue: str, ab: int, resolution: int, alpha: float, upto: str | None = None) -> float:
    import tvm

    from edge_sdk.qemu.runner import count_runner
    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.models.binarized import binarized_resnet18, golden_input
    from edge_sdk.targets import get_target

    pi3 = get_target("pi3")
    net = binarized_resnet18(alpha=alpha, resolution=resolution, classes=10, a_bits=ab, w_bits=1, stem=stem)
    ex, params = compile_relax(stem_module(net, pi3, glue=glue, upto=upto), pi3)
    with tempfile.TemporaryDirectory(prefix="count-stem-") as tmp:
        lib, pfile = Path(tmp) / "m.so", Path(tmp) / "params.bin"
        ex.export_library(str(lib), fcompile=pi3.compiler())
        tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
        c = count_runner(lib=lib, params=pfile, input=golden_input(net.input_shape, seed=0))
    return c.per_inference


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stem", default="int8,float32")
    ap.add_argument("--glue", default="fused")
    ap.add_argument("--ab", type=int, default=2)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--upto", choices=["quantize", "conv1"], help="int8 stem only: stop after this kernel")
    a = ap.parse_args(argv)
    for stem in a.stem.split(","):
        n = count(stem, glue=a.glue, ab=a.ab, resolution=a.resolution, alpha=a.alpha, upto=a.upto)
        print(f"stem {stem:8s} {'upto ' + a.upto if a.upto else ''} glue {a.glue:8s} w1a{a.ab} @{a.resolution}: {n / 1e6:.2f} M instructions per inference",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
