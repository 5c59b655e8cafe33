#!/usr/bin/env bash
# Build QEMU's TCG plugins (libinsn.so: executed-instruction counter; libcache.so: L1 I/D + L2 cache
# simulator from contrib/plugins/cache.c; libtiming.so: ours, plugins/timing.c beside this script, per-block
# counts for the A53 timing model) for the installed qemu-user, from Debian's own qemu source
# package, into $EDGE_SDK_CACHE/qemu-plugins/<qemu version>/.
#
# Why: `edge-sdk bench --emulate pi3` counts aarch64 instructions per inference under
# `qemu-aarch64 -cpu cortex-a53 -plugin libinsn.so`, and with --memory also L1D/L2 misses under
# `-plugin libcache.so` configured as a Pi 3B's caches (edge_sdk/qemu/runner.py); Debian ships
# qemu-user without the plugins.
# The plugin API is versioned, so the header comes from the same source version as the binary.
# Needs: gcc, pkg-config, libglib2.0-dev, and deb-src lines (added for bookworm if absent; root).
#
# Package data of edge_sdk (edge_sdk/qemu/), so an installed wheel carries it; the checkout's
# tools/build_qemu_plugins.sh calls it, and MissingDependency's hint names its installed path.
#
#   bash tools/build_qemu_plugins.sh              # idempotent; prints the plugin directory
#   bash tools/build_qemu_plugins.sh --guest-python
#       also makes $EDGE_SDK_CACHE/qemu-guest: an aarch64 Python 3.11 (Debian bookworm arm64 packages
#       unpacked with dpkg-deb, no root filesystem, no chroot) with the aarch64 wheels of numpy,
#       ai-edge-litert 2.3.0 and ncnn in site/, so the bench can count LiteRT's and ncnn's instructions
#       under the same qemu.
set -euo pipefail

CACHE="${EDGE_SDK_CACHE:-$HOME/.cache/edge-sdk}"
LITERT_VERSION="2.3.0"
NCNN_VERSION="1.0.20261020"  # PyPI ncnn: cp311 manylinux_2_28 wheels for aarch64 and x86_64 (pyproject's pin)

guest_python() {
  local guest="$CACHE/qemu-guest" tmp
  local stamp="litert-$LITERT_VERSION ncnn-$NCNN_VERSION"
  if [[ -f "$guest/.built" && "$(cat "$guest/.built")" == "$stamp" ]]; then
    echo "$guest"; return 0
  fi
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs" "$tmp/root"
  : > "$tmp/status"
  # A private apt state (arm64 only, empty dpkg status): the system's apt setup is left untouched.
  local apt=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Dir::State::Lists="$tmp/lists"
             -o Dir::State::status="$tmp/status" -o Dir::Cache="$tmp/cache" -o Debug::NoLocking=1
             -o Dir::Cache::archives="$tmp/debs")
  apt-get "${apt[@]}" update -q >&2
  apt-get "${apt[@]}" install --download-only -y -q python3.11-minimal libpython3.11-stdlib libstdc++6 >&2
  for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  # Pure-Python + manylinux aarch64 wheels, installed for the guest's CPython 3.11.
  python3 -m pip install -q --no-compile --target "$tmp/root/site" --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 \
    --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --python-version 3.11 --implementation cp --only-binary=:all: \
    "ai-edge-litert==$LITERT_VERSION" "numpy>=2,<3" >&2
  # ncnn without its dependencies: `import ncnn` needs only numpy (tqdm, requests, portalocker serve its model_zoo).
  python3 -m pip install -q --no-compile --no-deps --target "$tmp/root/site" --platform manylinux_2_28_aarch64 \
    --python-version 3.11 --implementation cp --only-binary=:all: "ncnn==$NCNN_VERSION" >&2
  echo "$stamp" > "$tmp/root/.built"
  rm -rf "$guest" && mv "$tmp/root" "$guest" && rm -rf "$tmp"
  echo "$guest"
}
command -v qemu-aarch64 >/dev/null || { echo "error: qemu-aarch64 missing (apt-get install qemu-user)" >&2; exit 2; }
VERSION="$(dpkg-query -W -f='${source:Version}' qemu-user 2>/dev/null || true)"
[[ -n "$VERSION" ]] || VERSION="$(qemu-aarch64 --version | sed -n 's/.*(Debian \(.*\)).*/\1/p')"
[[ -n "$VERSION" ]] || { echo "error: cannot tell which qemu version is installed" >&2; exit 2; }
OUT="$CACHE/qemu-plugins/${VERSION//[:+~]/_}"
if [[ "${1:-}" == "--guest-python" ]]; then
  guest_python
fi
PLUGINS_SRC="$(cd "$(dirname "$0")" && pwd)/plugins"
# Rebuild when our own plugin sources (plugins/*.c beside this script) changed since the last build.
STAMP="$VERSION $(cat "$PLUGINS_SRC"/*.c | sha1sum | cut -c1-12)"
if [[ -f "$OUT/libinsn.so" && -f "$OUT/libcache.so" && -f "$OUT/libtiming.so" && -f "$OUT/.built" \
      && "$(cat "$OUT/.built")" == "$STAMP" ]]; then
  echo "$OUT"
  exit 0
fi

SUDO=""; [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
need=()
for p in gcc pkg-config libglib2.0-dev dpkg-dev xz-utils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
if ! apt-get source --download-only "qemu=$VERSION" >&2 2>"$WORK/err"; then
  # No deb-src entries: add them for the suites the deb entries use (Debian 12 deb822 format).
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "build_qemu_plugins: adding deb-src entries for bookworm" >&2
    $SUDO tee /etc/apt/sources.list.d/edge-sdk-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  $SUDO apt-get update -q >&2
  apt-get source --download-only "qemu=$VERSION" >&2
fi
ORIG="$(ls qemu_*.orig.tar.* | head -1)"
# Only the plugin sources and the plugin API header are needed (the full tree is ~100 MB).
tar xf "$ORIG" --wildcards --no-anchored 'tests/plugin/*' 'contrib/plugins/*' 'include/qemu/qemu-plugin.h'
SRCDIR="$(dirname "$(dirname "$(find . -path '*/include/qemu/qemu-plugin.h' | head -1)")")"
SRCDIR="$(dirname "$SRCDIR")"
DEB="$(ls qemu_*.debian.tar.* | head -1)"
if [[ -n "$DEB" ]]; then  # apply Debian's patches that touch these files (usually none)
  mkdir deb && tar xf "$DEB" -C deb
  if [[ -f deb/debian/patches/series ]]; then
    while read -r patch; do
      [[ -z "$patch" || "$patch" == \#* ]] && continue
      if grep -qE '^\+\+\+ .*(tests/plugin/|contrib/plugins/cache.c|include/qemu/qemu-plugin.h)' "deb/debian/patches/$patch"; then
        (cd "$SRCDIR" && patch -p1 -s < "$WORK/deb/debian/patches/$patch") || true
      fi
    done < deb/debian/patches/series
  fi
fi

mkdir -p "$OUT.tmp"
GLIB="$(pkg-config --cflags --libs glib-2.0)"
for src in "$SRCDIR"/tests/plugin/*.c; do
  name="$(basename "$src" .c)"
  # shellcheck disable=SC2086
  gcc -shared -fPIC -O2 -I"$SRCDIR/include/qemu" "$src" -o "$OUT.tmp/lib$name.so" $GLIB
done
# contrib/plugins/cache.c: per-core L1 I and D caches and (with l2=on, qemu >= 7.1) a unified L2,
# LRU/FIFO/random eviction; it prints per-core totals and the top `limit` missing instructions.
# shellcheck disable=SC2086
gcc -shared -fPIC -O2 -I"$SRCDIR/include/qemu" "$SRCDIR/contrib/plugins/cache.c" -o "$OUT.tmp/libcache.so" $GLIB
# Ours (plugins/ beside this script): libtiming.so records per-block, per-vCPU counts and A53 cache misses for
# the Cortex-A53 timing model (edge_sdk/timing/), against the same qemu-plugin.h.
for src in "$PLUGINS_SRC"/*.c; do
  # shellcheck disable=SC2086
  gcc -shared -fPIC -O2 -Wall -I"$SRCDIR/include/qemu" "$src" -o "$OUT.tmp/lib$(basename "$src" .c).so" $GLIB
done
[[ -f "$OUT.tmp/libinsn.so" ]] || { echo "error: libinsn.so was not built" >&2; exit 1; }
# Smoke test: the plugin loads into this qemu and counts something.
printf 'int main(void){return 0;}\n' > t.c
if command -v aarch64-linux-gnu-gcc >/dev/null; then
  aarch64-linux-gnu-gcc -O1 t.c -o t
  qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin "$OUT.tmp/libinsn.so",inline=on -d plugin -D log ./t
  grep -q 'insns: [1-9]' log || { echo "error: libinsn.so loaded but counted nothing: $(cat log)" >&2; exit 1; }
  qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin "$OUT.tmp/libcache.so",l2=on,limit=0 -d plugin -D clog ./t
  grep -qE '^0 +[1-9][0-9]* ' clog || { echo "error: libcache.so loaded but reported no totals: $(cat clog)" >&2; exit 1; }
  qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin "$OUT.tmp/libtiming.so",out="$WORK/tlog" ./t
  grep -q '^T end 1' tlog || { echo "error: libtiming.so loaded but wrote no profile" >&2; exit 1; }
fi
# The guest clock shim: counts are deterministic only if the guest's code path is, and timing loops,
# printed latencies and Python's start-up read the clock and random bytes. LD_PRELOADed into the guest
# (qemu -E), it makes every clock read advance a fixed 1 ms and random bytes constant.
if command -v aarch64-linux-gnu-gcc >/dev/null; then
  cat > fakeclock.c <<'C'
#define _GNU_SOURCE
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
static unsigned long long ns = 1700000000ULL * 1000000000ULL;
int clock_gettime(clockid_t clk, struct timespec *ts) {
  (void)clk;
  ns += 1000000ULL;
  ts->tv_sec = (time_t)(ns / 1000000000ULL);
  ts->tv_nsec = (long)(ns % 1000000000ULL);
  return 0;
}
int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  clock_gettime(CLOCK_REALTIME, &ts);
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}
time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
ssize_t getrandom(void *buf, size_t n, unsigned flags) {
  (void)flags;
  memset(buf, 0x5a, n);
  return (ssize_t)n;
}
C
  aarch64-linux-gnu-gcc -shared -fPIC -O2 fakeclock.c -o "$OUT.tmp/libfakeclock-aarch64.so"
fi
echo "$STAMP" > "$OUT.tmp/.built"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "$OUT"
