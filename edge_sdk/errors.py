"""One error root for edge-sdk, mapped to process exit codes.

Every error names the thing it is about (file, line, key, device, op) in its message.
"""
from __future__ import annotations


class EdgeError(Exception):
    """Root of all edge-sdk errors. `exit_code` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{msg}\n  hint: {self.hint}" if self.hint else msg


class UsageError(EdgeError):
    """Bad command-line input: unknown model, variant, target, missing file."""

    exit_code = 2


class ConfigError(EdgeError):
    """A configuration file (fleet YAML, ...) is invalid; the message names file:line key."""

    exit_code = 3


class ModelError(EdgeError):
    """A model file is corrupt or uses an op we do not support; names the file and op."""

    exit_code = 4


class CompileError(EdgeError):
    """Lowering or building failed, or the toolchain (cross compiler) is missing."""

    exit_code = 5


class PackageError(EdgeError):
    """A .edgepkg is unreadable, incomplete or fails its checksums."""

    exit_code = 6


class RuntimeFailure(EdgeError):
    """Running a compiled model failed (runner crash, golden check mismatch)."""

    exit_code = 7


class DeviceError(EdgeError):
    """A device is unreachable, refuses its host key, or a remote step failed."""

    exit_code = 8


class MissingDependency(EdgeError):
    """An optional dependency is not installed; the message says what to install."""

    exit_code = 9
