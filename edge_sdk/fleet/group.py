"""Fleet fan-out, shaped like fabric's Group: run one function per device, never stop at the first failure.

    results = for_each_device(devices, lambda d: status(d))   # FleetResults, in the devices' order
    results.ok, results.failed                                # per-device DeviceResult (.value / .error)
    results.raise_if_failed("status")                         # GroupError carrying every result

A failure on one device (an EdgeError, or a bug) is recorded in that device's result and the
others carry on; GroupError is a DeviceError, so the CLI maps it to the device exit code.

The pool grows with the fleet (one thread per device, up to MAX_THREADS): a device that is off or
silent costs its connect timeout in a thread of its own, not a turn in a short queue, so 300 silent
devices take about 3 connect timeouts, not 300 / 8 of them. Work heavier than a few commands
(deploy's uploads) is bounded separately by the caller (deploy's max_workers).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from edge_sdk.errors import DeviceError, EdgeError
from edge_sdk.fleet.config import Device


@dataclass(frozen=True)
class DeviceResult:
    device: Device
    value: object = None
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def failed(self) -> bool:
        return self.error is not None


class FleetResults(list):
    """Per-device results in the order the devices were given."""

    @property
    def ok(self) -> list[DeviceResult]:
        return [r for r in self if r.ok]

    @property
    def failed(self) -> list[DeviceResult]:
        return [r for r in self if r.failed]

    @property
    def all_ok(self) -> bool:
        return not self.failed

    def raise_if_failed(self, what: str = "operation") -> None:
        if self.failed:
            raise GroupError(what, self)


class GroupError(DeviceError):
    """An operation failed on some devices of a group; `.results` holds every device's result
    (the ones that worked too), `.failed` the failed ones."""

    def __init__(self, what: str, results: FleetResults):
        lines = [f"  {r.device.name}: {r.error}" for r in results.failed]
        super().__init__(f"{what} failed on {len(results.failed)} of {len(results)} devices:\n" + "\n".join(lines))
        self.what = what
        self.results = results

    @property
    def failed(self) -> list[DeviceResult]:
        return self.results.failed


MAX_THREADS = 128  # threads that mostly wait on the network; each costs ~100 KB of stack here


def default_workers(devices: Sequence[Device]) -> int:
    return max(1, min(len(devices), MAX_THREADS))


def for_each_device(devices: Sequence[Device], fn: Callable[[Device], object], *, max_workers: int | None = None,
                    on_done: Callable[[DeviceResult], None] | None = None) -> FleetResults:
    """Call fn(device) for every device on a thread pool (max_workers threads; default: default_workers,
    which grows with the fleet); a failure is recorded in that device's result and the others carry on.
    on_done (progress display) runs as each one ends."""

    def one(device: Device) -> DeviceResult:
        start = time.monotonic()
        try:
            result = DeviceResult(device, value=fn(device), seconds=time.monotonic() - start)
        except EdgeError as e:
            result = DeviceResult(device, error=e, seconds=time.monotonic() - start)
        except Exception as e:  # noqa: BLE001 - a bug on one device must not hide the other devices' results
            result = DeviceResult(device, error=e, seconds=time.monotonic() - start)
        if on_done is not None:
            on_done(result)
        return result

    if not devices:
        return FleetResults()
    workers = default_workers(devices) if max_workers is None else max(1, min(max_workers, len(devices)))
    with ThreadPoolExecutor(max_workers=workers,
                            thread_name_prefix="edge-sdk-device") as pool:
        return FleetResults(pool.map(one, devices))
