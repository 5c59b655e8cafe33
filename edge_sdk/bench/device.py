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

from edge_sdk.bench.bench import _int8_source, package_folder
from edge_sdk.bench.rows import FAILED, UNAVAILABLE, WRONG, BenchResult, BenchRow, failure, ratios
from edge_sdk.compiler.cache import cached_package
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


def run_bench_device(model, *, variants: list[str], device: str, fleet: Path | str, threads: list[int] = (1,),
                     warmup: int = 3, repeat: int = 5, profile: bool = True, seed: int = 0, known_hosts=None,
                     progress: Callable[[str], None] | None = None) -> BenchResult:
    """Compile for the device's target, deploy, run on the device, collect; every failure is a row status.

    A device that cannot be reached or refuses the deploy fails every row with its error; a fleet
    file or device name that is wrong is a UsageError/ConfigError before anything is compiled.
    """
    from edge_sdk.fleet.config import load_fleet
    from edge_sdk.fleet.deploy import LocalPackage, deploy
    from edge_sdk.fleet.remote import RemoteRun, run_remote
    from edge_sdk.fleet.ssh import default_known_hosts
    from edge_sdk.package import read_manifest
    from edge_sdk.targets import get_target
    from edge_sdk.variants import VARIANTS

    say = progress or (lambda _m: None)
    [dev] = load_fleet(fleet).select(device=device)
    kh = known_hosts or default_known_hosts()
    tgt = get_target(dev.target)
    rows: list[BenchRow] = []
    built: dict[str, tuple[Path, bool, str]] = {}
    for name in variants:
        v = VARIANTS[name]
        if not v.available:
            rows += [BenchRow("edge-sdk", name, v.family, t, UNAVAILABLE, "variant not implemented yet in this version")
                     for t in threads]
            continue
        try:
            src, note = _int8_source(model, v)
            say(f"{name}: compiling for {tgt.name} (device {dev.name}), or reusing the cached package")
            pkg, cached = cached_package(src, v, tgt, folder=package_folder(), seed=seed, progress=say)
            built[name] = (pkg, cached, note)
        except (EdgeError, RuntimeError, ValueError, OSError) as e:
            rows += [BenchRow("edge-sdk", name, v.family, t, FAILED, f"compile: {failure(e)}") for t in threads]

    actions: dict[str, str] = {}  # package file name -> "installed"/"unchanged", or the error
    device_error = None
    if built:
        say(f"deploying {len(built)} package(s) to {dev.name}")
        [res] = deploy([dev], [LocalPackage.load(p) for p, _, _ in built.values()], known_hosts=kh)
        report = res.value if res.ok else getattr(res.error, "report", None)
        if report is None or report.error:
            device_error = f"deploy to {dev.name}: {report.error if report else failure(res.error)}"
        else:
            actions = {o.package: (o.action if o.error is None else f"deploy failed: {o.error}")
                       for o in report.packages}

    for name, (pkg, cached, note) in built.items():
        v = VARIANTS[name]
        deployed = actions.get(pkg.name, "")
        for t in threads:
            row = BenchRow("edge-sdk", name, v.family, t, package=str(pkg), cached=cached, detail=note)
            rows.append(row)
            if device_error or deployed.startswith("deploy failed") or not deployed:
                row.status, row.detail = FAILED, device_error or deployed or f"deploy: {pkg.name} not reported"
                continue
            say(f"{name}: running on {dev.name} with {t} thread(s)")
            try:
                rj = run_remote(dev, pkg, RemoteRun(repeat=repeat, warmup=warmup, threads=t, profile=profile), known_hosts=kh)
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                row.status, row.detail = FAILED, f"on {dev.name}: {failure(e)}"
                continue
            m = read_manifest(pkg)
            rj["versions"] = {**(m.get("versions") or {}), **{f"runtime_{k}": x for k, x in rj["versions"].items()}}
            row.run_json, row.manifest = rj, m
            row.latency_ms, row.repeats = rj["latency_ms"], rj["repeats"]
            g = m["golden"]
            row.golden = {"ok": rj["golden"]["ok"], "max_abs_err": rj["golden"]["max_abs_err"],
                          "reference": g["reference"], "rtol": g["rtol"], "atol": g["atol"]}
            row.detail = "; ".join(x for x in (f"{deployed} on {dev.name}", note) if x)
            if not row.golden["ok"]:
                row.status = WRONG
                row.detail = f"golden check failed on {dev.name}: max abs err {row.golden['max_abs_err']:.3g}"
    system = device_system(dev, known_hosts=kh) if not device_error else {
        "hostname": dev.name, "device": dev.name, "address": dev.address, "versions": {}}
    ratios(rows)
    result = BenchResult(model={"name": model.name, "source": model.source, "options": model.options},
                         target=tgt.name, mode="latency", emulate_cpu=None,
                         options={"variants": list(variants), "threads": list(threads), "warmup": warmup,
                                  "repeat": repeat, "profile": profile, "seed": seed, "device": dev.name,
                                  "fleet": str(fleet)},
                         system=system, rows=rows, device=dev.name)
    return result
