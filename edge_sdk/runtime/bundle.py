"""The versioned runtime bundle: everything a device needs to run a compiled model, and no compiler.

Layout of a bundle directory (cached under $EDGE_SDK_CACHE/runtime/<version>-<arch>/):

    bin/edge-runner            our C++ runner (runner.cc), rpath $ORIGIN/../lib
    lib/libtvm_runtime.so      from the apache-tvm wheel for <arch>
    lib/libtvm_ffi.so          from the apache-tvm-ffi wheel for <arch>
    edge_sdk_runtime/          loader.py, so Python on the device can load models too; preprocess.py (image ->
                               model input, as the host does it); eval_batch.py (the device half of eval)
    python/                    tvm_ffi (the wheel's Python part for <arch>, its core extension built for
                               each device Python side by side -- core.cpython-311-*.so for Raspberry Pi
                               OS Bookworm, core.cpython-313-*.so for Trixie; Python picks by the suffix --
                               and lib/libtvm_ffi_testing.so; libtvm_ffi.so is found in ../lib) and
                               typing_extensions.py: a device with python3 + numpy needs no pip.
                               verify_package.py checks signatures in pure Python: no compiled extension
    bundle.json                version, arch, sha256 + size of every file, total size
    bundle.sig.json            added by deploy on the device: Ed25519 over bundle.json (signing.py)

Why built here and not on the device: a Pi has no compiler and little time; the aarch64 runner is
cross-built with Debian's aarch64-linux-gnu-g++ against the libraries of the aarch64 manylinux
wheels. The `version` is a hash of every member, so deploy can install a bundle once and skip it
when the device already has that version. Libraries the members need beyond the bundle must be in
a Raspberry Pi OS Lite 64-bit base image (bookworm, the older of the two); the build checks that with readelf.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from edge_sdk.errors import CompileError, UsageError

TVM_VERSION = "0.27.0.post1"
TVM_FFI_VERSION = "0.1.14.post1"
# The device Pythons the aarch64 bundle carries tvm_ffi's extension for: Bookworm's 3.11, Trixie's 3.13.
DEVICE_PYTHONS = ("311", "313")
ARCHES = ("aarch64", "x86_64")
_WHEEL_PLATFORM = {"aarch64": "manylinux_2_28_aarch64"}
_CXX = {"aarch64": ("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu"), "x86_64": ("g++", "g++")}
# In a Raspberry Pi OS Lite 64-bit (bookworm) base image; anything else NEEDED must be bundled.
_SYSTEM_LIBS = frozenset({
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libstdc++.so.6",
    "libgcc_s.so.1", "ld-linux-aarch64.so.1", "ld-linux-x86-64.so.2",
})
# Newest symbol versions bookworm provides (glibc 2.36, gcc 12).
_SYSTEM_MAX = {"GLIBC": (2, 36), "GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13)}
_HERE = Path(__file__).resolve().parent
_DEVICE = _HERE / "device"  # what ships: the Python modules below and the runner's sources
_PY_MODULES = ("loader.py", "preprocess.py", "eval_batch.py", "verify_package.py")  # runtime/device/*.py, in this order
_RUNNER_SOURCES = ("runner.cc", "runner_profile.h", "runner_kernel.h")  # runtime/device/: edge-runner's C++
_BUILD_REV = "6"  # bump when the build recipe changes (4: edge-runner --kernel; 5: verify_package.py; 6: cp313, no PyNaCl)


def cache_root() -> Path:
    return Path(os.environ.get("EDGE_SDK_CACHE") or "~/.cache/edge-sdk").expanduser()


def ensure_bundle(arch: str, *, rebuild: bool = False) -> Path:
    """The bundle directory for `arch`, built on first use (or when `rebuild`) and cached.

    A cached bundle is reused when it was built from the same inputs (runner.cc, loader.py, wheel
    versions, compiler, recipe); its files are not re-hashed here (verify_bundle does that).
    """
    _check_arch(arch)
    cxx = _compiler(arch)
    key = _inputs_key(arch, cxx)
    runtime_dir = cache_root() / "runtime"
    if not rebuild:
        for meta in sorted(runtime_dir.glob(f"*-{arch}/bundle.json")):
            try:
                if json.loads(meta.read_text()).get("inputs_key") == key:
                    return meta.parent
            except (OSError, ValueError):
                continue
    runtime_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{arch}-", dir=runtime_dir))
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the device install may be shared
    try:
        meta = _build(tmp, arch, cxx, key)
        final = runtime_dir / f"{meta['version']}-{arch}"
        if final.exists():  # same content already there (rebuild, or a concurrent build)
            shutil.rmtree(tmp)
            return final
        os.replace(tmp, final)
        return final
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def bundle_archive(arch: str, *, rebuild: bool = False) -> Path:
    """A reproducible .tar.gz of the bundle (members under `<version>-<arch>/`), for deploy."""
    root = ensure_bundle(arch, rebuild=rebuild)
    out = root.parent / f"{root.name}.tar.gz"
    if out.exists() and not rebuild:
        return out
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=6) as tar:
        for path in [root, *sorted(p for p in root.rglob("*") if "__pycache__" not in p.parts)]:
            rel = path.relative_to(root).as_posix()
            info = tar.gettarinfo(str(path), arcname=root.name if rel == "." else f"{root.name}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            if path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, out)
    return out


def read_bundle_manifest(bundle: Path) -> dict:
    return json.loads((bundle / "bundle.json").read_text())


def verify_bundle(bundle: Path) -> list[str]:
    """Problems found (empty when every file matches bundle.json and nothing extra is there).

    Deploy can run the same check on the device before switching to a bundle."""
    meta = read_bundle_manifest(bundle)
    problems = []
    # Python on the device writes __pycache__ next to loader.py: not part of the bundle.
    present = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    for rel, info in meta["files"].items():
        p = bundle / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
        elif _sha256(p) != info["sha256"] or p.stat().st_size != info["size"]:
            problems.append(f"{rel}: sha256/size differ from bundle.json")
    problems += [f"{rel}: not listed in bundle.json" for rel in sorted(present - set(meta["files"]) - {"bundle.json"})]
    return problems


# ---- build ---------------------------------------------------------------------------------

def _check_arch(arch: str) -> None:
    if arch not in ARCHES:
        raise UsageError(f"unknown runtime arch '{arch}': expected one of {', '.join(ARCHES)}")


def _compiler(arch: str) -> str:
    from edge_sdk.system_tools import require

    cxx, _package = _CXX[arch]
    require((cxx,), why=f"building the {arch} runtime bundle")  # MissingDependency, exit 9
    return cxx


def _inputs_key(arch: str, cxx: str) -> str:
    h = hashlib.sha256()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    for part in (_BUILD_REV, arch, TVM_VERSION, TVM_FFI_VERSION, *DEVICE_PYTHONS,
                 version.splitlines()[0] if version else cxx):
        h.update(part.encode() + b"\0")
    for name in (*_RUNNER_SOURCES, *_PY_MODULES):
        h.update((_DEVICE / name).read_bytes())
    h.update(_typing_extensions().read_bytes())
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _build(root: Path, arch: str, cxx: str, key: str) -> dict:
    src = _wheel_tree(arch)
    (root / "bin").mkdir()
    (root / "lib").mkdir()
    (root / "edge_sdk_runtime").mkdir()
    shutil.copy2(src / "tvm/lib/libtvm_runtime.so", root / "lib/libtvm_runtime.so")
    shutil.copy2(src / "tvm_ffi/lib/libtvm_ffi.so", root / "lib/libtvm_ffi.so")
    for name in _PY_MODULES:
        shutil.copy2(_DEVICE / name, root / "edge_sdk_runtime" / name)
    (root / "edge_sdk_runtime/__init__.py").write_text(
        '"""edge-sdk device runtime: `from edge_sdk_runtime.loader import load`."""\n')
    _copy_python(src / "tvm_ffi", root / "python")
    cmd = [
        cxx, "-std=c++17", "-O2", "-s", "-fPIE", "-pie",
        # Header paths end up in error messages; map them so the binary (and so the version)
        # does not depend on where the cache or the checkout is.
        f"-ffile-prefix-map={src}=/wheel", f"-ffile-prefix-map={_DEVICE}=/edge_sdk/runtime",
        f"-I{src / 'tvm_ffi/include'}",
        f'-DEDGE_TVM_VERSION="{TVM_VERSION}"', f'-DEDGE_TVM_FFI_VERSION="{TVM_FFI_VERSION}"',
        str(_DEVICE / "runner.cc"), "-o", str(root / "bin/edge-runner"),
        f"-L{root / 'lib'}", "-Wl,--no-as-needed", "-ltvm_runtime", "-ltvm_ffi", "-Wl,--as-needed",
        "-Wl,-rpath,$ORIGIN/../lib",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CompileError(f"building edge-runner for {arch} failed:\n{proc.stderr[-4000:]}")
    needed, maxver = _check_elves(root, arch)
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            files[p.relative_to(root).as_posix()] = {"sha256": _sha256(p), "size": p.stat().st_size}
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]
    meta = {
        "name": "edge-sdk-runtime",
        "version": f"{TVM_VERSION}-{digest}",
        "arch": arch,
        "tvm_version": TVM_VERSION,
        "tvm_ffi_version": TVM_FFI_VERSION,
        "typing_extensions_version": importlib.metadata.version("typing_extensions"),
        "device_pythons": _pythons(root / "python/tvm_ffi"),
        "runner": "bin/edge-runner",
        "inputs_key": key,
        "compiler": cxx,
        "system_libs_needed": sorted(needed),
        "max_symbol_versions": maxver,
        "files": files,
        "total_size": sum(f["size"] for f in files.values()),
    }
    (root / "bundle.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _check_elves(root: Path, arch: str) -> tuple[set[str], dict[str, str]]:
    """NEEDED libraries outside the bundle must be in the Pi OS base image, with old enough symbols."""
    py_elves = sorted((root / "python").rglob("*.so"))
    bundled = {p.name for p in (root / "lib").iterdir()} | {p.name for p in py_elves}
    needed: set[str] = set()
    newest: dict[str, tuple[int, ...]] = {}
    for elf in [root / "bin/edge-runner", *sorted((root / "lib").iterdir()), *py_elves]:
        dyn = _readelf(["-d", str(elf)])
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn):
            if lib in bundled:
                continue
            if lib not in _SYSTEM_LIBS:
                raise CompileError(f"{elf.name} ({arch}) needs {lib}, which is neither bundled nor in the base image")
            needed.add(lib)
        for name, ver in re.findall(r"\b(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)+)\b", _readelf(["-V", str(elf)])):
            v = tuple(int(x) for x in ver.split("."))
            if v > _SYSTEM_MAX[name]:
                raise CompileError(f"{elf.name} ({arch}) needs {name}_{ver}, newer than Raspberry Pi OS bookworm has")
            newest[name] = max(newest.get(name, v), v)
    return needed, {k: ".".join(map(str, v)) for k, v in sorted(newest.items())}


def _readelf(args: list[str]) -> str:
    proc = subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CompileError(f"readelf {' '.join(args)} failed: {proc.stderr.strip()}", hint="apt-get install binutils")
    return proc.stdout


def _typing_extensions() -> Path:
    """tvm_ffi imports typing_extensions (pure Python, newer than Debian's): taken from this venv."""
    spec = importlib.util.find_spec("typing_extensions")
    if spec is None or not spec.origin:
        raise CompileError("the runtime bundle needs the 'typing_extensions' module", hint="pip install typing_extensions")
    return Path(spec.origin)


def _copy_python(ffi: Path, dest: Path) -> None:
    """tvm_ffi's Python files, core extension and libtvm_ffi_testing.so (which the core needs via
    RUNPATH $ORIGIN/lib), without sources, headers and __pycache__. libtvm_ffi.so itself is not
    copied: libinfo falls back to <bundle>/lib, and one copy means one FFI registry."""
    for p in sorted(ffi.rglob("*")):
        rel = p.relative_to(ffi)
        if not p.is_file() or {"__pycache__", "3rdparty", "include", "cython", "share"} & set(rel.parts):
            continue
        if rel.suffix == ".py" or rel.name.startswith("core.") or rel.as_posix() == "lib/libtvm_ffi_testing.so":
            (dest / "tvm_ffi" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest / "tvm_ffi" / rel)
    shutil.copy2(_typing_extensions(), dest / "typing_extensions.py")


def _pythons(ffi: Path) -> list[str]:
    """The Python versions tvm_ffi's core extension is here for ("3.11", "3.13")."""
    tags = (re.match(r"core\.cpython-(\d)(\d+)-", p.name) for p in sorted(ffi.glob("core.*.so")))
    return [f"{m.group(1)}.{m.group(2)}" for m in tags if m]


def _unpack(wheels: list[Path], tree: Path, keep: str) -> Path:
    """The wheels' members whose names match `keep`, unpacked into `tree` (whole or not at all: a
    temporary folder renamed into place, marked .complete)."""
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=tree.parent))
    try:
        for whl in wheels:
            with zipfile.ZipFile(whl) as z:
                for name in z.namelist():
                    if re.fullmatch(keep, name):
                        z.extract(name, tmp)
        (tmp / ".complete").write_text("\n".join(w.name for w in wheels) + "\n")
        if tree.exists():
            shutil.rmtree(tree)
        os.replace(tmp, tree)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return tree


# ---- wheels --------------------------------------------------------------------------------

def _wheel_tree(arch: str) -> Path:
    """A directory with tvm/lib, tvm_ffi/lib and tvm_ffi/include for `arch`.

    x86_64: the host's installed wheels (checked to be the pinned versions). aarch64: the
    manylinux wheels, downloaded once into the cache and unpacked (only the parts we use).
    """
    if arch == "x86_64":
        for dist, want in (("apache-tvm", TVM_VERSION), ("apache-tvm-ffi", TVM_FFI_VERSION)):
            have = importlib.metadata.version(dist)
            if have != want:
                raise CompileError(f"the x86_64 bundle needs {dist}=={want} installed, found {have}")
        tvm_dir = Path(importlib.util.find_spec("tvm").origin).parent
        ffi_dir = Path(importlib.util.find_spec("tvm_ffi").origin).parent
        if tvm_dir.parent != ffi_dir.parent:
            raise CompileError(f"tvm ({tvm_dir}) and tvm_ffi ({ffi_dir}) are not installed side by side")
        return tvm_dir.parent
    tree = cache_root() / "wheels" / f"{arch}-tvm{TVM_VERSION}-ffi{TVM_FFI_VERSION}-cp{'-'.join(DEVICE_PYTHONS)}-py"
    if (tree / ".complete").exists():
        return tree
    return _unpack(_download_wheels(arch), tree, r"tvm/lib/libtvm_runtime\.so|tvm_ffi/lib/libtvm_ffi(_testing)?\.so"
                   r"|tvm_ffi/include/.*|tvm_ffi/.*\.py|tvm_ffi/core\.[^/]*\.so")


def _download_wheels(arch: str) -> list[Path]:
    wheels = _download(arch, {"apache_tvm-": TVM_VERSION}, [f"apache-tvm=={TVM_VERSION}"])
    for py in DEVICE_PYTHONS:  # tvm_ffi's core is a CPython extension: one build per device Python
        wheels += _download(arch, {"apache_tvm_ffi-": TVM_FFI_VERSION}, [f"apache-tvm-ffi=={TVM_FFI_VERSION}"], py)
    return wheels


def _download(arch: str, pins: dict[str, str], requirements: list[str], python: str = "311") -> list[Path]:
    """The pinned wheels for `arch` and CPython `python` ("311") in the cache (pip download once; no install)."""
    dest = cache_root() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)

    def found() -> list[Path]:  # a version-specific wheel (cpXY-cpXY) or one for every Python (py3-none)
        return [w for w in dest.glob(f"*{arch}*.whl") for p, v in pins.items()
                if w.name.lower().startswith(p.lower() + v + "-")
                and (f"-cp{python}-" in w.name or "-py3-none-" in w.name)]
    if len(found()) == len(pins):
        return found()
    cmd = [
        sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
        "--platform", _WHEEL_PLATFORM[arch], "--platform", f"manylinux2014_{arch}", "--python-version", python,
        "-d", str(dest), *requirements,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or len(found()) != len(pins):
        raise CompileError(f"downloading the {arch} wheels failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    return found()
