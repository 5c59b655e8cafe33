#!/usr/bin/env bash
# Set up edge-sdk on Debian 12 (as root, or with sudo available): apt packages, the .venv, and the
# runtime bundles (host and aarch64). Idempotent: a second run only checks. Heavy artifacts (downloaded
# wheels, built bundles) are cached under $EDGE_SDK_CACHE (default ~/.cache/edge-sdk), not in the repo.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev g++ g++-aarch64-linux-gnu qemu-user qemu-user-static binfmt-support debootstrap
              openssh-server openssh-client iproute2 ca-certificates chromium python3-numpy
              llvm-14)  # llvm-mc-14: the A53 timing model disassembles executed blocks (edge_sdk/timing)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
stamp=.venv/.edge-sdk-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch "$stamp"
fi

# The device runtime bundles (model runner + libtvm_runtime + libtvm_ffi) for this machine and for Pis.
.venv/bin/python - <<'PY'
from edge_sdk.runtime.bundle import ensure_bundle
import platform
for arch in dict.fromkeys([platform.machine(), "aarch64"]):
    print(f"setup: runtime bundle {arch}: {ensure_bundle(arch)}")
PY
# QEMU's libinsn.so for `bench --emulate` and the qemu tests, and the aarch64 guest Python (numpy, LiteRT, ncnn)
bash tools/build_qemu_plugins.sh --guest-python >/dev/null
echo "setup: done (.venv/bin/edge-sdk is the CLI)"
