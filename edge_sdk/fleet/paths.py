"""Where edge-sdk keeps things on a device: the one list of device paths.

Every path is POSIX and relative to the login user's home (commands and SFTP both start there):

    .edge-sdk/runtime/<bundle id>/                 bin/edge-runner, lib/, bundle.json  (id = <version>-<arch>)
    .edge-sdk/runtime/current -> <bundle id>
    .edge-sdk/packages/<sha256>.edgepkg            a package file, named by its content
    .edge-sdk/models/<model>-<variant>/<sha256>/   its members, extracted and checked
    .edge-sdk/models/<model>-<variant>/current -> <sha256>, previous -> <older sha256>
    .edge-sdk/apps/classify/                       the demo's classify app (apps/classify)
    .edge-sdk/frames/demo/                         frames the demo classifies
    .edge-sdk/results/                             what the demo's app writes (jsonl)

deploy writes the runtime, packages and models parts; status reads them; remote runs and rolls
back from them; the demo adds the app, frames and results.
"""
from __future__ import annotations

import posixpath

REMOTE_ROOT = ".edge-sdk"
RUNTIME = posixpath.join(REMOTE_ROOT, "runtime")
PACKAGES = posixpath.join(REMOTE_ROOT, "packages")
MODELS = posixpath.join(REMOTE_ROOT, "models")
CURRENT_RUNTIME = posixpath.join(RUNTIME, "current")
RUNNER = posixpath.join(CURRENT_RUNTIME, "bin", "edge-runner")  # the installed runtime's runner
CLASSIFY_APP = posixpath.join(REMOTE_ROOT, "apps", "classify")
DEMO_FRAMES = posixpath.join(REMOTE_ROOT, "frames", "demo")
RESULTS = posixpath.join(REMOTE_ROOT, "results")


def runner(runtime: str) -> str:
    """edge-runner inside a runtime folder (runtime/<bundle id> or runtime/current)."""
    return posixpath.join(runtime, "bin", "edge-runner")


def package_file(sha256: str) -> str:
    return posixpath.join(PACKAGES, f"{sha256}.edgepkg")


def model_dir(name: str) -> str:
    """models/<model>-<variant>: its installs by sha256, `current` and `previous`."""
    return posixpath.join(MODELS, name)
