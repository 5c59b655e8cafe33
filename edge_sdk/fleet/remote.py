"""Act on what deploy installed: run an installed package on its device, roll a model back.

    result = run_remote(device, Path("m.edgepkg"), RemoteRun(repeat=10))   # dict: latency, top-k, golden, device
    rollback(device, "mobilenet_v1-float32")                    # current <-> previous, after a check

Both use the device's own runtime (.edge-sdk/runtime/current/bin/edge-runner), so what is
measured is what the device runs; the golden pair is checked on every run (`--expect`).
"""
from __future__ import annotations

import json
import posixpath
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import DeviceError, UsageError
from edge_sdk.fleet.config import Device
from edge_sdk.fleet.deploy import LocalPackage, check_golden_on_device, verify_on_device
from edge_sdk.fleet.device_lock import device_lock
from edge_sdk.fleet.paths import CURRENT_RUNTIME, MODELS, RUNNER, model_dir
from edge_sdk.fleet.ssh import Connection
from edge_sdk.package import MEMBERS


@dataclass(frozen=True)
class RemoteRun:
    """How run_remote runs an installed package (`edge-sdk run PKG --device D`'s options).

    input_path: an .npy/image input instead of the golden input (then no --expect on the device);
    profile: the runner's --profile (`repeat` more runs, every VM call timed), joined with the
    manifest into per_layer_ms with the measured conv/glue split (runtime/profile.py), as a local run."""

    input_path: Path | None = None
    repeat: int = 10
    warmup: int = 1
    threads: int = 1
    k: int = 5  # top-k classes reported
    timeout: float = 1800
    profile: bool = False


def run_remote(device: Device, package: Path, how: RemoteRun | None = None, *, known_hosts=None,
               connection_factory: Callable[..., Connection] = Connection) -> dict:
    """Run the package installed on `device` (found by its sha256) and report like `edge-sdk run --json`."""
    from edge_sdk.package import open_package
    from edge_sdk.runtime.result import load_input

    how = how or RemoteRun()
    pkg = LocalPackage.load(package)
    with tempfile.TemporaryDirectory(prefix="edge-remote-run-") as tmp:
        local = open_package(Path(package), Path(tmp) / "pkg")
        x = load_input(how.input_path, local) if how.input_path else None
        with connection_factory(device, known_hosts=known_hosts) as conn:
            raw, golden, arch = _run_installed(conn, pkg, x, how, Path(tmp))
        out = np.load(Path(tmp) / "out.npy", allow_pickle=False)
        m = local.manifest
    return _report(device, package, m, raw, golden, arch, out, how)


def _run_installed(conn: Connection, pkg: LocalPackage, x: np.ndarray | None, how: RemoteRun,
                   tmp: Path) -> tuple[dict, dict, str]:
    """edge-runner on the installed package (in a scratch folder the device keeps nothing of);
    the output lands in tmp/out.npy. Returns (the runner's JSON, the golden entry, uname -m)."""
    device = conn.device
    install = posixpath.join(model_dir(pkg.name), pkg.sha256)
    scratch = posixpath.join(model_dir(pkg.name), f".run.tmp-{uuid.uuid4().hex[:8]}")
    if conn.run(["test", "-f", posixpath.join(install, "model.so")], check=False).exit_code != 0:
        raise DeviceError(f"device {device}: {pkg.path.name} (sha256 {pkg.sha256[:12]}...) is not installed there",
                          hint=f"edge-sdk deploy {pkg.path} --device {device.name} --fleet ...")
    j = lambda name: posixpath.join(install, name)  # noqa: E731
    conn.run(["mkdir", "-p", scratch])
    try:
        argv = [RUNNER, "--lib", j("model.so"), "--params", j("params.bin"), "--warmup", str(how.warmup),
                "--repeat", str(how.repeat), "--threads", str(how.threads),
                "--output", posixpath.join(scratch, "out.npy")] + (["--profile"] if how.profile else [])
        if x is not None:
            np.save(tmp / "in.npy", np.ascontiguousarray(x), allow_pickle=False)
            conn.put(tmp / "in.npy", posixpath.join(scratch, "in.npy"))
            argv += ["--input", posixpath.join(scratch, "in.npy")]
        else:
            argv += ["--input", j("golden_input.npy"), "--expect", j("golden_output.npy"),
                     "--rtol", repr(pkg.rtol), "--atol", repr(pkg.atol), *pkg.segments]
        r = conn.run(argv, check=False, timeout=how.timeout)
        if r.exit_code not in (0, 3):
            raise DeviceError(f"device {device}: edge-runner failed (exit {r.exit_code}): {r.stderr.strip()[-600:]}")
        raw = json.loads(r.stdout.strip().splitlines()[-1])
        conn.get(posixpath.join(scratch, "out.npy"), tmp / "out.npy")
        golden = raw.get("golden") or check_golden_on_device(conn, install, pkg, runtime=CURRENT_RUNTIME)
        arch = conn.run(["uname", "-m"]).stdout.strip()
    finally:
        conn.run(["rm", "-rf", scratch], check=False)
    return raw, golden, arch


def _report(device: Device, package: Path, m: dict, raw: dict, golden: dict, arch: str, out: np.ndarray,
            how: RemoteRun) -> dict:
    from edge_sdk.runtime.result import latency_stats, head_output, top_k

    lat = np.asarray(raw["latencies_ms"])
    prof = {}
    if how.profile and raw.get("profile"):
        from edge_sdk.runtime.profile import layer_times

        lp = layer_times(m["layers"], raw["profile"])
        prof = {"per_layer_ms": lp.per_layer_ms(),
                "profile": {"median_run_ms": lp.run_ms, "other_ms": lp.other_ms, "kernels": lp.kernels}}
    return {
        "package": str(package), "model": m["model"]["name"], "variant": m["variant"], "target": m["target"]["name"],
        "device": device.name, "address": device.address, "arch": arch,
        "threads": raw["threads"], "repeats": len(lat),
        "latency_ms": latency_stats(lat),
        "load_ms": raw["load_ms"],
        "golden": {"ok": bool(golden["ok"]), "max_abs_err": golden["max_abs_err"]},
        "top_k": [{"class": c, "label": lbl, "score": s} for c, lbl, s in top_k(head_output(out, m), m.get("labels"), how.k)],
        "versions": {"tvm": raw["tvm_version"], "tvm_ffi": raw["tvm_ffi_version"]}, **prof,
        **({"outputs": _outputs(m, golden)} if m.get("outputs") else {}),
    }


def _outputs(m: dict, golden: dict) -> list[dict]:
    """Per output of a several-output package: name, shape, and the device runner's golden check of its slice."""
    segs = golden.get("segments") or [None] * len(m["outputs"])
    return [{"name": o["name"], "shape": o["shape"], "dtype": o["dtype"],
             **({"golden": {"ok": s["mismatches"] == 0, "max_abs_err": s["max_abs_err"], "atol": s["atol"]}}
                if s else {})} for o, s in zip(m["outputs"], segs)]


def rollback(device: Device, model: str, *, known_hosts=None,
             connection_factory: Callable[..., Connection] = Connection) -> dict:
    """Make `previous` current again (and the current one previous), after checking the previous
    install's members and golden pair on the device; refuses when there is nothing to go back to.
    Holds the device lock (device_lock.py): no deploy or tune interleaves with it."""
    with connection_factory(device, known_hosts=known_hosts) as conn, device_lock(conn, "rollback"):
        names = _models(conn)
        if model not in names:
            raise UsageError(f"device {device}: no model '{model}' installed: "
                             + (did_you_mean(model, names) if names else "nothing is installed there"))
        d = model_dir(model)
        cur, prev = conn.readlink(posixpath.join(d, "current")), conn.readlink(posixpath.join(d, "previous"))
        if not prev or prev == cur:
            raise DeviceError(f"device {device}: model {model} has no previous version to roll back to")
        target = posixpath.join(d, prev)
        manifest = conn.read_text(posixpath.join(target, "manifest.json"))
        if manifest is None:
            raise DeviceError(f"device {device}: {model} previous version {prev[:12]} is missing on the device")
        m = json.loads(manifest)
        check = LocalPackage(Path(f"{prev}.edgepkg"), prev, 0, model, m["target"]["arch"], m["target"]["name"],
                             float(m["golden"]["rtol"]), float(m["golden"]["atol"]),
                             {n: v["sha256"] for n, v in m["members"].items()})
        r = conn.run(["sh", "-c", 'cd "$1" && sha256sum -c --quiet --strict -', "sh", target],
                     input=check.checklist(), check=False, timeout=300)
        if r.exit_code != 0 or set(check.members) != set(MEMBERS):
            raise DeviceError(f"device {device}: {model} previous version {prev[:12]} fails its sha256 check; "
                              f"not rolling back: {r.stdout.strip()[-300:]}")
        verify_on_device(conn, target, check, runtime=CURRENT_RUNTIME)  # signed by a trusted key, as at deploy
        golden = check_golden_on_device(conn, target, check, runtime=CURRENT_RUNTIME)
        script = r"""set -e
cd "$1"
ln -s "$2" ".current.tmp-$4"; mv -T ".current.tmp-$4" current
ln -s "$3" ".previous.tmp-$4"; mv -T ".previous.tmp-$4" previous"""
        conn.run(["sh", "-c", script, "sh", d, prev, cur or prev, uuid.uuid4().hex[:8]])
    return {"device": device.name, "model": model, "current": prev, "previous": cur, "golden": golden}


def _models(conn: Connection) -> list[str]:
    return sorted(name for name, _ in conn.listdir(MODELS) if not name.startswith("."))
