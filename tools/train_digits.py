"""Train the digits classifier in float and binarized (STE, Riptide layout), then measure every compiled variant.

Why: a test that a kernel is numerically right on random weights does not show the *network* still
classifies; this does, on real data (scikit-learn's handwritten digits, 1797 8x8 images), and answers
Riptide's question whether fused glue costs accuracy.

    .venv/bin/python tools/train_digits.py            # train (about a minute on 1 core) + evaluate
    .venv/bin/python tools/train_digits.py --eval     # only compile + evaluate the stored weights
    .venv/bin/python tools/train_digits.py --eval --int8   # + rewrite the int8 model (TF venv) first

Models (edge_sdk/bench/accuracy.py: the zoo ResNet18 at alpha 0.25, 32x32 RGB input, TF SAME padding):
  float         conv + BN + ReLU, trained with Adam and +-1 pixel shifts
  w1a1, w1a2    the binarized layout of models/binarized.py, initialised from the float weights:
                float stem -> codes clip(floor(y / step + 1/2), 0, 2^a - 1) with step 2^(1-a); each binary
                conv uses s * sign(w) (s = mean |w| per output channel) on codes * step; BN with gamma
                snapped so the layer's multiplier s * gamma / sd is a power of two (shift normalization,
                the snap ratio held constant in the backward pass); block output clip(round(conv2 glue)
                + round(shortcut), 0, 2^a - 1); straight-through gradients for sign, round and clip.
  w1a2-plainbn  the same without shift normalization (ordinary BN): the ablation for fused glue.
  int8          the float weights in Keras, converted by TFLite (full int8, float ends; TF venv), compiled
                by our int8 backend.
Writes edge_sdk/models/weights/digits_*.npz (binary conv weights as s * sign(w), float conv weights in float16)
and digits_accuracy.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from edge_sdk.bench.accuracy import SPEC, WEIGHTS, weights_path  # noqa: E402

EPS = 1e-3  # the zoo's BN epsilon (Keras)


# ---------------------------------------------------------------- data
def split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    images = d.images.astype(np.uint8)  # 0..16
    return train_test_split(images, d.target, test_size=0.2, stratify=d.target, random_state=0)


def shift(images, rng):
    """Random +-1 pixel shifts of 8x8 digits (zero fill)."""
    out = np.zeros_like(images)
    p = np.pad(images, ((0, 0), (1, 1), (1, 1)))
    dy, dx = rng.integers(0, 3, len(images)), rng.integers(0, 3, len(images))
    for i in range(len(images)):
        out[i] = p[i, dy[i]:dy[i] + 8, dx[i]:dx[i] + 8]
    return out


# ---------------------------------------------------------------- networks
def build(torch, *, a_bits: int | None, w_bits: int = 1, shiftnorm: bool = True, stem=None):
    """ResNet18 in the zoo's layout and names; a_bits None: float, else the binarized layout.

    stem (binarized): the builder's folded, snapped stem (HWIO weight, bias) from the float weights, used
    frozen, so the codes entering the binary part are the compiled network's exactly (a binary network
    amplifies any difference there)."""
    nn, F = torch.nn, torch.nn.functional
    c = lambda ch: max(8, int(ch * SPEC["alpha"]))  # noqa: E731
    binary = a_bits is not None
    step = 2.0 ** (1 - a_bits) if binary else 1.0
    qmax = (1 << a_bits) - 1 if binary else 0

    def same(x, k, s, value=0.0):
        h = x.shape[2]
        total = max((-(-h // s) - 1) * s + k - h, 0)
        return F.pad(x, (total // 2, total - total // 2, total // 2, total - total // 2), value=value)

    def rnd(z):  # floor(z + 1/2), straight through
        return z + (torch.floor(z + 0.5) - z).detach()

    class ConvBN(nn.Module):
        def __init__(self, cin, cout, k, stride, quant):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, stride, bias=False)
            self.bn = nn.BatchNorm2d(cout, eps=EPS)
            self.k, self.stride, self.quant = k, stride, quant

        def forward(self, x):
            w = self.conv.weight
            s = None
            if self.quant:
                s = w.detach().abs().mean(dim=(1, 2, 3))
                wq = s[:, None, None, None] * torch.where(w >= 0, 1.0, -1.0)
                w = w + (wq - w).detach()
            y = F.conv2d(same(x, self.k, self.stride), w, stride=self.stride)
            bn = self.bn
            if not (self.quant and shiftnorm):
                return bn(y)
            if self.training:  # batch statistics, running ones updated as nn.BatchNorm2d does
                mean, var = y.mean(dim=(0, 2, 3)), y.var(dim=(0, 2, 3), unbiased=False)
                n = y.numel() / y.shape[1]
                with torch.no_grad():
                    bn.running_mean.mul_(0.9).add_(0.1 * mean)
                    bn.running_var.mul_(0.9).add_(0.1 * var * n / max(n - 1, 1))
            else:
                mean, var = bn.running_mean, bn.running_var
            sd = torch.sqrt(var + EPS)
            with torch.no_grad():  # shift normalization: |s * gamma / sd| snapped to a power of two
                m = (s * bn.weight / sd).abs().clamp_min(1e-30)
                ratio = torch.exp2(torch.round(torch.log2(m))) / m
            g = bn.weight * ratio
            return (g[:, None, None] * (y - mean[:, None, None]) / sd[:, None, None]) + bn.bias[:, None, None]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleDict()
            self.convs["conv1"] = ConvBN(3, c(64), 7, 2, False)
            self.blocks = []
            cin = c(64)
            for stage, ch in enumerate([64, 128, 256, 512], start=1):
                for j in range(2):
                    s = 2 if (j == 0 and stage > 1) else 1
                    name = f"layer{stage}.{j}"
                    self.convs[f"{name}#conv1".replace(".", "#")] = ConvBN(cin, c(ch), 3, s, binary)
                    self.convs[f"{name}#conv2".replace(".", "#")] = ConvBN(c(ch), c(ch), 3, 1, binary)
                    down = s != 1 or cin != c(ch)
                    if down:
                        self.convs[f"{name}#downsample".replace(".", "#")] = ConvBN(cin, c(ch), 1, s, binary)
                    self.blocks.append((name, down))
                    cin = c(ch)
            self.fc = nn.Linear(cin, SPEC["classes"])

        def forward(self, x):
            cv = {k.replace("#", "."): v for k, v in self.convs.items()}  # ModuleDict keys hold no dots
            if stem is not None:
                w, b = (torch.from_numpy(np.ascontiguousarray(v)) for v in (stem[0].transpose(3, 2, 0, 1), stem[1]))
                x = F.relu(F.conv2d(same(x, 7, 2), w, stride=2) + b[:, None, None])
            else:
                x = F.relu(cv["conv1"](x))
            x = F.max_pool2d(same(x, 3, 2), 3, 2)  # after ReLU, zero padding == TF's ignored padding
            if not binary:
                for name, down in self.blocks:
                    y = cv[f"{name}.conv2"](F.relu(cv[f"{name}.conv1"](x)))
                    x = F.relu(y + (cv[f"{name}.downsample"](x) if down else x))
                return self.fc(x.mean(dim=(2, 3)))
            a = torch.clamp(rnd(x / step), 0, qmax)  # codes
            for name, down in self.blocks:
                h = torch.clamp(rnd(cv[f"{name}.conv1"](a * step) / step), 0, qmax)
                t = rnd(cv[f"{name}.conv2"](h * step) / step)
                res = rnd(cv[f"{name}.downsample"](a * step) / step) if down else a
                a = torch.clamp(t + res, 0, qmax)
            return self.fc((a * step).mean(dim=(2, 3)))

    return Net()


def export(net, path: Path, *, binary: bool) -> None:
    arrays = {}
    for key, m in net.convs.items():
        name = key.replace("#", ".")
        w = m.conv.weight.detach().numpy().astype(np.float32)
        if binary and m.quant:  # what the binarized builder derives from the float weights, exactly
            s = np.abs(w).mean(axis=(1, 2, 3), keepdims=True)
            w = (s * np.where(w >= 0, 1.0, -1.0)).astype(np.float32)
        arrays[f"{name}.weight"] = w.transpose(2, 3, 1, 0)  # OIHW -> HWIO
        bn = m.bn
        for k, v in (("gamma", bn.weight), ("beta", bn.bias), ("mean", bn.running_mean), ("var", bn.running_var)):
            arrays[f"{name}.bn.{k}"] = v.detach().numpy().astype(np.float32)
    arrays["fc.weight"] = net.fc.weight.detach().numpy().T.astype(np.float32)
    arrays["fc.bias"] = net.fc.bias.detach().numpy().astype(np.float32)
    if not binary:  # float weights stored in float16 (half the bytes in git); the zoo reads them as float32
        arrays = {k: v.astype(np.float16) if k.endswith(".weight") else v for k, v in arrays.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def builder_stem():
    """(weight HWIO, bias) of the binarized builder's stem for the stored float weights."""
    from edge_sdk.models.binarized import binarized_resnet18

    st = binarized_resnet18(a_bits=1, w_bits=1, weights=weights_path("float"), stem="float32", **SPEC).stem
    return st.weight, st.bias


def load_from(net, src) -> None:
    """Start a binarized network from the float one's weights (same module names)."""
    net.load_state_dict(src.state_dict())


def train(torch, net, xtr, ytr, *, epochs: int, lr: float, seed: int) -> None:
    from edge_sdk.bench.accuracy import to_input

    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    steps = epochs * math.ceil(len(xtr) / 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    net.train()
    for _ in range(epochs):
        order = rng.permutation(len(xtr))
        imgs = shift(xtr[order], rng)
        for i in range(0, len(order), 64):
            x = torch.from_numpy(to_input(imgs[i:i + 64]).transpose(0, 3, 1, 2).copy())
            y = torch.from_numpy(ytr[order[i:i + 64]].astype(np.int64))
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    net.eval()


def torch_accuracy(torch, net, xte, yte) -> float:
    from edge_sdk.bench.accuracy import to_input

    with torch.no_grad():
        scores = net(torch.from_numpy(to_input(xte).transpose(0, 3, 1, 2).copy()))
    return float((scores.argmax(-1).numpy() == yte).mean())


def train_all(epochs: int) -> dict:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    xtr, xte, ytr, yte = split()
    WEIGHTS.mkdir(parents=True, exist_ok=True)
    tmp = WEIGHTS / "digits_heldout.tmp.npz"
    np.savez_compressed(tmp, images=xte, labels=yte.astype(np.int8))
    os.replace(tmp, WEIGHTS / "digits_heldout.npz")
    acc = {}
    t0 = time.perf_counter()
    fnet = build(torch, a_bits=None)
    train(torch, fnet, xtr, ytr, epochs=epochs, lr=3e-3, seed=1)
    export(fnet, weights_path("float"), binary=False)
    acc["float"] = torch_accuracy(torch, fnet, xte, yte)
    print(f"float: torch accuracy {acc['float']:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    for kind, a_bits, sn in (("w1a2", 2, True), ("w1a1", 1, True), ("w1a2-plainbn", 2, False)):
        t0 = time.perf_counter()
        torch.manual_seed(0)
        net = build(torch, a_bits=a_bits, shiftnorm=sn, stem=builder_stem())
        load_from(net, fnet)
        net.convs["conv1"].requires_grad_(False)
        train(torch, net, xtr, ytr, epochs=2 * epochs, lr=2e-3, seed=2)
        export(net, weights_path(kind), binary=True)
        acc[kind] = torch_accuracy(torch, net, xte, yte)
        print(f"{kind}: torch accuracy {acc[kind]:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return acc


# ---------------------------------------------------------------- int8 (TF venv: TFLite's converter)
TF_PY = Path(os.environ.get("EDGE_SDK_CACHE") or Path.home() / ".cache" / "edge-sdk") / "venv-tf" / "bin" / "python"
INT8 = WEIGHTS / "digits_int8.tflite"


def stage_int8(calib: Path) -> None:
    """The float weights in tools/make_test_models.py's Keras ResNet18, converted by TFLite to full int8
    (float input/output, QUANTIZE/DEQUANTIZE at the ends), calibrated on `calib` (200 training digits)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import make_test_models as mtm

    model = mtm.resnet18(size=SPEC["resolution"], classes=SPEC["classes"], width=max(8, int(64 * SPEC["alpha"])))
    with np.load(weights_path("float")) as f:
        w = {k: f[k].astype(np.float32) for k in f.files}
    for layer in model.layers:
        if not layer.get_weights():
            continue
        if layer.name.endswith(".bn"):
            layer.set_weights([w[f"{layer.name}.{k}"] for k in ("gamma", "beta", "mean", "var")])
        else:
            layer.set_weights([w[f"{layer.name}.weight"]] + ([w[f"{layer.name}.bias"]] if layer.name == "fc" else []))
    data = mtm.convert(model, mode="int8_float_io", rep=np.load(calib))
    mtm._write(INT8, data)
    print(f"wrote {INT8} ({len(data)} bytes)")


def make_int8() -> None:
    import subprocess

    if not TF_PY.exists():
        raise SystemExit(f"{TF_PY} missing: run `bash tools/setup_tf_env.sh`")
    import tempfile

    from edge_sdk.bench.accuracy import to_input

    with tempfile.TemporaryDirectory(prefix="digits-int8-") as tmp:
        calib = Path(tmp) / "calib.npy"
        np.save(calib, to_input(split()[0][:200]))  # the TF venv has no scikit-learn
        subprocess.run([str(TF_PY), __file__, "--stage-int8", str(calib)], check=True,
                       env=dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2"))


# ---------------------------------------------------------------- compiled evaluation
TABLE_STEM = "float32"  # digits_accuracy.json's binarized rows: the training stem (bench/accuracy.py STEM is int8)
ROWS = [  # (row name, weights, glue, shiftnorm)
    ("w1a2 fused", "w1a2", "fused", True),
    ("w1a2 unfused", "w1a2", "unfused", True),
    ("w1a1 fused", "w1a1", "fused", True),
    ("w1a1 unfused", "w1a1", "unfused", True),
    ("w1a2-plainbn fused (M snapped at compile time)", "w1a2-plainbn", "fused", False),
    ("w1a2-plainbn unfused (float M)", "w1a2-plainbn", "unfused", False),
]


def evaluate(torch_acc: dict | None) -> dict:
    from edge_sdk.bench import accuracy as digits
    from edge_sdk.targets import get_target
    from edge_sdk.variants import VARIANTS

    host = get_target("host")
    x, y = digits.load_heldout()
    table = {"held_out": int(len(y)), "spec": SPEC, "rows": []}
    t0 = time.perf_counter()
    ex, params = digits.compile_float(host)
    table["rows"].append({"variant": "float32", "weights": "float", "torch": (torch_acc or {}).get("float"),
                          "compiled": digits.accuracy(digits.predict_compiled(ex, params, x), y)})
    if INT8.is_file():
        ex, params = digits.compile_int8(host)
        note = "" if VARIANTS["int8"].available else "int8 backend compiled directly (variant row not yet available)"
        from edge_sdk.runtime.litert import run_tflite

        compiled = digits.predict_compiled(ex, params, x)
        lite = np.concatenate([run_tflite(INT8, x[i:i + 1]) for i in range(len(x))])
        table["rows"].append({"variant": "int8", "weights": "int8", "compiled": digits.accuracy(compiled, y),
                              "reference": digits.accuracy(lite, y), "reference_engine": "litert",
                              "same_predictions_as_reference": bool(np.array_equal(compiled.argmax(-1),
                                                                                   lite.argmax(-1))),
                              "torch": None, "note": note})
    else:
        table["rows"].append({"variant": "int8", "compiled": None, "note": "pending: run with --int8"})
    for name, kind, glue, sn in ROWS:  # the stem the nets were trained with (tests/test_digits_accuracy MEASURED;
        net = digits.binarized_net(kind, shiftnorm=sn, stem=TABLE_STEM)  # the int8 stem's: MEASURED_INT8_STEM)
        ex, params = digits.compile_binarized_kind(kind, host, glue=glue, shiftnorm=sn, stem=TABLE_STEM)
        compiled = digits.predict_compiled(ex, params, x)
        ref = digits.predict_reference(net, x, glue=glue)
        table["rows"].append({"variant": name, "weights": kind, "glue": glue, "shiftnorm": sn, "stem": TABLE_STEM,
                              "compiled": digits.accuracy(compiled, y), "reference": digits.accuracy(ref, y),
                              "same_predictions_as_reference": bool(np.array_equal(compiled.argmax(-1),
                                                                                   ref.argmax(-1))),
                              "torch": (torch_acc or {}).get(kind)})
        print(f"  {name}: compiled {table['rows'][-1]['compiled']:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", action="store_true", help="skip training; compile and evaluate the stored weights")
    ap.add_argument("--epochs", type=int, default=10, help="float epochs (binarized: twice as many)")
    ap.add_argument("--int8", action="store_true", help="(re)write digits_int8.tflite in the TF venv first")
    ap.add_argument("--stage-int8", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage_int8:
        stage_int8(args.stage_int8)
        return 0
    torch_acc = None
    out = WEIGHTS / "digits_accuracy.json"
    if not args.eval:
        torch_acc = train_all(args.epochs)
    if args.int8 or not args.eval:
        make_int8()
    elif out.is_file():
        torch_acc = {r["weights"]: r.get("torch") for r in json.loads(out.read_text())["rows"] if "weights" in r}
    table = evaluate(torch_acc)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"{'variant':<48} {'compiled':>9} {'torch':>7}")
    for r in table["rows"]:
        comp = "-" if r["compiled"] is None else f"{r['compiled']:.4f}"
        tq = "-" if r.get("torch") is None else f"{r['torch']:.4f}"
        print(f"{r['variant']:<48} {comp:>9} {tq:>7}  {r.get('note', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
