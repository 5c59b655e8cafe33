"""The Raspberry Pi first-boot script, run as root in an arm64 Debian bookworm userland (the emulated
Pi's cached rootfs, under an overlay so the cache stays clean), offline as a Pi without network."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edge_sdk.devices import stand_in_module


pytestmark = [pytest.mark.qemu, pytest.mark.slow]
emulated = stand_in_module("emulated_pi")
HERE = Path(__file__).resolve().parents[2] / "device_images" / "raspberry_pi"

_CHROOT = r"""set -eu
lower=$1 upper=$2 work=$3 root=$4 boot=$5
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mkdir -p "$root/boot/firmware"
mount --bind "$boot" "$root/boot/firmware"
export EDGE_SDK_OFFLINE=yes PATH=/usr/sbin:/usr/bin:/sbin:/bin
chroot "$root" sh /boot/firmware/edge-sdk/edge-sdk-firstboot.sh
chroot "$root" sh /boot/firmware/edge-sdk/edge-sdk-firstboot.sh >/dev/null   # idempotent
mkdir -p "$root/run/sshd"
chroot "$root" /usr/sbin/sshd -t -f /etc/ssh/sshd_config
"""


def test_firstboot_creates_the_user_key_login_only_offline(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    lower = emulated.rootfs_dir()
    if not (lower / ".edge-sdk-rootfs").exists():
        pytest.skip(f"the emulated Pi rootfs is not built ({lower}): python -m edge_sdk.devices.emulated_pi build")
    try:
        emulated.check_host()
    except emulated.EmulatedError as e:
        pytest.skip(str(e))
    boot = tmp_path / "boot"
    (boot / "edge-sdk").mkdir(parents=True)
    shutil.copy(HERE / "edge-sdk-firstboot.sh", boot / "edge-sdk")
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBfirstbootTESTKEYfirstbootTESTKEYfirstboot0 test@edge-sdk\n"
    (boot / "edge-sdk" / "authorized_keys").write_text(key)
    (boot / "edge-sdk" / "edge-sdk.conf").write_text("EDGE_USER=camuser\nHOSTNAME=door-pi\nINSTALL_CAMERA=yes\n")
    for d in ("upper", "work", "root"):
        (tmp_path / d).mkdir()
    p = subprocess.run(["unshare", "--mount", "sh", "-c", _CHROOT, "sh", str(lower), str(tmp_path / "upper"),
                        str(tmp_path / "work"), str(tmp_path / "root"), str(boot)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "created user camuser" in p.stdout and "no network: not installing" in p.stdout
    up = tmp_path / "upper"
    entry = next(line for line in (up / "etc/passwd").read_text().splitlines() if line.startswith("camuser:"))
    home = Path(entry.split(":")[5].lstrip("/"))
    shadow = next(line for line in (up / "etc/shadow").read_text().splitlines() if line.startswith("camuser:"))
    assert shadow.split(":")[1] == "*"  # no password, not locked: key logins only
    ak = up / home / ".ssh" / "authorized_keys"
    assert ak.read_text() == key and ak.stat().st_mode & 0o777 == 0o600
    conf = (up / "etc/ssh/sshd_config.d/10-edge-sdk.conf").read_text()
    assert "PasswordAuthentication no" in conf and "PermitRootLogin no" in conf
    assert (up / "etc/hostname").read_text().strip() == "door-pi"
    assert (up / "var/lib/edge-sdk/provisioned").exists()
    assert not any(str(tmp_path) in line for line in Path("/proc/self/mountinfo").read_text().splitlines())
