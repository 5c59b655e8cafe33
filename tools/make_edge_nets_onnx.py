"""Write torch-exported ONNX files of today's edge classifiers (issue 14) at opsets 13 and 17, each with
ONNX Runtime's output for a seeded input saved next to it.

The nets follow torchvision's definitions (MobileNetV3-Small/-Large, EfficientNet-B0, DenseNet121,
SqueezeNet 1.1, ShuffleNetV2, MnasNet B1), written out here at reduced widths so the files stay small
(torchvision is not needed). They export what users' files contain: Hardswish / HardSigmoid (opset 13
has no Hardswish: HardSigmoid + Mul), SiLU as Sigmoid + Mul, squeeze-excite, chunk as Split, the
channel shuffle as Reshape + Transpose + Reshape, max pooling with ceil_mode, Concat, Flatten + Gemm.
Weights are seeded random; every BatchNorm gets statistics drawn around its input's real statistics
(one pass, a forward pre-hook per BN) and the last layer is scaled to logits of std ~2.

Runs in the TensorFlow venv (tools/setup_tf_env.sh: torch 2.13.0 CPU, onnx 1.17; plus onnxruntime):

    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_edge_nets_onnx.py [--only NAME ...]

Writes tests/data/edge_nets/onnx/NAME_opsetN.onnx and NAME_opsetN.npz (x: the NCHW float32 input,
uniform [-1, 1], seed 0; y: ONNX Runtime's output) and merges op lists into manifest.json there.

    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_edge_nets_onnx.py --qdq [--only FILE_STEM ...]

quantizes some of those files with onnxruntime.quantization as a user would (quant_pre_process, then
quantize_static, QuantFormat.QDQ, per-channel int8 weights, int8 activations, MinMax calibration over 16
seeded inputs uniform [-1, 1]) into tests/data/edge_nets/onnx/qdq/STEM_qdq.onnx with STEM_qdq.npz (the same
x; y: ONNX Runtime's output of the QDQ file) and qdq/manifest.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

SEED = 1414
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "edge_nets" / "onnx"
SIZE, CLASSES = 64, 10
OPSETS = (13, 17)


def div8(v: float, d: int = 8) -> int:
    """torchvision's _make_divisible."""
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


def cbr(cin, cout, k, s=1, *, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class SE(nn.Module):
    def __init__(self, c, squeeze, *, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvRes(nn.Module):
    """MobileNetV3 / EfficientNet MBConv / MnasNet block: expand 1x1, depthwise kxk, SE, project 1x1."""

    def __init__(self, cin, exp, cout, k, s, *, act, se=None):
        super().__init__()
        layers = [] if exp == cin else [cbr(cin, exp, 1, act=act)]
        layers.append(cbr(exp, exp, k, s, groups=exp, act=act))
        if se is not None:
            layers.append(se(exp))
        layers.append(cbr(exp, cout, 1, act=None))
        self.block, self.res = nn.Sequential(*layers), s == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.res else y


_V3_SMALL = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
             (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
             (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
             (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]
_V3_LARGE = [(3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
             (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
             (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
             (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
             (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1)]


def mobilenet_v3(small: bool, width: float, last: int = 64) -> nn.Module:
    cfg = _V3_SMALL if small else _V3_LARGE
    layers, cin = [cbr(3, div8(16 * width), 3, 2, act=nn.Hardswish)], div8(16 * width)
    for k, exp, cout, use_se, a, s in cfg:
        exp, cout = div8(exp * width), div8(cout * width)
        se = (lambda c: SE(c, div8(c // 4))) if use_se else None
        layers.append(InvRes(cin, exp, cout, k, s, act=nn.ReLU if a == "RE" else nn.Hardswish, se=se))
        cin = cout
    layers.append(cbr(cin, 6 * cin, 1, act=nn.Hardswish))
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6 * cin, last), nn.Hardswish(),
                         nn.Dropout(0.2), nn.Linear(last, CLASSES))
    return nn.Sequential(*layers, head)


def efficientnet_b0(width: float) -> nn.Module:
    cfg = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
           (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    cin = div8(32 * width)
    layers = [cbr(3, cin, 3, 2, act=nn.SiLU)]
    for e, k, s, c, n in cfg:
        for i in range(n):
            cout = div8(c * width)
            sq = max(1, cin // 4)  # torchvision: a quarter of the block's input channels
            se = lambda ch, sq=sq: SE(ch, sq, act=nn.SiLU, gate=nn.Sigmoid)  # noqa: E731
            layers.append(InvRes(cin, cin * e, cout, k, s if i == 0 else 1, act=nn.SiLU, se=se))
            cin = cout
    last = div8(1280 * width)
    layers.append(cbr(cin, last, 1, act=nn.SiLU))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(last, CLASSES))


class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                  nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                  nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


def densenet121(growth: int) -> nn.Module:
    c = 2 * growth
    layers = [nn.Conv2d(3, c, 7, 2, 3, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    for b, n in enumerate((6, 12, 24, 16)):
        for _ in range(n):
            layers.append(DenseLayer(c, growth))
            c += growth
        if b < 3:
            layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, CLASSES)]
    return nn.Sequential(*layers)


class Fire(nn.Module):
    def __init__(self, cin, s, e):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, s, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(s, e, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(s, e, 3, padding=1), nn.ReLU())

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


def squeezenet1_1(width: float) -> nn.Module:
    def w(c):
        return max(4, int(c * width))

    fires = [(16, 64), (16, 64), "M", (32, 128), (32, 128), "M", (48, 192), (48, 192), (64, 256), (64, 256)]
    layers, cin = [nn.Conv2d(3, w(64), 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True)], w(64)
    for f in fires:
        if f == "M":
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            continue
        layers.append(Fire(cin, w(f[0]), w(f[1])))
        cin = 2 * w(f[1])
    layers += [nn.Dropout(0.5), nn.Conv2d(cin, CLASSES, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers)


def channel_shuffle(x, groups: int = 2):
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        half, self.stride = cout // 2, stride
        if stride > 1:
            self.branch1 = nn.Sequential(cbr(cin, cin, 3, stride, groups=cin, act=None), cbr(cin, half, 1))
        self.branch2 = nn.Sequential(cbr(cin if stride > 1 else half, half, 1),
                                     cbr(half, half, 3, stride, groups=half, act=None), cbr(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out)


class ShuffleNetV2(nn.Module):
    def __init__(self, widths=(16, 32, 64), repeats=(4, 8, 4), last=128):
        super().__init__()
        layers, cin = [cbr(3, 8, 3, 2), nn.MaxPool2d(3, 2, 1)], 8
        for c, n in zip(widths, repeats):
            layers += [ShuffleUnit(cin if i == 0 else c, c, 2 if i == 0 else 1) for i in range(n)]
            cin = c
        self.features = nn.Sequential(*layers, cbr(cin, last, 1))
        self.fc = nn.Linear(last, CLASSES)

    def forward(self, x):
        return self.fc(self.features(x).mean([2, 3]))


class MnasNet(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        d = [div8(c * alpha) for c in (32, 16, 24, 40, 80, 96, 192, 320)]
        layers = [cbr(3, d[0], 3, 2), cbr(d[0], d[0], 3, groups=d[0]), cbr(d[0], d[1], 1, act=None)]
        cin = d[1]
        for cout, k, s, e, n in zip(d[2:], (3, 5, 5, 3, 5, 3), (2, 2, 2, 1, 2, 1), (3, 3, 6, 6, 6, 6),
                                    (3, 3, 3, 2, 4, 1)):
            for i in range(n):
                layers.append(InvRes(cin, cin * e, cout, k, s if i == 0 else 1, act=nn.ReLU))
                cin = cout
        self.features = nn.Sequential(*layers, cbr(cin, 128, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, CLASSES))

    def forward(self, x):
        return self.classifier(self.features(x).mean([2, 3]))


def mobilenet_v2(width: float) -> nn.Module:
    """torchvision MobileNetV2: ReLU6 (exported as Clip) inverted residuals."""
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
           (6, 320, 1, 1)]
    cin = div8(32 * width)
    layers = [cbr(3, cin, 3, 2, act=nn.ReLU6)]
    for t, c, n, s in cfg:
        for i in range(n):
            layers.append(InvRes(cin, cin * t, div8(c * width), 3, s if i == 0 else 1, act=nn.ReLU6))
            cin = div8(c * width)
    layers += [cbr(cin, 128, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, CLASSES)]
    return nn.Sequential(*layers)


class PoolSplit(nn.Module):
    """The pooling variants (ceil_mode, count_include_pad on and off, SAME-style padding) and a sized
    torch.split (Split) with ReLU6 (Clip), Hardswish and Hardsigmoid on its parts."""

    def __init__(self):
        super().__init__()
        self.conv = cbr(3, 8, 3, 2)
        self.pools = nn.ModuleList([nn.MaxPool2d(3, 2, 1, ceil_mode=True),
                                    nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=True),
                                    nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                                    nn.AvgPool2d(2, 2, ceil_mode=True)])
        self.acts = nn.ModuleList([nn.ReLU6(), nn.Hardswish(), nn.Hardsigmoid()])
        self.narrow = nn.Conv2d(8, 2, 1)
        self.fc = nn.Linear(2 * (3 * 17 * 17 + 16 * 16), CLASSES)

    def forward(self, x):
        parts = torch.split(self.conv(x), [3, 3, 2], dim=1)  # 32x32x8
        x = self.narrow(torch.cat([a(p) for a, p in zip(self.acts, parts)], 1))
        # 3/2/1 ceil on 32: 17 (the last window starts in the right pad); 2/2 ceil on 31: 16 (a partial last window)
        ys = [p(x) for p in self.pools[:3]] + [self.pools[3](x[:, :, 1:, 1:])]
        return self.fc(torch.cat([torch.flatten(y, 1) for y in ys], 1))


FAMILIES = {
    "mobilenet_v3_small_0.15_64": lambda: mobilenet_v3(True, 0.15),
    "mobilenet_v3_large_0.1_64": lambda: mobilenet_v3(False, 0.1),
    "mobilenet_v2_0.25_64": lambda: mobilenet_v2(0.25),
    "pool_split_ops": PoolSplit,
    "efficientnet_b0_0.1_64": lambda: efficientnet_b0(0.1),
    "densenet121_k4_64": lambda: densenet121(4),
    "squeezenet1_1_0.25_64": lambda: squeezenet1_1(0.25),
    "shufflenet_v2_w16_64": lambda: ShuffleNetV2(),
    "mnasnet_0.1_64": lambda: MnasNet(0.1),
}


@torch.no_grad()
def randomize(net: nn.Module, *, gen: torch.Generator) -> None:
    """One pass over calibration images: each BN's statistics drawn around its input's real ones
    (gamma ~ U(0.5, 1.5), beta ~ gamma * N(1.5, 0.5), as tools/make_test_models.py); then the last
    layer with weights scaled (weight and bias) so the logits have std ~2."""
    def pre(bn, args):
        x = args[0]
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3)) + 1e-4
        c = mean.numel()
        bn.weight.copy_(torch.rand(c, generator=gen) + 0.5)
        bn.bias.copy_(bn.weight * (torch.randn(c, generator=gen) * 0.5 + 1.5))
        bn.running_mean.copy_(mean + torch.randn(c, generator=gen) * 0.2 * var.sqrt())
        bn.running_var.copy_(var * (torch.rand(c, generator=gen) + 0.6))

    net.eval()
    hooks = [m.register_forward_pre_hook(pre) for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    calib = torch.rand((8, 3, SIZE, SIZE), generator=gen) * 2 - 1
    net(calib)
    for h in hooks:
        h.remove()
    head = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d))][-1]
    scale = 2.0 / max(float(net(calib).std()), 1e-6)
    head.weight.mul_(scale)
    head.bias.mul_(scale)


def export(name: str, net: nn.Module, opset: int) -> dict:
    import onnx
    import onnxruntime as ort

    path = OUT / f"{name}_opset{opset}.onnx"
    tmp = path.with_name(path.name + ".tmp")
    x = np.random.default_rng(0).uniform(-1.0, 1.0, (1, 3, SIZE, SIZE)).astype(np.float32)
    torch.onnx.export(net, (torch.from_numpy(x),), str(tmp), opset_version=opset, dynamo=False,
                      input_names=["input"], output_names=["logits"])
    os.replace(tmp, path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"input": x})[0]
    np.savez(OUT / f"{name}_opset{opset}.npz", x=x, y=y)
    proto = onnx.load(str(path))
    ops = sorted({n.op_type for n in proto.graph.node})
    print(f"  wrote {path.name} ({path.stat().st_size / 1024:.0f} KiB): {' '.join(ops)}", flush=True)
    return {path.name: {"opset": opset, "ops": ops, "bytes": path.stat().st_size,
                        "input": [1, 3, SIZE, SIZE], "output": list(y.shape)}}


# the QDQ files (--qdq): one float file each, the families' int8 paths (ReLU6 removed by the quantizer,
# hard-sigmoid/hard-swish squeeze-excite, swish as Sigmoid + Mul, chunk as Slice + channel shuffle, ceil_mode
# max pools + Concat, ReduceMean); pool_split_ops: average pooling the int8 path cannot express (named error)
QDQ = ("mobilenet_v2_0.25_64_opset13", "mobilenet_v3_small_0.15_64_opset17", "efficientnet_b0_0.1_64_opset13",
       "shufflenet_v2_w16_64_opset13", "squeezenet1_1_0.25_64_opset17", "mnasnet_0.1_64_opset17",
       "pool_split_ops_opset17")


def quantize_qdq(stem: str) -> dict:
    """STEM.onnx -> qdq/STEM_qdq.onnx (+ .npz with ONNX Runtime's output), as onnxruntime's docs do it."""
    import tempfile

    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Frames(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.it = iter([{"input": rng.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.it, None)

    src, out = OUT / f"{stem}.onnx", OUT / "qdq" / f"{stem}_qdq.onnx"
    out.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qdq-") as tmp:
        pre, tmp_out = Path(tmp) / "pre.onnx", Path(tmp) / "qdq.onnx"
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        quantize_static(str(pre), str(tmp_out), Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        os.replace(tmp_out, out)
    x = np.load(src.with_suffix(".npz"))["x"]
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.savez(out.with_suffix(".npz"), x=x, y=y)
    ops = sorted({n.op_type for n in onnx.load(str(out)).graph.node})
    print(f"  wrote {out.name} ({out.stat().st_size / 1024:.0f} KiB): {' '.join(ops)}", flush=True)
    return {out.name: {"from": src.name, "ops": ops, "bytes": out.stat().st_size, "onnxruntime": ort.__version__}}


def main_qdq(only: list[str]) -> int:
    path = OUT / "qdq" / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {"files": {}}
    for stem in QDQ:
        if not only or stem in only:
            manifest["files"].update(quantize_qdq(stem))
    manifest["made_with"] = {"command": "tools/make_edge_nets_onnx.py --qdq", "calibration": "16 x U(-1, 1), seed 1",
                             "quantize_static": "QDQ, per_channel, QInt8 activations and weights, MinMax"}
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], help="model name(s) to make (repeatable)")
    ap.add_argument("--qdq", action="store_true", help="write the QDQ files (qdq/) from the float ONNX files")
    args = ap.parse_args(argv)
    if args.qdq:
        return main_qdq(args.only)
    for name in args.only:
        if name not in FAMILIES:
            ap.error(f"--only {name}: unknown model; known: {', '.join(FAMILIES)}")
    OUT.mkdir(parents=True, exist_ok=True)
    manifest_path = OUT / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"files": {}}
    for i, (name, build) in enumerate(FAMILIES.items()):
        if args.only and name not in args.only:
            continue
        torch.manual_seed(SEED + i)
        net = build()
        randomize(net, gen=torch.Generator().manual_seed(SEED + i))
        print(f"{name}: {sum(p.numel() for p in net.parameters())} parameters", flush=True)
        for opset in OPSETS:
            manifest["files"].update(export(name, net, opset))
    manifest["made_with"] = {"torch": torch.__version__, "seed": SEED, "command": "tools/make_edge_nets_onnx.py"}
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
