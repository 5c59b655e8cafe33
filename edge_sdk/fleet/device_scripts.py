"""The device-side steps of deploy, as POSIX sh + coreutils + tar (the Ansible playbook runs the same).

Arguments come as "$1"... and are never spliced into the text. The rules every script keeps:

- a switch is one rename of a link: `ln -s TARGET .current.tmp-TAG` then `mv -T` over `current`;
- the live copy (what `current` names) is never renamed or removed before another checked copy is
  live: repairing the live version first points `current` at the new checked copy, then puts a
  hard-linked copy (`cp -al`) under the final name and points `current` there;
- a sweep removes only what neither `current` nor `previous` names (temporary names of a cut run
  included), and runs only under the device lock (device_lock.py), so it never takes another
  deploy's files.

Stopping any script after any of its commands leaves `current` naming a complete, checked copy:
tests/fleet/test_trust_switch.py stops each one after each command in turn and checks that.
"""
from __future__ import annotations

# Sweep one models/<name>/ folder ($1): keep current, previous and what they name. A repair cut
# while `current` named its checked temporary copy is finished first (copy under the sha256 name,
# then `current` there). A shell function shared by PREPARE_SH and SWITCH_SH.
_SWEEP_MODEL = r"""sweep_model() {
  cur=$(readlink "$1/current" || true); prev=$(readlink "$1/previous" || true)
  case $cur in .*.tmp-*)
    s=${cur#.}; s=${s%%.tmp-*}
    rm -rf "$1/.$s.link-fix"
    cp -al "$1/$cur" "$1/.$s.link-fix"
    if [ -e "$1/$s" ] && [ "$s" != "$prev" ]; then rm -rf "$1/$s"; fi
    if [ ! -e "$1/$s" ]; then mv -T "$1/.$s.link-fix" "$1/$s"; fi
    ln -s "$s" "$1/.current.tmp-fix"
    mv -T "$1/.current.tmp-fix" "$1/current"
    cur=$s ;;
  esac
  for d in "$1"/* "$1"/.[!.]*; do
    n=${d##*/}
    if [ ! -e "$d" ] && [ ! -L "$d" ]; then continue; fi
    case $n in current|previous) continue ;; esac
    if [ "$n" != "$cur" ] && [ "$n" != "$prev" ]; then rm -rf "$d"; fi
  done
}
"""

# $1: the install root. Layout, then sweep what cut runs left (never what `current` names); prints the
# kernel's machine and the userland's word size (a 32-bit OS on a 64-bit kernel says aarch64, then 32).
PREPARE_SH = r"""set -e
mkdir -p "$1/runtime" "$1/packages" "$1/models"
""" + _SWEEP_MODEL + r"""rt=$(readlink "$1/runtime/current" || true); live=${rt%%/*}
for d in "$1"/runtime/.[!.]*; do
  n=${d##*/}
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then continue; fi
  if [ "$n" != "$live" ]; then rm -rf "$d"; fi
done
rm -f "$1"/packages/.*.part-*
for m in "$1"/models/*; do
  if [ -d "$m" ] && [ ! -L "$m" ]; then sweep_model "$m"; fi
done
uname -m
getconf LONG_BIT 2>/dev/null || true"""

# $1 archive, $2 temporary folder, $3 bundle id; stdin: the bundle's sha256sum checklist.
EXTRACT_RUNTIME_SH = r"""set -e
arc=$1 tmp=$2 id=$3
tar -tzvf "$arc" | while IFS= read -r l; do case $l in -*|d*) ;; *)
  echo "refusing the runtime archive: a member is not a regular file or directory (a link could point outside the install root): $l" >&2; exit 4 ;; esac; done
tar -tzf "$arc" | while IFS= read -r m; do case $m in "$id"|"$id/"*) ;; *) m=..; esac; case /$m/ in */../*)
  echo "refusing the runtime archive: a member path leaves $id/ (path traversal)" >&2; exit 4 ;; esac; done
mkdir "$tmp"
tar -xzf "$arc" -C "$tmp" --no-same-owner
for n in "$tmp"/* "$tmp"/.[!.]*; do
  if [ -e "$n" ] && [ "$n" != "$tmp/$id" ]; then echo "unexpected entry in the archive: ${n##*/}" >&2; exit 4; fi
done
cd "$tmp/$id"
cat > ../checklist
sha256sum -c --quiet --strict ../checklist
odd=$(find . ! -type d ! -type f -print | head -n 3)
if [ -n "$odd" ]; then echo "not regular files: $odd" >&2; exit 4; fi
want=$(wc -l < ../checklist)
have=$(find . -type f ! -name bundle.json -print | wc -l)
if [ "$want" != "$have" ]; then echo "the bundle has $have files, bundle.json lists $want" >&2; exit 4; fi"""

# $1 temporary folder (holding <id>/), $2 runtime/<id>, $3 archive, $4 tag, $5 id, $6 "place" to leave
# runtime/current alone (deploy re-checks the installed models first), else it is switched too.
PLACE_RUNTIME_SH = r"""set -e
rt=${2%/*} tag=$4 id=$5
cur=$(readlink "$rt/current" || true)
if [ "$cur" = "$id" ]; then
  ln -s "${1##*/}/$id" "$rt/.current.tmp-$tag"
  mv -T "$rt/.current.tmp-$tag" "$rt/current"
fi
if [ -e "$2" ]; then mv -T "$2" "$rt/.$id.old-$tag"; fi
cp -al "$1/$id" "$rt/.$id.link-$tag"
mv -T "$rt/.$id.link-$tag" "$2"
if [ "$cur" = "$id" ] || [ "${6:-}" != place ]; then
  ln -s "$id" "$rt/.current.tmp-$tag"
  mv -T "$rt/.current.tmp-$tag" "$rt/current"
fi
rm -rf "$rt/.$id.old-$tag" "$1" "$3"
"""

# $1 runtime folder, $2 bundle id, $3 tag: runtime/current -> <id>, one rename.
LINK_RUNTIME_SH = r"""set -e
ln -s "$2" "$1/.current.tmp-$3"
mv -T "$1/.current.tmp-$3" "$1/current"
"""

# $1 package file, $2 temporary folder, $3..$7 manifest.json and the four members; signature.json is
# the sixth name. stdin: the members' sha256sum checklist.
EXTRACT_PACKAGE_SH = r"""set -e
tar -tvf "$1" | while IFS= read -r l; do case $l in -*) ;; *)
  echo "refusing the package: a member is not a regular file (a link could point outside the install root): $l" >&2; exit 4 ;; esac; done
names=$(tar -tf "$1")
printf '%s\n' "$names" | while IFS= read -r m; do case $m in "$3"|"$4"|"$5"|"$6"|"$7"|signature.json) ;; *)
  echo "refusing the package: unexpected member '$m' (path traversal or an extra file)" >&2; exit 4 ;; esac; done
if [ "$(printf '%s\n' "$names" | sort -u | wc -l)" != 6 ] || [ "$(printf '%s\n' "$names" | wc -l)" != 6 ]; then
  echo "refusing the package: members missing or repeated (signature.json included)" >&2; exit 4; fi
mkdir -p "$2"
tar -xf "$1" -C "$2" --no-same-owner "$3" "$4" "$5" "$6" "$7" signature.json
cd "$2"
sha256sum -c --quiet --strict -
n=$(find . ! -type d -print | wc -l)
if [ "$n" != 6 ] || [ -n "$(find . ! -type d ! -type f -print)" ]; then echo "unexpected entries after extraction" >&2; exit 4; fi"""

# $1 runtime folder (with python/ and edge_sdk_runtime/), $2 extracted package, $3 trusted-keys file.
VERIFY_PACKAGE_SH = r"""set -e
exec python3 -I "$1/edge_sdk_runtime/verify_package.py" "$2" "$3"
"""

# $1 models/<name>, $2 sha256, $3 the checked temporary folder, $4 tag.
SWITCH_SH = r"""set -e
""" + _SWEEP_MODEL + r"""cd "$1"
sha=$2 tmp=${3##*/} tag=$4
cur=$(readlink current || true)
if [ "$cur" = "$sha" ]; then
  ln -s "$tmp" ".current.tmp-$tag"
  mv -T ".current.tmp-$tag" current
fi
if [ -e "$sha" ]; then mv -T "$sha" ".old-$tag"; fi
cp -al "$tmp" ".$sha.link-$tag"
mv -T ".$sha.link-$tag" "$sha"
if [ -n "$cur" ] && [ "$cur" != "$sha" ]; then
  ln -s "$cur" ".previous.tmp-$tag"
  mv -T ".previous.tmp-$tag" previous
fi
ln -s "$sha" ".current.tmp-$tag"
mv -T ".current.tmp-$tag" current
sweep_model ."""

# $1 the install root: delete stored package files no model's current or previous names.
GC_PACKAGES_SH = r"""cd "$1" || exit 0
keep=$(for l in models/*/current models/*/previous; do readlink "$l"; done 2>/dev/null | tr '\n' ' ')
for f in packages/*.edgepkg; do
  s=${f##*/}; s=${s%.edgepkg}
  case " $keep " in *" $s "*) ;; *) rm -f "$f" ;; esac
done"""

# The Ansible playbook's hold on the device lock (deploy's is device_lock.py: the same flock(1) file).
# HOLD_LOCK_SH runs as an async task: $1 lock file, $2 the run's token path, $3 wait s, $4 stale s. Once it
# has the lock it writes $2.locked and holds on while $2.hold exists and was touched in the last $4 s (the
# play touches it before each package and removes it at the end); a wait that runs out writes $2.busy.
HOLD_LOCK_SH = r"""mkdir -p "${1%/*}"
flock -w "$3" "$1" sh -c ': > "$1.hold"; : > "$1.locked"
while [ -e "$1.hold" ]; do
  t=$(stat -c %Y "$1.hold" 2>/dev/null) || break
  if [ $(( $(date +%s) - t )) -ge "$2" ]; then break; fi
  sleep 1
done
rm -f "$1.hold" "$1.locked"' sh "$2" "$4" || : > "$2.busy"
"""

# $1 the run's token path, $2 wait s: returns once HOLD_LOCK_SH has the lock; fails if its wait ran out.
WAIT_LOCK_SH = r"""i=0
while [ ! -e "$1.locked" ]; do
  if [ -e "$1.busy" ] || [ "$i" -gt $(( $2 * 10 + 300 )) ]; then
    rm -f "$1.busy"
    echo "another edge-sdk deploy, rollback, tune or Ansible run held the device lock for $2 s" >&2; exit 1
  fi
  sleep 0.1; i=$((i + 1))
done"""

# $1 the run's token path: the hold is still ours (renewed), or fail before anything else is changed.
RENEW_LOCK_SH = r"""[ -e "$1.locked" ] && touch "$1.hold" || { echo "the device lock lapsed" >&2; exit 1; }"""

# $1 the run's token path: let go (the holder sees $1.hold gone within a second), then tidy.
RELEASE_LOCK_SH = r"""rm -f "$1.hold"
i=0
while [ -e "$1.locked" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
rm -f "$1.locked" "$1.busy"
"""
