#!/bin/sh
# Put edge-sdk's first-boot provisioning onto a Raspberry Pi OS Lite 64-bit (bookworm) image or card.
#
#   sudo ./prepare_sd.sh --image 2024-11-19-raspios-bookworm-arm64-lite.img --key ~/.ssh/id_ed25519.pub \
#                        [--user pi] [--hostname kitchen-pi] [--camera]
#   sudo ./prepare_sd.sh --boot /media/$USER/bootfs --rootfs /media/$USER/rootfs --key ...   # a written card
#
# Boot partition: ssh (turns sshd on), userconf.txt (creates the user without the first-boot
# wizard; its password is random and never used: logins are by key), edge-sdk/ (this folder's
# first-boot script, edge-sdk.conf, authorized_keys). Root partition: edge-sdk-firstboot.service,
# enabled; it runs once and leaves /var/lib/edge-sdk/provisioned. Without --rootfs/--image (e.g. on
# macOS), the boot partition is still prepared; run the script once over SSH instead (README).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
IMAGE= BOOT= ROOTFS= KEY= USER_NAME=pi HOST= CAMERA=no
while [ $# -gt 0 ]; do
  case "$1" in
    --image) IMAGE=$2; shift 2 ;;
    --boot) BOOT=$2; shift 2 ;;
    --rootfs) ROOTFS=$2; shift 2 ;;
    --key) KEY=$2; shift 2 ;;
    --user) USER_NAME=$2; shift 2 ;;
    --hostname) HOST=$2; shift 2 ;;
    --camera) CAMERA=yes; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "prepare_sd: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$KEY" ] && [ -s "$KEY" ] || { echo "prepare_sd: --key PUBLIC_KEY_FILE is required" >&2; exit 2; }
grep -q '^ssh-\|^ecdsa-' "$KEY" || { echo "prepare_sd: $KEY is not an OpenSSH public key" >&2; exit 2; }
case "$USER_NAME" in ''|*[!a-z0-9_-]*|[0-9-]*) echo "prepare_sd: bad --user" >&2; exit 2 ;; esac
case "$HOST" in *[!A-Za-z0-9-]*) echo "prepare_sd: bad --hostname" >&2; exit 2 ;; esac

cleanup() { :; }
if [ -n "$IMAGE" ]; then
  [ "$(id -u)" = 0 ] || { echo "prepare_sd: --image needs root (losetup, mount)" >&2; exit 2; }
  loop=$(losetup -P --show -f "$IMAGE")
  work=$(mktemp -d)
  mkdir "$work/boot" "$work/root"
  cleanup() { umount "$work/boot" "$work/root" 2>/dev/null || true; losetup -d "$loop"; rmdir "$work/boot" "$work/root" "$work"; }
  trap cleanup EXIT
  mount "${loop}p1" "$work/boot"
  mount "${loop}p2" "$work/root"
  BOOT=$work/boot ROOTFS=$work/root
fi
[ -n "$BOOT" ] && [ -f "$BOOT/config.txt" ] || { echo "prepare_sd: $BOOT does not look like a Pi boot partition" >&2; exit 2; }

touch "$BOOT/ssh"
if [ ! -f "$BOOT/userconf.txt" ]; then
  pw=$(head -c 24 /dev/urandom | base64)
  printf '%s:%s\n' "$USER_NAME" "$(printf '%s' "$pw" | openssl passwd -6 -stdin)" > "$BOOT/userconf.txt"
fi
mkdir -p "$BOOT/edge-sdk"
cp "$here/edge-sdk-firstboot.sh" "$BOOT/edge-sdk/edge-sdk-firstboot.sh"
cp "$KEY" "$BOOT/edge-sdk/authorized_keys"
cat > "$BOOT/edge-sdk/edge-sdk.conf" <<CONF
# read by edge-sdk-firstboot.sh
EDGE_USER=$USER_NAME
HOSTNAME=$HOST
INSTALL_NUMPY=yes
INSTALL_CAMERA=$CAMERA
CONF
echo "prepare_sd: boot partition ready ($BOOT)"

if [ -n "$ROOTFS" ]; then
  [ -d "$ROOTFS/etc/systemd/system" ] || { echo "prepare_sd: $ROOTFS is not a root file system" >&2; exit 2; }
  install -m 644 "$here/edge-sdk-firstboot.service" "$ROOTFS/etc/systemd/system/edge-sdk-firstboot.service"
  mkdir -p "$ROOTFS/etc/systemd/system/multi-user.target.wants"
  ln -sf /etc/systemd/system/edge-sdk-firstboot.service \
     "$ROOTFS/etc/systemd/system/multi-user.target.wants/edge-sdk-firstboot.service"
  echo "prepare_sd: first-boot service installed and enabled ($ROOTFS)"
fi
sync
