"""edge-sdk bench --device D --fleet F: the same comparison, measured on a device of the fleet.

Lifecycle: one cached .edgepkg per variant, compiled for the device's target (compiler/cache.py)
-> edge_sdk.fleet.deploy (content-addressed: a package already installed there is not sent again)
-> each package run on the device by its own runtime bundle (fleet.remote.run_remote, with
--profile so the store gets per-layer conv/glue times) -> the run JSON comes back over SSH ->
BenchRows with device=D -> the same table, and rows in the results store under the device's name.

The figures are the device's: warm-up and repeats happen there, the host only compiles and collects.
The machine facts (CPU, clock, temperature, load) are read on the device, not here.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edge_sdk.bench.bench import BenchOptions, Built, compile_all
from edge_sdk.bench.rows import FAILED, WRONG, BenchResult, BenchRow, failure, ratios
from edge_sdk.errors import EdgeError

_FACTS = r"""
echo "cpu_model=$(grep -m1 -E '^(model name|Model|Hardware)[[:space:]]*:' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "khz=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq 2>/dev/null)"
echo "millic=$(cat /sys/class/thermal/thermal_zone0/temp 2>/dev/null)"
echo "load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo "cpus=$(nproc 2>/dev/null)"
echo "arch=$(uname -m)"
echo "kernel=$(uname -r)"
"""


def device_system(dev, *, known_hosts=None) -> dict:
    """The device's machine facts, shaped like sysinfo.system_info() (keys omitted when unreadable);
    versions are this host's edge-sdk/TVM (they built the packages), the runtime's come per row."""
    from edge_sdk.bench.sysinfo import versions
    from edge_sdk.fleet.ssh import Connection

    with Connection(dev, known_hosts=known_hosts) as conn:
        out = conn.run(["sh", "-c", _FACTS]).stdout
    raw = dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)
    info: dict = {"hostname": dev.name, "device": dev.name, "address": dev.address, "versions": versions()}
    for key in ("cpu_model", "arch", "kernel"):
        if raw.get(key, "").strip():
            info[key] = raw[key].strip()
    for key, src, scale in (("clock_mhz", "khz", 1e-3), ("temperature_c", "millic", 1e-3), ("logical_cpus", "cpus", 1)):
        v = raw.get(src, "").strip()
        if v.isdigit():
            info[key] = round(int(v) * scale, 1) if scale != 1 else int(v)
    try:
        info["load_average"] = [float(x) for x in raw.get("load", "").split()][:3] or None
    except ValueError:
        pass
    if info.get("load_average") is None:
        info.pop("load_average", None)
    return info


def run_bench_device(model, *, device: str, fleet: Path | str, known_hosts=None, profile: bool = True,
                     progress: Callable[[str], None] | None = None, **options) -> BenchResult:
    """Compile for the device's target, deploy, run on the device, collect; every failure is a row status.

    `options`: BenchOptions' variants, threads, warmup, repeat and seed. A device that cannot be reached
    or refuses the deploy fails every row with its error; a fleet file or device name that is wrong is a
    UsageError/ConfigError before anything is compiled.
    """
    from edge_sdk.fleet.config import load_fleet
    from edge_sdk.fleet.ssh import default_known_hosts
    from edge_sdk.targets import get_target

    opts = BenchOptions(**options)
    say = progress or (lambda _m: None)
    [dev] = load_fleet(fleet).select(device=device)
    kh = known_hosts or default_known_hosts()
    tgt = get_target(dev.target)
    rows, built = compile_all(model, opts.variants, tgt, threads=opts.threads, seed=opts.seed, say=say,
                              where=f" (device {dev.name})")
    actions, device_error = _deploy(dev, built, kh, say)
    for b in built:
        deployed = actions.get(b.package.name, "")
        for t in opts.threads:
            row = BenchRow("edge-sdk", b.variant.name, b.variant.family, t, package=str(b.package), cached=b.cached,
                           detail=b.note)
            rows.append(row)
            if device_error or deployed.startswith("deploy failed") or not deployed:
                row.status, row.detail = FAILED, device_error or deployed or f"deploy: {b.package.name} not reported"
                continue
            say(f"{b.variant.name}: running on {dev.name} with {t} thread(s)")
            _run_on_device(row, dev, b, opts, known_hosts=kh, profile=profile, deployed=deployed)
    system = device_system(dev, known_hosts=kh) if not device_error else {
        "hostname": dev.name, "device": dev.name, "address": dev.address, "versions": {}}
    ratios(rows)
    options = {"variants": list(opts.variants), "threads": list(opts.threads), "warmup": opts.warmup,
               "repeat": opts.repeat, "profile": profile, "seed": opts.seed, "device": dev.name, "fleet": str(fleet)}
    return BenchResult(model={"name": model.name, "source": model.source, "options": model.options},
                       target=tgt.name, mode="latency", emulate_cpu=None, options=options, system=system, rows=rows,
                       device=dev.name)


def _deploy(dev, built: list[Built], known_hosts, say) -> tuple[dict[str, str], str | None]:
    """({package file name: "installed"/"unchanged" or "deploy failed: ..."}, the device's error or None)."""
    from edge_sdk.fleet.deploy import LocalPackage, deploy

    if not built:
        return {}, None
    say(f"deploying {len(built)} package(s) to {dev.name}")
    [res] = deploy([dev], [LocalPackage.load(b.package) for b in built], known_hosts=known_hosts)
    report = res.value if res.ok else getattr(res.error, "report", None)
    if report is None or report.error:
        return {}, f"deploy to {dev.name}: {report.error if report else failure(res.error)}"
    return {o.package: (o.action if o.error is None else f"deploy failed: {o.error}") for o in report.packages}, None


def _run_on_device(row: BenchRow, dev, b: Built, opts: BenchOptions, *, known_hosts, profile: bool,
                   deployed: str) -> None:
    """One timed run of an installed package on the device; fills the row (failures become its status)."""
    from edge_sdk.fleet.remote import RemoteRun, run_remote
    from edge_sdk.package import read_manifest

    how = RemoteRun(repeat=opts.repeat, warmup=opts.warmup, threads=row.threads, profile=profile)
    try:
        rj = run_remote(dev, b.package, how, known_hosts=known_hosts)
    except (EdgeError, RuntimeError, ValueError, OSError) as e:
        row.status, row.detail = FAILED, f"on {dev.name}: {failure(e)}"
        return
    m = read_manifest(b.package)
    rj["versions"] = {**(m.get("versions") or {}), **{f"runtime_{k}": x for k, x in rj["versions"].items()}}
    row.run_json, row.manifest = rj, m
    row.latency_ms, row.repeats = rj["latency_ms"], rj["repeats"]
    g = m["golden"]
    row.golden = {"ok": rj["golden"]["ok"], "max_abs_err": rj["golden"]["max_abs_err"],
                  "reference": g["reference"], "rtol": g["rtol"], "atol": g["atol"]}
    row.detail = "; ".join(x for x in (f"{deployed} on {dev.name}", b.note) if x)
    if not row.golden["ok"]:
        row.status = WRONG
        row.detail = f"golden check failed on {dev.name}: max abs err {row.golden['max_abs_err']:.3g}"
