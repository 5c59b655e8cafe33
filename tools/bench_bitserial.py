"""Time single bitserial conv layers (ResNet18 shapes) on the host; dump the aarch64 inner loop.

    .venv/bin/python tools/bench_bitserial.py [--layers 56,28,14,7] [--ab 2 --wb 1] [--asm DIR]

A developer's loop for the kernels in edge_sdk/compiler/bitserial/kernels.py: per-layer host time
(1 thread, best of 7 process-CPU-time means) and the binary GOPS it reaches, and with --asm the aarch64 .so
and its disassembly, to look for `cnt`/`uadalp` and spills in the inner loop.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# ResNet18 at 224: (name, H=W of input, C, O, kernel, stride, pad)
LAYERS = {
    "56": ("layer1 3x3 64->64 @56", 56, 64, 64, 3, 1, 1),
    "28": ("layer2 3x3 128->128 @28", 28, 128, 128, 3, 1, 1),
    "14": ("layer3 3x3 256->256 @14", 14, 256, 256, 3, 1, 1),
    "7": ("layer4 3x3 512->512 @7", 7, 512, 512, 3, 1, 1),
    "s2": ("layer2.0 3x3/2 64->128 @56", 56, 64, 128, 3, 2, 1),
    "d": ("layer2.0 down 1x1/2 64->128 @56", 56, 64, 128, 1, 2, 0),
    "s3": ("layer3.0 3x3/2 128->256 @28", 28, 128, 256, 3, 2, 1),
    "d3": ("layer3.0 down 1x1/2 128->256 @28", 28, 128, 256, 1, 2, 0),
    "s4": ("layer4.0 3x3/2 256->512 @14", 14, 256, 512, 3, 2, 1),
    "d4": ("layer4.0 down 1x1/2 256->512 @14", 14, 256, 512, 1, 2, 0),
}
# how often each shape occurs in ResNet18 (binary convs only; the stem and head are float)
RESNET18_COUNT = {"56": 4, "s2": 1, "28": 3, "d": 1, "s3": 1, "14": 3, "d3": 1, "s4": 1, "7": 3, "d4": 1}


def _args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="56,28,14,7", help="comma-separated keys of LAYERS, or 'all'")
    ap.add_argument("--ab", type=int, default=2)
    ap.add_argument("--wb", type=int, default=1)
    ap.add_argument("--word", default="uint16", help="packing word (networks use uint16)")
    ap.add_argument("--unfused", action="store_true", help="int32 accumulators out (no glue)")
    ap.add_argument("--asm", default=None, help="write the pi3 .so and its disassembly here")
    ap.add_argument("--a53", action="store_true", help="count aarch64 instructions per call under qemu instead")
    return ap.parse_args()


def _spec(key: str, args) -> dict:
    _, hw, c, o, k, s, p = LAYERS[key]
    spec = dict(batch=1, height=hw, width=hw, channels=c, filters=o, kernel=k, stride=s, padding=p,
                a_bits=args.ab, w_bits=args.wb, mode="unipolar")
    if args.word:
        spec["word"] = args.word
        spec["out_word"] = args.word
    if not args.unfused:
        spec.update(glue_out_bits=args.ab, out_word=spec.get("out_word", "uint32"))
    return spec


def host_seconds(spec: dict) -> float:
    """Process CPU seconds per call of the host kernel: the best of 7 runs of 5 calls on random inputs
    (CPU time, not wall: the machine is shared, preemption is not ours)."""
    import tvm

    from edge_sdk.compiler.bitserial import kernels as ops
    from edge_sdk.targets import get_target

    host = get_target("host")
    ex = ops.build(ops.conv2d_prim_func(arch=host.arch, **spec), target=host)
    ins, out = ops.conv2d_compute(**spec)
    rng = np.random.default_rng(0)
    targs = []
    for b in [*ins, out]:
        shape = [int(d) for d in b.shape]
        if b is out or (str(b.dtype) == "int32" and len(shape) == 1):
            targs.append(tvm.runtime.tensor(np.zeros(shape, str(b.dtype))))
        else:
            info = np.iinfo(str(b.dtype))
            targs.append(tvm.runtime.tensor(rng.integers(0, min(info.max, 1 << 30), shape, dtype=str(b.dtype))))
    fn = ex.mod["main"]
    fn(*targs)
    runs = []
    for _ in range(7):
        t0 = time.process_time()
        for _ in range(5):
            fn(*targs)
        runs.append((time.process_time() - t0) / 5)
    return float(np.min(runs))


def write_asm(key: str, spec: dict, folder: str) -> None:
    """The pi3 kernel's .so and disassembly in folder, and its instruction mix on stdout."""
    from edge_sdk.compiler.bitserial import kernels as ops
    from edge_sdk.targets import get_target

    pi3 = get_target("pi3")
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    lib = d / f"conv{key}.so"
    ops.build(ops.conv2d_prim_func(arch=pi3.arch, **spec), target=pi3).export_library(str(lib), fcompile=pi3.compiler())
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    (d / f"conv{key}.s").write_text(asm)
    ops_ = [ln.split("\t")[1] for ln in asm.splitlines() if ln.count("\t") >= 1 and ln.startswith(" ")]
    print(f"   aarch64: {len(ops_)} instrs, cnt {ops_.count('cnt')}, uadalp {ops_.count('uadalp')}, "
          f"uaddlp {ops_.count('uaddlp')}, ldr/str sp {asm.count('[sp')}", flush=True)


def main() -> None:
    args = _args()
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    keys = list(RESNET18_COUNT) if args.layers == "all" else args.layers.split(",")
    total = 0.0
    for key in keys:
        name, hw, c, o, k, s, p = LAYERS[key]
        spec = _spec(key, args)
        if args.a53:
            n = a53_count(spec)
            total += n * RESNET18_COUNT.get(key, 0)
            print(f"{name:34s} {n / 1e6:8.3f} M aarch64 instructions per call", flush=True)
            continue
        med = host_seconds(spec)
        oh = (hw + 2 * p - k) // s + 1
        bops = 2 * oh * oh * o * k * k * c * args.ab * args.wb
        print(f"{name:34s} {med * 1e3:8.3f} ms  {bops / med / 1e9:7.1f} binary GOPS", flush=True)
        if args.asm:
            write_asm(key, spec, args.asm)
    if args.a53 and args.layers == "all":
        print(f"ResNet18's binary convs, summed: {total / 1e6:.1f} M aarch64 instructions", flush=True)


def a53_count(spec: dict) -> float:
    """aarch64 instructions of one call of the pi3 kernel: a one-call_tir Relax module run by our
    runner under qemu -cpu cortex-a53 (edge_sdk.qemu.runner, (K=3 - K=1) / 2, deterministic)."""
    import tempfile

    import tvm
    from tvm import relax

    from edge_sdk.qemu.runner import count_runner
    from edge_sdk.compiler.bitserial import kernels as ops
    from edge_sdk.targets import get_target

    pi3 = get_target("pi3")
    ins, out = ops.conv2d_compute(**spec)
    func = ops.conv2d_prim_func(arch=pi3.arch, **spec).with_attrs({"global_symbol": "conv", "op_pattern": 8})
    bb = relax.BlockBuilder()
    rvars = [relax.Var(f"a{i}", relax.TensorType([int(d) for d in t.shape], str(t.dtype))) for i, t in enumerate(ins)]
    dummy = relax.Var("x", relax.TensorType([1], "uint8"))  # the runner's input is float32/int8/uint8 only
    with bb.function("main", [dummy, *rvars]):
        gv = bb.add_func(func, "conv")
        y = bb.emit(relax.call_tir(gv, rvars, relax.TensorType([int(d) for d in out.shape], str(out.dtype))))
        bb.emit_func_output(y)
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    rng = np.random.default_rng(0)
    vals = [rng.integers(0, 1 << 15, [int(d) for d in t.shape]).astype(str(t.dtype)) if i < 2
            else np.zeros([int(d) for d in t.shape], str(t.dtype)) for i, t in enumerate(ins)]
    with tempfile.TemporaryDirectory() as d:
        lib, params = Path(d) / "m.so", Path(d) / "params.bin"
        ex.export_library(str(lib), fcompile=pi3.compiler())
        tvm.runtime.save_param_dict_to_file({f"p{i:04d}": tvm.runtime.tensor(v) for i, v in enumerate(vals)},
                                            str(params))
        return count_runner(lib=lib, params=params, input=np.zeros(1, np.uint8)).per_inference


if __name__ == "__main__":
    main()
