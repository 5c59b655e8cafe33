"""`edge-sdk demo`: the README's main job, end to end on local stand-ins for real hardware.

    compile (float32, int8 when it has landed, a bitserial variant; pi3 + host; cached)
      -> start an emulated Pi 3 (arm64 Debian + sshd under qemu) and a loopback sshd "host device"
      -> deploy (runtime bundle, packages, golden check on the device)
      -> upload apps/classify + sample frames, run the app ON each device over SSH
      -> pull its JSON lines back -> results store -> dashboard HTML -> latency table
      -> a trained classifier (the digits ResNet18) in float32, int8 and w1a2 on the emulated Pi: edge-sdk eval
         there over SSH on held-out digits -> accuracy next to modelled Pi 3 latency (evaluation/digits_demo.py)

Everything started is stopped in a `finally` (also on Ctrl-C and SIGTERM). The Pi is emulated (qemu
on this machine), so its time per frame is the emulator's, not a Pi's: the table and the results store
give the emulated Pi's packages their modelled Pi 3 ms instead (the Cortex-A53 timing model over each
pi3 package at --threads, computed once per package: edge_sdk/timing/package_figures.py), and speedups use those;
the emulator's wall time is shown only as "QEMU wall time (emulator speed, not a Pi)".
"""
from __future__ import annotations

import json
import os
import posixpath
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import DeviceError, UsageError
from edge_sdk.fleet.paths import CLASSIFY_APP as REMOTE_APP, DEMO_FRAMES as REMOTE_FRAMES, RESULTS as REMOTE_RESULTS
from edge_sdk.devices import stand_in_module
from edge_sdk.system_tools import DEMO as DEMO_TOOLS, require
from edge_sdk.variants import BASELINE

APP_DIR = Path(__file__).resolve().parent / "apps" / "classify"  # package data: the app the demo uploads
APP_FILES = ("classify.py", "sources.py", "picamera2_standin.py")


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    """What `edge-sdk demo` builds and runs: the zoo model's size, the bitserial variant, the frames the
    app classifies with how many threads, whether the host (loopback) device joins, and where it writes."""

    model: str = "mobilenet_v1"
    alpha: float = 1.0
    resolution: int = 224
    classes: int = 1000
    bitserial: str = "w1a2"
    ablation: bool = True  # also <bitserial>-unfused on the emulated Pi: the fused-glue ablation (Riptide's)
    frames: int = 10
    threads: int = 1
    host: bool = True  # also the host packages on a loopback sshd device
    out_dir: Path  # the package cache (compiler/cache.py)
    db: Path | None = None  # the results store (run_demo needs it)
    dashboard: Path | None = None  # the HTML file to write (run_demo needs it)
    accuracy_images: int | None = None  # held-out digits eval'd on the emulated Pi (None: all 360; 0: no accuracy rows)
    pi_suite: str | None = None  # the emulated Pi's Debian suite: bookworm or trixie (None: $EDGE_SDK_PI_SUITE or bookworm)


@dataclass
class DemoReport:
    rows: list[dict]
    dashboard: Path
    db: Path
    seconds: float
    notes: list[str] = field(default_factory=list)
    accuracy: list[dict] = field(default_factory=list)  # evaluation/digits_demo.py's rows

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r["golden_ok"] and r["frames"] > 0 for r in self.rows) and \
            all(r["images"] > 0 for r in self.accuracy)


def run_demo(opts: DemoOptions) -> DemoReport:
    """The whole demo; returns the table rows. Devices started here are stopped before it returns."""
    from rich.console import Console

    from edge_sdk.targets import stand_in_targets

    require(DEMO_TOOLS, why="edge-sdk demo (it compiles for pi3 and host, starts an emulated Pi and a loopback sshd)")
    say = Console(stderr=True).log
    t0 = time.monotonic()
    size = "full size" if (opts.alpha, opts.resolution) == (1.0, 224) else \
        "reduced size: the Pi is emulated on this machine's cores"
    say(f"demo: {opts.model} alpha {opts.alpha}, {opts.resolution}x{opts.resolution}, {opts.classes} classes ({size})")
    notes: list[str] = []
    targets = [t.name for t in stand_in_targets() if opts.host or not t.is_host]
    pkgs = compile_variants(opts, targets, say=say, notes=notes)
    from edge_sdk.timing.package_figures import model_all
    from edge_sdk.targets import get_target

    modelled = model_all([p for t in targets if get_target(t).stand_in == "emulated_pi" for p in pkgs[t]],
                         threads=opts.threads, say=say, notes=notes)
    from edge_sdk.evaluation import digits_demo

    digits = digits_demo.compile_digits("pi3", folder=opts.out_dir, say=say) if opts.accuracy_images != 0 else []
    rows, accuracy = [], []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="edge-sdk-demo-") as tmp:
        frames_dir = write_sample_frames(Path(tmp) / "frames", n=opts.frames,
                                         size=(opts.resolution * 2, opts.resolution * 3 // 2))
        for target in targets:
            fleet, kind = start_device(target, stack=stack, say=say, suite=opts.pi_suite)
            rows += run_on_device(fleet, kind=kind, packages=pkgs[target], frames_dir=frames_dir, local=Path(tmp),
                                  opts=opts, say=say, modelled=modelled)
            if digits and target == "pi3":
                from edge_sdk.evaluation.samples import write_digits

                accuracy = digits_demo.accuracy_on_device(fleet, digits, images=write_digits(Path(tmp) / "digits"),
                                                          limit=opts.accuracy_images, threads=opts.threads,
                                                          db=opts.db, say=say)
    from edge_sdk.dashboard.page import export_html
    from edge_sdk.results.store import ResultsStore

    with ResultsStore(opts.db) as store:
        export_html(store, opts.dashboard)
    add_speedups(rows)
    report = DemoReport(rows, opts.dashboard, opts.db, time.monotonic() - t0, notes, accuracy)
    print_table(report, opts)
    return report


# ---- compile ---------------------------------------------------------------------------------

def compile_variants(opts: DemoOptions, targets: list[str], *, say, notes: list[str]) -> dict[str, list[Path]]:
    """target -> packages; a variant that has not landed or does not compile for this model is skipped with a note."""
    from edge_sdk.compiler.cache import cached_package
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import VARIANTS, get_variant, names

    model, bitserial = opts.model, opts.bitserial
    if bitserial not in names(family="bitserial"):
        raise UsageError(f"--bitserial {bitserial}: not a bitserial variant ({', '.join(names(family='bitserial'))})")
    variants = [BASELINE]
    for name in names(family="int8"):
        if VARIANTS[name].available:
            variants.append(name)
        else:
            notes.append(f"{name}: not available in this version yet (edge_sdk.variants); skipped")
            say(f"note: {notes[-1]}")
    variants.append(bitserial)
    ablation = f"{bitserial}-unfused"  # the glue as separate float ops: drawn beside the fused one, per layer
    if opts.ablation and ablation in VARIANTS:
        variants.append(ablation)
    zoo = build_zoo_model(model, alpha=opts.alpha, resolution=opts.resolution, classes=opts.classes, seed=0)
    out: dict[str, list[Path]] = {t: [] for t in targets}
    for variant in variants:
        for target in targets:
            if variant == ablation and get_target(target).stand_in != "emulated_pi":
                continue  # the ablation is the Pi's question (its per-layer modelled split)
            t1 = time.monotonic()
            try:
                pkg, cached = cached_package(zoo, get_variant(variant), get_target(target), folder=opts.out_dir)
            except Exception as e:  # noqa: BLE001 - "use what compiles": the cause goes into the printed notes
                if variant == BASELINE:
                    raise
                notes.append(f"{variant} for {target}: does not compile for {model} here "
                             f"({type(e).__name__}: {str(e).strip()[:300]}); skipped")
                say(f"note: {notes[-1]}")
                continue
            say(f"cached: {pkg.name}" if cached else
                f"compiled {variant} for {target} in {time.monotonic() - t1:.0f} s: {pkg.name}")
            out[target].append(pkg)
    return out


def write_sample_frames(folder: Path, *, n: int, size: tuple[int, int]) -> Path:
    """n camera-like frames as PPM (readable on the device with numpy alone), larger than the model input."""
    sys.path.insert(0, str(APP_DIR))
    try:
        from picamera2_standin import scene
        from sources import write_ppm
    finally:
        sys.path.remove(str(APP_DIR))
    folder.mkdir(parents=True)
    for i in range(n):
        write_ppm(folder / f"frame{i:03d}.ppm", scene(size[1], size[0], i * 3))
    return folder


# ---- devices ---------------------------------------------------------------------------------

def start_device(target: str, *, stack: ExitStack, say, suite: str | None = None):
    """The target's stand-in device (targets.py): an emulated Pi for pi3 packages, a loopback sshd device for
    host ones; stopped by `stack`."""
    from edge_sdk.targets import get_target

    tgt = get_target(target)
    if os.geteuid() != 0:
        raise DeviceError("the demo starts an emulated Pi and a loopback sshd, which need root",
                          hint="run it as root (tools/setup.sh sets the machine up)")
    root = tempfile.mkdtemp(prefix=f"edge-sdk-demo-{target}-")
    mod = stand_in_module(tgt.stand_in)
    if tgt.stand_in == "emulated_pi":
        try:
            suite = suite or mod.default_suite()
            if not (mod.rootfs_dir(suite) / ".edge-sdk-rootfs").exists():
                say(f"building the emulated Pi's arm64 {suite} root filesystem once (debootstrap, ~4-6 min)")
            t1 = time.monotonic()
            fleet = mod.EmulatedFleet.start(1, root, trust=True, suite=suite)
        except mod.EmulatedError as e:
            raise DeviceError(f"cannot start the emulated Pi: {e}") from None
        kind = f"emulated Pi 3 (arm64 Debian {suite}, qemu {tgt.emulate_cpu})"
    else:
        try:
            t1 = time.monotonic()
            fleet = mod.LoopbackFleet.start(1, root, trust=True)
        except mod.LoopbackError as e:
            raise DeviceError(f"cannot start the loopback device: {e}") from None
        kind = "this machine over loopback sshd (native)"
    stack.callback(_stop, fleet, say)
    say(f"started {kind} in {time.monotonic() - t1:.1f} s")
    return fleet, kind


def _stop(fleet, say) -> None:
    try:
        fleet.stop()
        names = (d.name + (f" (netns {d.netns})" if getattr(d, "netns", None) else "") for d in fleet.devices)
        say(f"stopped {', '.join(names)}")
    except Exception as e:  # noqa: BLE001 - a failed stop must not hide the demo's own error; it is reported
        say(f"[red]could not stop the devices in {fleet.root} cleanly: {e}[/red]")


def run_on_device(fleet, *, kind: str, packages: list[Path], frames_dir: Path, local: Path, opts: DemoOptions,
                  say, modelled: dict[Path, dict]) -> list[dict]:
    """Deploy, run the classify app there on the frames, pull its JSON lines, record one run per variant."""
    from edge_sdk.fleet.config import load_fleet
    from edge_sdk.fleet.deploy import LocalPackage, deploy
    from edge_sdk.fleet.ssh import Connection

    device = load_fleet(fleet.fleet_yaml).select()[0]
    known_hosts = fleet.root / "known_hosts"
    local_pkgs = [LocalPackage.load(p) for p in packages]
    t1 = time.monotonic()
    result = deploy([device], local_pkgs, known_hosts=known_hosts)
    result.raise_if_failed("deploy")
    dep = result[0].value
    say(f"{device.name}: deployed {len(local_pkgs)} packages in {time.monotonic() - t1:.0f} s "
        f"(runtime {dep.runtime}; golden checks on the device: "
        f"{', '.join(p.name + ' ok' if p.golden is None or p.golden.get('ok') else p.name + ' FAILED' for p in dep.packages)})")
    from edge_sdk.package import read_manifest

    model = read_manifest(packages[0])["model"]["name"]
    remote_out = posixpath.join(REMOTE_RESULTS, f"demo-{int(time.time())}.jsonl")
    with Connection(device, known_hosts=known_hosts) as conn:
        if conn.run(["python3", "-c", "import numpy"], check=False, timeout=300).exit_code != 0:
            raise DeviceError(f"device {device}: python3 with numpy is needed for the classify app",
                              hint="apt-get install python3 python3-numpy (on the device)")
        conn.run(["mkdir", "-p", REMOTE_APP, REMOTE_FRAMES, REMOTE_RESULTS])
        for name in APP_FILES:
            conn.put(APP_DIR / name, posixpath.join(REMOTE_APP, name))
        for f in sorted(frames_dir.iterdir()):
            conn.put(f, posixpath.join(REMOTE_FRAMES, f.name))
        frames, threads = opts.frames, opts.threads
        say(f"{device.name}: running apps/classify on {frames} frames with "
            f"{', '.join(read_manifest(p)['variant'] for p in packages)}")
        t1 = time.monotonic()
        r = conn.run(["python3", posixpath.join(REMOTE_APP, "classify.py"), "--model", model, "--source", REMOTE_FRAMES,
                      "--max-frames", str(frames), "--threads", str(threads), "--top-k", "5", "--out", remote_out,
                      "--baseline", BASELINE],
                     check=False, timeout=3600)
        if r.exit_code != 0:
            raise DeviceError(f"device {device}: the classify app failed (exit {r.exit_code}): {r.stderr[-1500:]}")
        for line in r.stdout.splitlines()[:3]:
            say(f"{device.name}| {line}")
        say(f"{device.name}: app done in {time.monotonic() - t1:.0f} s; pulling {remote_out}")
        lines = local / f"{device.name}.jsonl"
        conn.get(remote_out, lines)
    return record(lines, device=device.name, kind=kind, packages=local_pkgs, deploy_report=dep, opts=opts,
                  emulated=fleet.__class__.__name__ == "EmulatedFleet", modelled=modelled)


def record(lines: Path, *, device: str, kind: str, packages, deploy_report, opts: DemoOptions, emulated: bool,
           modelled: dict[Path, dict]) -> list[dict]:
    """One results-store run per variant from the app's JSON lines; returns the table rows. On the emulated
    Pi the app's times are the emulator's (QEMU wall time): each run also carries its package's modelled
    Pi figures, and the row's `ms` (what speedups use) is the modelled one."""
    from edge_sdk.runtime.result import latency_stats
    from edge_sdk.package import read_manifest
    from edge_sdk.results.store import ResultsStore, device_facts

    by_variant: dict[str, list[dict]] = {}
    for line in lines.read_text().splitlines():
        row = json.loads(line)
        by_variant.setdefault(row["variant"], []).append(row)
    golden = {p.sha256: p.golden or {} for p in deploy_report.packages}
    rows = []
    here = {} if emulated else device_facts()  # the demo's measured devices are loopback stand-ins: this machine
    with ResultsStore(opts.db) as store:
        for pkg in packages:
            manifest = read_manifest(pkg.path)
            got = by_variant.get(manifest["variant"], [])
            lat = np.asarray([g["latency_ms"] for g in got] or [np.nan])
            agree = [g["agrees_with_float"] for g in got if g["agrees_with_float"] is not None]
            gold = golden.get(pkg.sha256, {})
            run_json = {
                "model": manifest["model"]["name"], "variant": manifest["variant"], "target": manifest["target"]["name"],
                "threads": opts.threads, "emulated": emulated, "repeats": len(got),
                "latency_ms": latency_stats(lat),
                "golden": {"ok": bool(gold.get("ok")), "max_abs_err": gold.get("max_abs_err")},
                "versions": manifest.get("versions"),
            }
            fig = modelled.get(pkg.path) if emulated else None
            if fig:
                run_json |= {k: fig[k] for k in ("modelled_ms", "modelled_cycles", "model_version")}
            extra = {"source": "classify", "package_sha256": pkg.sha256, "frames": len(got),
                     "top1_agreement_with_float": (sum(agree) / len(agree)) if agree else None}
            if fig and fig.get("per_layer_modelled_ms"):  # the model's ms per layer (timing/per_layer.py)
                extra["per_layer_modelled_ms"] = fig["per_layer_modelled_ms"]
            if not emulated:
                extra |= here | {"mcpu": (manifest["target"].get("llvm") or {}).get("mcpu")}
            run_id = store.record_run(run_json, manifest, device=device, extra=extra)
            rows.append({"device": device, "how": kind, "target": run_json["target"], "variant": run_json["variant"],
                         "frames": len(got), "median_ms": round(run_json["latency_ms"]["median"], 2),
                         "p10_ms": round(run_json["latency_ms"]["p10"], 2),
                         "p90_ms": round(run_json["latency_ms"]["p90"], 2),
                         "agreement": extra["top1_agreement_with_float"], "golden_ok": run_json["golden"]["ok"],
                         "run_id": run_id, "emulated": emulated, **_pi_time(run_json, fig)})
    return rows


def _pi_time(run_json: dict, fig: dict | None) -> dict:
    """A row's `ms` (the figure its speedup uses) and what it is: measured on a real device; on the emulated
    Pi the modelled Pi ms (None without one: the emulator's wall time, `qemu_wall_ms`, is never used)."""
    from edge_sdk.labels import modelled_label

    median = run_json["latency_ms"]["median"]
    if not run_json["emulated"]:
        return {"ms": round(median, 2), "ms_is": "measured", "qemu_wall_ms": None, "modelled_ms": None}
    return {"ms": fig["modelled_ms"] if fig else None, "qemu_wall_ms": round(median, 2),
            "ms_is": modelled_label(run_json["target"]) if fig else "no modelled Pi time",
            "modelled_ms": fig["modelled_ms"] if fig else None, "modelled_cycles": fig["modelled_cycles"] if fig else None,
            "model_version": fig["model_version"] if fig else None}


def add_speedups(rows: list[dict]) -> None:
    """row["speedup"]: the float32 row's ms / this row's ms on the same device and target (the rows' `ms`:
    measured, or modelled Pi ms on the emulated Pi; never the emulator's wall time); None without both."""
    floats = {(r["device"], r["target"]): r["ms"] for r in rows if r["variant"] == BASELINE}
    for r in rows:
        base = floats.get((r["device"], r["target"]))
        r["speedup"] = base / r["ms"] if base and r["ms"] else None


# ---- output ----------------------------------------------------------------------------------

def print_table(report: DemoReport, opts: DemoOptions) -> None:
    from rich.console import Console
    from rich.table import Table

    from edge_sdk.labels import QEMU_WALL
    from edge_sdk.timing.package_figures import model_version

    t = Table(title=f"{opts.model} (alpha {opts.alpha}, {opts.resolution}x{opts.resolution}), apps/classify on the "
                    f"device, {opts.threads} thread(s); the Pi is emulated (qemu): its ms are modelled Pi ms "
                    f"(Cortex-A53 timing model), not a Pi's measurement")
    for col in ("device", "target", "variant", "frames", "ms per frame", "what the ms is", "p10-p90 ms",
                f"speedup over {BASELINE}", f"{QEMU_WALL}, median ms", f"agreement with {BASELINE}, random weights",
                "golden"):
        t.add_column(col, justify="right" if col not in ("device", "target", "variant", "what the ms is") else "left",
                     no_wrap=col in ("what the ms is", f"agreement with {BASELINE}, random weights"))
    for r in report.rows:
        agree = "-" if r["agreement"] is None else f"{r['agreement']:.0%}"
        spread = "-" if r["emulated"] else f"{r['p10_ms']:.2f}-{r['p90_ms']:.2f}"  # on the emulated Pi: qemu's spread
        t.add_row(r["device"], r["target"], r["variant"], str(r["frames"]), "-" if r["ms"] is None else f"{r['ms']:.2f}",
                  r["ms_is"], spread, "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                  "-" if r["qemu_wall_ms"] is None else f"{r['qemu_wall_ms']:.2f}", agree,
                  "ok" if r["golden_ok"] else "FAILED")
    console = Console(width=None if sys.stdout.isatty() else 180)
    console.print(t)
    if any(r["modelled_ms"] for r in report.rows):
        console.print(f"modelled Pi ms: edge_sdk/timing ({model_version()}) over each package the emulated Pi runs, "
                      f"{opts.threads} thread(s), at the target's clock; a model, not a measurement. {QEMU_WALL}: "
                      "the emulator's time per frame on this machine, never used for a speedup")
    from edge_sdk.evaluation.digits_demo import print_accuracy_table

    print_accuracy_table(report.accuracy, console)
    for note in report.notes:
        console.print(f"note: {note}")
    console.print(f"results: {report.db}\ndashboard: {report.dashboard}\n"
                  f"demo wall time: {report.seconds / 60:.1f} min")
