"""A device with a 32-bit OS is refused at deploy by name, with what to install instead, before anything
is sent. The devices are stand-ins (edge_sdk/devices/folders.py: commands run here by subprocess), whose
`uname -m` and `getconf LONG_BIT` answer what a Raspberry Pi OS (32-bit) answers: programs of those
names first on PATH."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from edge_sdk.fleet.config import parse_fleet
from edge_sdk.fleet.deploy import deploy
from edge_sdk.devices.folders import StandInDevices

FLEET = """\
defaults: {target: host}
devices:
  old-pi: {host: pi@10.9.0.1}
"""


def _answering(bin_dir: Path, program: str, option: str, answer: str) -> None:
    """`program option` prints answer; any other call goes to the real program."""
    bin_dir.mkdir(exist_ok=True)
    p = bin_dir / program
    p.write_text(f'#!/bin/sh\nif [ "$1" = "{option}" ]; then echo {answer}; exit 0; fi\n'
                 f'PATH=/usr/bin:/bin exec {program} "$@"\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.mark.parametrize("machine, bits, named", [
    ("armv7l", "32", "(armv7l)"),
    ("armv6l", "32", "(armv6l)"),
    ("aarch64", "32", "a 64-bit kernel (aarch64) with a 32-bit (armhf) userland"),
])
def test_a_32_bit_os_is_refused_by_name_before_anything_is_sent(tmp_path, monkeypatch, v1, machine, bits, named):
    bin_dir = tmp_path / "bin"
    _answering(bin_dir, "uname", "-m", machine)
    _answering(bin_dir, "getconf", "LONG_BIT", bits)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    stand_in = StandInDevices(tmp_path / "devices")
    results = deploy(parse_fleet(FLEET).select(), [v1], connection_factory=stand_in.connect)
    err = results[0].error.report.error
    assert not results.all_ok and "device old-pi" in err and named in err, err
    assert "32-bit ARM OS" in err and "Raspberry Pi OS (64-bit)" in err, err
    assert not [1 for _, op, _ in stand_in.log if op == "put"]  # neither the runtime nor the package was sent


def test_a_64_bit_os_passes(tmp_path, monkeypatch, v1):
    """The same stand-in answering as Raspberry Pi OS (64-bit) does would pass the check; here the device is
    this x86_64 machine, so the check lets it through to the deploy, which succeeds."""
    stand_in = StandInDevices(tmp_path / "devices")
    assert deploy(parse_fleet(FLEET).select(), [v1], connection_factory=stand_in.connect).all_ok
