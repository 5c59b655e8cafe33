"""MetaSchedule on a real device: build candidates here, time them there with the device runtime.

    builder = ms.builder.LocalBuilder(f_export=export_for(target))       # a .so for the device
    runner = make_device_runner(device="kitchen-pi", fleet=Path("fleet.yaml"), target=target)
    ms.tune_tir(mod, target.tvm_target(), work_dir, 64, builder=builder, runner=runner)
    runner.close()

Why not TVM's RPCRunner: a Pi in the fleet runs no TVM RPC server and has no Python TVM; it has our
SSH access (strict host keys) and the runtime bundle's edge-runner, which times a kernel with
`--kernel` (runtime/device/runner_kernel.h) against the same libtvm_runtime that runs models there.

Per candidate: upload the .so into a scratch folder under ~/.edge-sdk over one SSH connection that
lives as long as the runner, run `edge-runner --kernel` under the device's `timeout`, delete the
.so in the same command; at the end of each batch the scratch folder goes too, so the device keeps
only what deploy put there (the runtime bundle, installed by deploy's own code path). Every failure
(the candidate crashes or runs too long, the device is unreachable, refuses the key, has another
architecture) becomes that candidate's RunnerResult.error_msg naming the device; nothing waits
without a bound. Once the device cannot be reached, the rest of that batch fails at once instead
of timing out candidate by candidate; the next batch tries again.

Candidates run one at a time on a worker thread (timings must not overlap on the device), so
run() returns at once and the tuner can build the next batch meanwhile.
"""
from __future__ import annotations

import json
import math
import os
import posixpath
import signal
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerInput, RunnerResult

from edge_sdk.errors import DeviceError, EdgeError, UsageError
from edge_sdk.fleet.config import Device, load_fleet
from edge_sdk.fleet.deploy import LocalBundle, _prepare, install_runtime
from edge_sdk.fleet.paths import REMOTE_ROOT, RUNTIME
from edge_sdk.fleet.ssh import Connection
from edge_sdk.targets import Target, get_target

ENTRY = "main"  # MetaSchedule tasks are single-PrimFunc modules named "main"; the built library exports it
_SCRATCH_PREFIX = ".tune-"  # ~/.edge-sdk/.tune-<id>/: one runner's candidates, removed after each batch
_STALE_MINUTES = 60  # a scratch folder untouched this long was left by a cut session: swept on connect

# "$1" seconds, "$2" the candidate, then the runner's argv: the device kills a candidate that runs
# too long (the SSH timeout alone would leave it running there) and deletes it whatever happened.
_RUN_SH = r"""t=$1 cand=$2
shift 2
timeout -k 2 "$t" "$@"
rc=$?
rm -f "$cand"
exit $rc"""
_SWEEP_SH = r"""find "$1" -maxdepth 1 -type d -name "$2*" -mmin +"$3" -exec rm -rf {} + 2>/dev/null
mkdir -p "$4"
"""


class _Export:
    """f_export for LocalBuilder: a picklable object (the builder sends it to its worker
    processes), exporting like compile_model exports model.so: the target's cross compiler,
    or the host's when there is none."""

    def __init__(self, target_name: str):
        self.target_name = target_name

    def __call__(self, mod) -> str:
        fcompile = get_target(self.target_name).compiler()
        path = os.path.join(tempfile.mkdtemp(prefix="edge-tune-cand-"), "candidate.so")
        if fcompile is None:
            mod.export_library(path)
        else:
            mod.export_library(path, fcompile=fcompile)
        return path


def export_for(target: Target | str) -> Callable:
    """The f_export that makes a candidate a shared library edge-runner can load on `target`
    (no NEEDED entries; its symbols resolve against the bundle's libtvm_runtime/libtvm_ffi).
    Raises CompileError now, naming the Debian package, if the cross compiler is missing."""
    target = get_target(target) if isinstance(target, str) else target
    target.compiler()
    return _Export(target.name)


@dataclass(frozen=True)
class RunnerOptions:
    """How a device runner times a candidate: each run_secs has `repeat` entries, seconds per call
    averaged over `number` calls (more when a repeat would take under min_repeat_ms), after
    max(warmup, 1) untimed calls. `threads` is the device runtime's thread pool size: 1 by default, as
    `edge-sdk run` and `bench` run models (a schedule tuned at one thread count need not win at
    another). `timeout_s` bounds one candidate's edge-runner on the device (load, warm-up and every
    repeat; the device kills it then); `connect_timeout_s` bounds reaching the device."""

    number: int = 3
    repeat: int = 3
    warmup: int = 1
    min_repeat_ms: float = 20.0
    threads: int = 1
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0

    def __post_init__(self):
        for name, lo in (("number", 1), ("repeat", 1), ("warmup", 0), ("threads", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < lo:
                raise UsageError(f"device runner: {name} must be an integer >= {lo}, got {value!r}")
        if not (self.timeout_s > 0 and self.connect_timeout_s > 0 and self.min_repeat_ms >= 0):
            raise UsageError("device runner: timeout_s and connect_timeout_s must be > 0, min_repeat_ms >= 0")
        for name in ("min_repeat_ms", "timeout_s", "connect_timeout_s"):
            object.__setattr__(self, name, float(getattr(self, name)))


DEFAULT_OPTIONS = RunnerOptions()


def make_device_runner(*, device: str, fleet: Path, target: Target | str | None = None,
                       known_hosts: Path | None = None, options: RunnerOptions = DEFAULT_OPTIONS):
    """A MetaSchedule runner timing candidates on fleet device `device` (as RunnerOptions says).
    `target` (default: the device's target in the fleet file) must match the device's architecture."""
    devices = load_fleet(fleet).select(device=device)
    dev = devices[0]
    tgt = get_target(target or dev.target) if not isinstance(target, Target) else target
    return DeviceRunner(dev, tgt, known_hosts=known_hosts, options=options)


@derived_object
class _DeviceFuture(PyRunnerFuture):
    def __init__(self, future: Future):
        super().__init__()
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> RunnerResult:
        run_secs, error = self._future.result()  # every step on the worker is bounded by a timeout
        return RunnerResult(run_secs, error)


class _Batch:
    """What candidates of one run() call share: the first unreachable-device error."""

    def __init__(self):
        self.error: str | None = None


class _Session:
    """The SSH side, used only on the runner's worker thread."""

    def __init__(self, device: Device, target: Target, known_hosts: Path | None, opts: RunnerOptions):
        self.device, self.target, self.known_hosts, self.opts = device, target, known_hosts, opts
        self.scratch = posixpath.join(REMOTE_ROOT, f"{_SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}")
        self.conn: Connection | None = None
        self.runner: str | None = None  # edge-runner of the installed bundle, once checked
        self.scratch_made = False  # the scratch folder exists (end_batch removes it)
        self.bundle: LocalBundle | None = None

    def connect(self) -> Connection:
        """An open connection with the current bundle installed and the scratch folder made."""
        if self.conn is not None and self.conn.is_connected and self.runner is not None:
            if not self.scratch_made:
                self.conn.run(["mkdir", "-p", self.scratch], timeout=60)
                self.scratch_made = True
            return self.conn
        self.close()
        conn = Connection(self.device, known_hosts=self.known_hosts, connect_timeout=self.opts.connect_timeout_s,
                          io_timeout=max(10.0, min(60.0, self.opts.timeout_s)))
        self.conn = conn
        arch = _prepare(conn)  # deploy's layout and sweep of cut installs; `uname -m`
        if arch != self.target.arch:
            raise DeviceError(f"device {self.device}: it is {arch}, but the candidates are built for target "
                              f"{self.target.name} ({self.target.arch})")
        if self.bundle is None:
            self.bundle = LocalBundle.for_arch(arch)
        install_runtime(conn, self.bundle)  # "present" after one sha256 when the device has it
        conn.run(["sh", "-c", _SWEEP_SH, "sh", REMOTE_ROOT, _SCRATCH_PREFIX, str(_STALE_MINUTES), self.scratch],
                 timeout=60)
        self.runner = posixpath.join(RUNTIME, self.bundle.id, "bin", "edge-runner")
        self.scratch_made = True
        return conn

    def measure(self, index: int, artifact: str, args: list, batch: _Batch) -> tuple[list[float] | None, str | None]:
        if batch.error is not None:
            return None, batch.error
        if not os.path.isfile(artifact):
            return None, f"device {self.device}: candidate {index}: cannot read the artifact {artifact}: no such file"
        try:
            conn = self.connect()
        except EdgeError as e:
            self.close()
            batch.error = str(e)
            return None, batch.error
        label = f"candidate {index} ({artifact})"
        remote = posixpath.join(self.scratch, f"c{index}-{uuid.uuid4().hex[:8]}.so")
        o = self.opts
        argv = [self.runner, "--kernel", remote, "--func", ENTRY, "--args", json.dumps(args),
                "--warmup", str(o.warmup), "--number", str(o.number), "--repeat", str(o.repeat),
                "--min-repeat-ms", repr(o.min_repeat_ms), "--threads", str(o.threads)]
        try:
            conn.put(artifact, remote)
            t0 = time.monotonic()
            r = conn.run(["sh", "-c", _RUN_SH, "sh", f"{o.timeout_s:g}", remote, *argv], check=False,
                         timeout=o.timeout_s + 15)
            took = time.monotonic() - t0
        except OSError as e:  # the local artifact is gone or unreadable
            return None, f"device {self.device}: {label}: cannot read the artifact: {e}"
        except EdgeError as e:
            self.runner = None  # the session may be broken: check it again before the next candidate
            return None, f"{e} [{label}]"
        if r.exit_code != 0:
            return None, f"device {self.device}: {label} {_failure(r.exit_code, o.timeout_s, took)}" + (
                f": {r.stderr.strip()[-800:]}" if r.stderr.strip() else "")
        try:
            secs = [float(s) for s in json.loads(r.stdout.strip().splitlines()[-1])["run_secs"]]
        except (IndexError, KeyError, TypeError, ValueError):
            return None, f"device {self.device}: {label}: edge-runner printed no timing: {r.stdout[-300:]!r}"
        if len(secs) != o.repeat or not all(math.isfinite(s) and s > 0 for s in secs):
            return None, f"device {self.device}: {label}: implausible timing {secs}"
        return secs, None

    def end_batch(self) -> None:
        """Remove this runner's scratch folder (best effort: a cut session's is swept later)."""
        if self.conn is not None and self.conn.is_connected:
            try:
                self.conn.run(["rm", "-rf", "--", self.scratch], check=False, timeout=60)
            except EdgeError:
                pass
        self.scratch_made = False

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.runner = None, None


def _failure(code: int, timeout_s: float, took: float) -> str:
    # timeout(1) exits 124 after its SIGTERM, 137 (128 + SIGKILL) after -k; a SIGKILL well before
    # the time limit came from elsewhere, most likely the kernel's out-of-memory killer
    if code == 124 or (code == 137 and took >= timeout_s):
        return f"timed out after {timeout_s:g} s on the device (killed)"
    if code == 137:
        return f"was killed on the device after {took:.1f} s (SIGKILL: out of memory?)"
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"crashed on the device ({name})"
    return f"failed on the device (edge-runner --kernel exit {code})"


def _shutdown(pool: ThreadPoolExecutor, session: _Session) -> None:
    """Finalizer: clean up on the worker (the only thread that uses the connection), then stop it."""
    try:
        pool.submit(lambda: (session.end_batch(), session.close())).result(timeout=120)
    except Exception:  # noqa: BLE001 - the pool may be shut down already (close() ran) or the interpreter ending
        session.close()
    pool.shutdown(wait=False)


@derived_object
class DeviceRunner(PyRunner):
    """The runner make_device_runner returns; `close()` removes the scratch folder and disconnects."""

    def __init__(self, device: Device, target: Target, *, known_hosts: Path | None, options: RunnerOptions):
        super().__init__()
        self.device, self.target, self.options = device, target, options
        self._session = _Session(device, target, known_hosts, options)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edge-tune-{device.name}")
        self._finalizer = weakref.finalize(self, _shutdown, self._pool, self._session)

    def run(self, runner_inputs: list[RunnerInput]) -> list[_DeviceFuture]:
        batch = _Batch()
        futures = []
        for i, ri in enumerate(runner_inputs):
            try:
                if str(ri.device_type) not in ("cpu", "llvm"):
                    raise UsageError(f"device type '{ri.device_type}' is not a CPU")
                args = [_arg(a.as_json()) for a in ri.args_info]
            except UsageError as e:
                f: Future = Future()
                f.set_result((None, f"device {self.device}: candidate {i}: {e}"))
            else:
                f = self._pool.submit(self._session.measure, i, str(ri.artifact_path), args, batch)
            futures.append(_DeviceFuture(f))
        self._pool.submit(self._session.end_batch)
        return futures

    def close(self) -> None:
        self._finalizer()


def _arg(info) -> list:
    """MetaSchedule's ["TENSOR", dtype, shape] -> edge-runner's [shape, dtype]."""
    if not (isinstance(info, (list, tuple)) and len(info) == 3 and info[0] == "TENSOR"):
        raise UsageError(f"only tensor arguments can be timed, got {info!r}")
    return [[int(d) for d in info[2]], str(info[1])]
