#!/bin/sh
# edge-sdk first boot for Raspberry Pi OS Lite 64-bit (bookworm). Runs as root, once, at boot
# (edge-sdk-firstboot.service) or by hand over SSH: `ssh pi@HOST sudo sh -s < edge-sdk-firstboot.sh`.
# Idempotent: running it again only re-checks.
#
# Reads its settings from $EDGE_SDK_BOOT (default /boot/firmware/edge-sdk; /boot/edge-sdk on older
# layouts): edge-sdk.conf (shell variables, below) and authorized_keys (the deploy key). It
#   1. creates the deploy user (no password: key login only) and installs authorized_keys,
#   2. turns SSH on with keys only (no passwords, no root login),
#   3. sets the hostname (if HOSTNAME is given),
#   4. checks what the edge-sdk runtime needs from the base image (libstdc++6, tar, gzip, sha256sum)
#      and, when the network allows, installs python3-numpy (for the Python loader; the C++ runner
#      needs none) and optionally python3-picamera2 (camera apps).
# The runtime bundle itself (runner, libtvm_runtime, libtvm_ffi) comes with `edge-sdk deploy`, so a
# device without internet access is fine.
set -eu

BOOT=${EDGE_SDK_BOOT:-}
if [ -z "$BOOT" ]; then
  for d in /boot/firmware/edge-sdk /boot/edge-sdk; do [ -d "$d" ] && BOOT=$d && break; done
fi
[ -n "$BOOT" ] && [ -d "$BOOT" ] || { echo "edge-sdk-firstboot: no settings folder (/boot/firmware/edge-sdk)" >&2; exit 2; }

EDGE_USER=pi
HOSTNAME=
INSTALL_NUMPY=yes
INSTALL_CAMERA=no
# shellcheck disable=SC1091
[ -f "$BOOT/edge-sdk.conf" ] && . "$BOOT/edge-sdk.conf"
log() { echo "edge-sdk-firstboot: $*"; }

case "$EDGE_USER" in
  ''|*[!a-z0-9_-]*|[0-9-]*) echo "edge-sdk-firstboot: bad EDGE_USER '$EDGE_USER'" >&2; exit 2 ;;
esac
[ -s "$BOOT/authorized_keys" ] || { echo "edge-sdk-firstboot: $BOOT/authorized_keys is missing or empty" >&2; exit 2; }

# 1. the deploy user
if ! getent passwd "$EDGE_USER" >/dev/null; then
  useradd -m -s /bin/bash -G video "$EDGE_USER" 2>/dev/null || useradd -m -s /bin/bash "$EDGE_USER"
  log "created user $EDGE_USER"
fi
usermod -p '*' "$EDGE_USER"   # no password login; '*' is not locked, so key logins work
home=$(getent passwd "$EDGE_USER" | cut -d: -f6)
install -d -m 700 -o "$EDGE_USER" -g "$EDGE_USER" "$home/.ssh"
install -m 600 -o "$EDGE_USER" -g "$EDGE_USER" "$BOOT/authorized_keys" "$home/.ssh/authorized_keys"
log "authorized $(grep -c . "$BOOT/authorized_keys") key(s) for $EDGE_USER"

# 2. SSH: keys only
install -d -m 755 /etc/ssh/sshd_config.d
cat > /etc/ssh/sshd_config.d/10-edge-sdk.conf <<CONF
# written by edge-sdk-firstboot.sh
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
PubkeyAuthentication yes
CONF
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl enable ssh >/dev/null 2>&1 || true
  systemctl restart ssh || systemctl start ssh || true
fi
log "ssh host key: $(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)"

# 3. hostname
if [ -n "$HOSTNAME" ]; then
  echo "$HOSTNAME" > /etc/hostname
  [ -f /etc/hosts ] || printf '127.0.0.1\tlocalhost\n' > /etc/hosts
  sed -i "s/^127\.0\.1\.1.*/127.0.1.1\t$HOSTNAME/" /etc/hosts
  grep -q "^127\.0\.1\.1" /etc/hosts || printf '127.0.1.1\t%s\n' "$HOSTNAME" >> /etc/hosts
  hostname "$HOSTNAME" 2>/dev/null || true
  log "hostname $HOSTNAME"
fi

# 4. what the runtime needs from the base image
missing=
for cmd in tar gzip sha256sum mv ln readlink find; do command -v "$cmd" >/dev/null || missing="$missing $cmd"; done
for lib in libstdc++.so.6 libgcc_s.so.1; do
  ls /lib/*-linux-gnu/$lib /usr/lib/*-linux-gnu/$lib >/dev/null 2>&1 || missing="$missing $lib"
done
[ -z "$missing" ] || { echo "edge-sdk-firstboot: the base image lacks:$missing" >&2; exit 3; }
want=
[ "$INSTALL_NUMPY" = yes ] && ! dpkg -s python3-numpy >/dev/null 2>&1 && want="$want python3-numpy"
[ "$INSTALL_CAMERA" = yes ] && ! dpkg -s python3-picamera2 >/dev/null 2>&1 && want="$want python3-picamera2"
if [ -n "$want" ]; then
  if [ "${EDGE_SDK_OFFLINE:-no}" != yes ] && apt-get update -q >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $want
    log "installed$want"
  else
    log "no network: not installing$want (the C++ runner does not need them)"
  fi
fi

install -d -m 755 /var/lib/edge-sdk
date -u +%Y-%m-%dT%H:%M:%SZ > /var/lib/edge-sdk/provisioned
log "done; deploy with: edge-sdk fleet trust ... && edge-sdk deploy PKG --fleet fleet.yaml"
