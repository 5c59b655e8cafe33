"""evaluate_package: a package's top-1 / top-5 accuracy on an ImageFolder, here, under qemu or on a device.

    folder = dataset.scan(DIR, labels=manifest["labels"], classes=10)
    result = evaluate_package(Path("m.edgepkg"), folder, where=Where("host"))    # -> EvalResult
    result.top1, result.top5, result.per_class, result.to_json()

Every image is decoded here (Pillow) and turned into the model input by edge_sdk/runtime/device/preprocess.py
with the package manifest's preprocessing (the module the device runs too). Then the inputs run:
- "host": natively, in one process of the runtime bundle's Python loader (runtime/device/eval_batch.py);
- "qemu": an aarch64 package on this x86 machine, under qemu-aarch64 with the target's CPU model: the aarch64
  guest Python (tools/build_qemu_plugins.sh --guest-python) runs eval_batch.py, or without it one edge-runner
  per image (slow: use --limit); either way the latency is the emulator's, not a Pi's;
- "device": on a fleet device over SSH, where deploy installed the package: the inputs and eval_batch.py
  are uploaded to a scratch folder, run there in one process, and the scores pulled back.
Scores are ranked here (stable: ties go to the lower class index, as argmax does).
"""
from __future__ import annotations

import os
import platform
import posixpath
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import DeviceError, RuntimeFailure, UsageError
from edge_sdk.evaluation.dataset import ImageFolder, read_image
from edge_sdk.package import open_package
from edge_sdk.runtime.device.preprocess import PreprocessError, model_input

EVAL_BATCH = Path(__file__).resolve().parent.parent / "runtime" / "device" / "eval_batch.py"
CHUNK = 256  # inputs per upload / per runner process


@dataclass(frozen=True)
class Where:
    """Where the package runs: "local" (natively when the package's arch is this machine's, else under qemu),
    "host", "qemu", or "device" (with `device`, a fleet Device)."""

    kind: str = "local"
    device: object | None = None
    known_hosts: Path | None = None
    threads: int = 1


@dataclass
class EvalResult:
    package: str
    model: str
    variant: str
    target: str
    where: str  # "host (x86_64, native)", "qemu (cortex-a53)", "device kitchen-pi"
    device: str  # the results store's device name
    emulated: bool
    images: int
    top1_correct: int
    top5_correct: int
    k: int  # the "top-5" k (fewer when the model has fewer classes)
    per_class: list[dict]
    latencies_ms: list[float] = field(repr=False)
    dataset: str = ""
    preprocess: dict = field(default_factory=dict)
    misclassified: list[dict] = field(default_factory=list, repr=False)
    seconds: float = 0.0
    threads: int = 1
    manifest: dict = field(default_factory=dict, repr=False)
    sha256: str = ""
    output: str | None = None  # the output ranked, of a package with several (None: its only one)

    @property
    def top1(self) -> float:
        return self.top1_correct / self.images if self.images else 0.0

    @property
    def top5(self) -> float:
        return self.top5_correct / self.images if self.images else 0.0

    def latency(self) -> dict:
        lat = np.asarray(self.latencies_ms or [np.nan], np.float64)
        return {"median": float(np.median(lat)), "min": float(lat.min()), "max": float(lat.max()),
                "p10": float(np.percentile(lat, 10)), "p90": float(np.percentile(lat, 90))}

    def to_json(self) -> dict:
        return {"package": self.package, "model": self.model, "variant": self.variant, "target": self.target,
                "where": self.where, "device": self.device, "emulated": self.emulated, "dataset": self.dataset,
                "images": self.images, "top1": self.top1, "top5": self.top5, "top5_k": self.k,
                "top1_correct": self.top1_correct, "top5_correct": self.top5_correct, "per_class": self.per_class,
                "latency_ms": self.latency(), "latency_kind": "emulated (qemu), not a Pi's" if self.emulated
                else "measured", "threads": self.threads, "preprocess": self.preprocess,
                "misclassified": self.misclassified[:50], "seconds": round(self.seconds, 2),
                **({"output": self.output} if self.output else {})}

    def __str__(self) -> str:
        lat = "emulated (qemu) ms" if self.emulated else "ms"
        return (f"{self.model} {self.variant} for {self.target} on {self.where}: top-1 {self.top1:.2%} "
                f"({self.top1_correct}/{self.images}), top-{self.k} {self.top5:.2%}; median "
                f"{self.latency()['median']:.2f} {lat} per image")


def prepare_inputs(folder: ImageFolder, spec: dict) -> np.ndarray:
    """(N, *input shape) model inputs of every image, preprocessed as the manifest says."""
    out = []
    for s in folder.samples:
        try:
            x = model_input(read_image(s.path), spec)
        except PreprocessError as e:
            raise UsageError(f"{s.path}: {e}") from e
        if list(x.shape) != list(spec["shape"]):
            raise UsageError(f"{s.path}: preprocessed to {list(x.shape)}, but the model input is {spec['shape']}")
        out.append(x)
    return np.stack(out)


def score(scores: np.ndarray, folder: ImageFolder, k: int) -> tuple[int, int, list[dict], list[dict]]:
    """(top-1 correct, top-k correct, per-class rows, misclassified rows)."""
    flat = np.asarray(scores, np.float64).reshape(len(scores), -1)
    ranked = np.argsort(-flat, axis=1, kind="stable")[:, :k]
    labels = np.array([s.label for s in folder.samples])
    hit1 = ranked[:, 0] == labels
    hitk = (ranked == labels[:, None]).any(axis=1)
    per_class = []
    for c in sorted(set(labels.tolist())):
        m = labels == c
        per_class.append({"class": c, "label": folder.name_of(c), "images": int(m.sum()),
                          "top1_correct": int(hit1[m].sum()), f"top{k}_correct": int(hitk[m].sum())})
    wrong = [{"image": str(s.path), "label": folder.name_of(s.label), "predicted": folder.name_of(int(r[0]))}
             for s, r, ok in zip(folder.samples, ranked, hit1) if not ok]
    return int(hit1.sum()), int(hitk.sum()), per_class, wrong


def pick_output(manifest: dict, name: str | None) -> dict | None:
    """The output eval ranks: the one `--output NAME` names, else the first, of a package with several (manifest
    "outputs"); None for a single-output package."""
    outputs = manifest.get("outputs") or []
    if not outputs:
        if name:
            raise UsageError(f"--output {name}: the model has one output")
        return None
    pick = next((o for o in outputs if o["name"] == name), None) if name else outputs[0]
    if pick is None:
        raise UsageError(f"--output {name}: no such output (outputs: {', '.join(o['name'] for o in outputs)})")
    return pick


def classes_of(manifest: dict, output: str | None = None) -> int:
    """How many classes the ranked output scores (its shape without the batch axis)."""
    pick = pick_output(manifest, output)
    shape = pick["shape"] if pick else manifest["output"]["shape"]
    return int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])


def evaluate_package(package: Path, folder: ImageFolder, *, where: Where, output: str | None = None) -> EvalResult:
    """Accuracy of one package on `folder` (its labels already resolved for this package's classes); a package
    with several outputs is ranked on `output` (a name), else its first."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edge-eval-") as tmp:
        pkg = open_package(Path(package), Path(tmp) / "pkg")
        m = pkg.manifest
        x = prepare_inputs(folder, m["input"])
        runner = {"host": _run_host, "qemu": _run_qemu, "local": _run_qemu, "device": _run_device}.get(where.kind)
        if runner is None:
            raise UsageError(f"eval where '{where.kind}': expected local, host, qemu or device")
        scores, lat, label, device, emulated = runner(pkg, x, where, Path(tmp))
    pick = pick_output(m, output)
    if pick is not None:  # the flat vector of every output: that output's slice
        scores = np.asarray(scores).reshape(len(scores), -1)[:, pick["offset"]:pick["offset"] + pick["size"]]
    k = min(5, classes_of(m, output))
    top1, topk, per_class, wrong = score(scores, folder, k)
    from edge_sdk.package import sha256_file

    return EvalResult(package=str(package), model=m["model"]["name"], variant=m["variant"], target=m["target"]["name"],
                      where=label, device=device, emulated=emulated, images=len(folder.samples), top1_correct=top1,
                      top5_correct=topk, k=k, per_class=per_class, latencies_ms=[float(v) for v in lat],
                      dataset=str(folder.root), preprocess=m["input"]["preprocess"], misclassified=wrong,
                      seconds=time.monotonic() - t0, threads=where.threads, manifest=m,
                      sha256=sha256_file(Path(package)), output=pick["name"] if pick else None)


# ---- runners: (pkg, inputs, where, tmp) -> (scores (N, ...), latencies ms, where label, device name, emulated)

def _run_batches(pkg, x: np.ndarray, where: Where, tmp: Path, *, python: list[str], bundle: Path, env: dict):
    """eval_batch.py in one process per CHUNK inputs, started by `python` (a command prefix)."""
    scores, lat = [], []
    for i in range(0, len(x), CHUNK):
        np.save(tmp / "inputs.npy", x[i:i + CHUNK], allow_pickle=False)
        cmd = [*python, str(EVAL_BATCH), "--runtime", str(bundle), "--lib", str(pkg.member("model.so")),
               "--params", str(pkg.member("params.bin")), "--inputs", str(tmp / "inputs.npy"),
               "--out", str(tmp / "scores.npz"), "--threads", str(where.threads), "--warmup", "1" if i == 0 else "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=7200, check=False)
        if proc.returncode != 0:
            raise RuntimeFailure(f"{pkg.path}: eval_batch failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")
        with np.load(tmp / "scores.npz") as f:
            scores.append(f["scores"])
            lat += f["latency_ms"].tolist()
    return np.concatenate(scores), lat


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH")}


def _run_host(pkg, x: np.ndarray, where: Where, tmp: Path):
    from edge_sdk.runtime.bundle import ensure_bundle

    arch = pkg.manifest["target"]["arch"]
    if arch != platform.machine():
        raise UsageError(f"{pkg.path}: a {arch} package does not run natively on this {platform.machine()} "
                         f"machine (eval runs aarch64 packages under qemu, or give --device)")
    scores, lat = _run_batches(pkg, x, where, tmp, python=[sys.executable], bundle=ensure_bundle(arch),
                               env=_clean_env())
    return scores, lat, f"host ({platform.machine()}, native)", platform.node(), False


def _guest_python() -> Path | None:
    """The aarch64 guest Python (with numpy) that tools/build_qemu_plugins.sh --guest-python unpacks, if built."""
    from edge_sdk.qemu.runner import guest_python_dir
    from edge_sdk.errors import MissingDependency

    try:
        return guest_python_dir()
    except MissingDependency:
        return None


def _run_qemu(pkg, x: np.ndarray, where: Where, tmp: Path):
    """Under qemu-aarch64 with the target's CPU: the guest Python runs eval_batch.py once per CHUNK inputs
    when it is built, else one edge-runner per image (slow)."""
    from edge_sdk.runtime.bundle import ensure_bundle
    from edge_sdk.runtime.execute import LocalRun, run_compiled, runner_command
    from edge_sdk.targets import get_target

    m = pkg.manifest
    arch = m["target"]["arch"]
    if arch == platform.machine():
        return _run_host(pkg, x, where, tmp)
    cpu = get_target(m["target"]["name"]).qemu_cpu()
    label, device = f"qemu ({cpu}, emulated)", f"qemu-{cpu}"
    guest = _guest_python()
    if guest is not None:
        qemu = runner_command(ensure_bundle(arch), arch=arch, emulate_cpu=cpu)[0][0]
        python = [qemu, "-cpu", cpu, "-L", str(guest), "-E", f"PYTHONPATH={guest / 'site'}",
                  str(guest / "usr" / "bin" / "python3.11")]
        scores, lat = _run_batches(pkg, x, where, tmp, python=python, bundle=ensure_bundle(arch), env=_clean_env())
        return scores, lat, label, device, True
    scores, lat = [], []
    for xi in x:
        r = run_compiled(lib=pkg.member("model.so"), params=pkg.member("params.bin"), input=xi, arch=arch,
                         emulate_cpu=cpu, how=LocalRun(threads=where.threads, warmup=0, repeat=1))
        scores.append(r.output)
        lat.append(r.latencies_ms[0])
    return np.stack(scores), lat, label, device, True


def _run_device(pkg, x: np.ndarray, where: Where, tmp: Path):
    from edge_sdk.fleet.deploy import LocalPackage
    from edge_sdk.fleet.paths import CURRENT_RUNTIME, MODELS
    from edge_sdk.fleet.ssh import Connection

    device = where.device
    local = LocalPackage.load(pkg.path)
    install = posixpath.join(MODELS, local.name, local.sha256)
    scratch = posixpath.join(MODELS, local.name, f".eval.tmp-{uuid.uuid4().hex[:8]}")
    scores, lat = [], []
    with Connection(device, known_hosts=where.known_hosts) as conn:
        if conn.run(["test", "-f", posixpath.join(install, "model.so")], check=False).exit_code != 0:
            raise DeviceError(f"device {device}: {pkg.path.name} (sha256 {local.sha256[:12]}...) is not installed "
                              f"there", hint=f"edge-sdk deploy {pkg.path} --device {device.name} --fleet ...")
        conn.run(["mkdir", "-p", scratch])
        try:
            conn.put(EVAL_BATCH, posixpath.join(scratch, "eval_batch.py"))
            for i in range(0, len(x), CHUNK):
                np.save(tmp / "inputs.npy", x[i:i + CHUNK], allow_pickle=False)
                conn.put(tmp / "inputs.npy", posixpath.join(scratch, "inputs.npy"))
                argv = ["python3", posixpath.join(scratch, "eval_batch.py"), "--runtime", CURRENT_RUNTIME,
                        "--lib", posixpath.join(install, "model.so"), "--params", posixpath.join(install, "params.bin"),
                        "--inputs", posixpath.join(scratch, "inputs.npy"), "--out", posixpath.join(scratch, "s.npz"),
                        "--threads", str(where.threads), "--warmup", "1" if i == 0 else "0"]
                r = conn.run(argv, check=False, timeout=7200)
                if r.exit_code != 0:
                    raise DeviceError(f"device {device}: eval_batch failed (exit {r.exit_code}): {r.stderr.strip()[-800:]}")
                conn.get(posixpath.join(scratch, "s.npz"), tmp / "scores.npz")
                with np.load(tmp / "scores.npz") as f:
                    scores.append(f["scores"])
                    lat += f["latency_ms"].tolist()
        finally:
            conn.run(["rm", "-rf", scratch], check=False)
    emulated = "emulated" in device.tags  # the emulated Pi's fleet file tags it (device_images/emulated_pi.py)
    return np.concatenate(scores), lat, f"device {device.name}", device.name, emulated
