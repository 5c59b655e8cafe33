"""The device runtime: bundle contents, the C++ runner natively and under qemu, the Python loader.

A tiny Relax model main(x, p0000, p0001) = relu(x @ p0000 + p0001) exercises the params
convention (weights passed in key order from params.bin); numpy is the reference.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.errors import MissingDependency, RuntimeFailure, UsageError
from edge_sdk.runtime import bundle as bundle_mod
from edge_sdk.runtime import LocalRun, bundle_archive, ensure_bundle, read_bundle_manifest, run_compiled, verify_bundle
from edge_sdk.runtime.execute import host_arch

HOST = host_arch()
RNG = np.random.default_rng(7)
W = RNG.standard_normal((16, 10)).astype("float32")
B = RNG.standard_normal(10).astype("float32")
X = RNG.standard_normal((1, 16)).astype("float32")


def _reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x.astype(np.float64) @ W + B, 0).astype(np.float32)


def _build_model(out_dir: Path, target_name: str) -> tuple[Path, Path]:
    import tvm
    from tvm import relax

    from edge_sdk.targets import get_target

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16), "float32"))
    w = relax.Var("p0000", relax.TensorType((16, 10), "float32"))
    b = relax.Var("p0001", relax.TensorType((10,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, w), b))
            y = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(y)
    target = get_target(target_name)
    ex = tvm.compile(bb.get(), target.tvm_target())
    lib = out_dir / f"model-{target_name}.so"
    ex.export_library(str(lib), fcompile=target.compiler())
    params = out_dir / "params.bin"
    tvm.runtime.save_param_dict_to_file({"p0000": tvm.runtime.tensor(W), "p0001": tvm.runtime.tensor(B)},
                                        str(params))
    return lib, params


@pytest.fixture(scope="module")
def host_model(tmp_path_factory):
    return _build_model(tmp_path_factory.mktemp("host"), "host")


@pytest.fixture(scope="module")
def pi3_model(tmp_path_factory):
    return _build_model(tmp_path_factory.mktemp("pi3"), "pi3")


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ---- bundle ------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_bundle_manifest_matches_files(arch):
    root = ensure_bundle(arch)
    meta = read_bundle_manifest(root)
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts} - {"bundle.json"}
    assert set(meta["files"]) == on_disk
    assert {"bin/edge-runner", "lib/libtvm_runtime.so", "lib/libtvm_ffi.so",
            "edge_sdk_runtime/loader.py"} <= on_disk
    for rel, info in meta["files"].items():
        assert info["sha256"] == _sha256(root / rel), rel
        assert info["size"] == (root / rel).stat().st_size, rel
    assert meta["total_size"] == sum(i["size"] for i in meta["files"].values())
    assert meta["arch"] == arch and root.name == f"{meta['version']}-{arch}"
    assert verify_bundle(root) == []
    assert ensure_bundle(arch) == root  # cached, not rebuilt


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_bundle_elves_need_only_bundle_or_base_image(arch):
    root = ensure_bundle(arch)
    machine = {"x86_64": "X86-64", "aarch64": "AArch64"}[arch]
    for elf in [root / "bin/edge-runner", *(root / "lib").iterdir()]:
        header = subprocess.run(["readelf", "-h", str(elf)], capture_output=True, text=True, check=True).stdout
        assert machine in header, elf
        dyn = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn):
            assert (root / "lib" / lib).exists() or lib in bundle_mod._SYSTEM_LIBS, (elf.name, lib)
    runpath = subprocess.run(["readelf", "-d", str(root / "bin/edge-runner")], capture_output=True,
                             text=True, check=True).stdout
    assert "$ORIGIN/../lib" in runpath


def test_aarch64_bundle_runs_on_bookworm_and_trixie_pythons():
    """tvm_ffi's core extension for each device Python (Bookworm 3.11, Trixie 3.13) side by side, and no
    other compiled Python extension (the signature check is pure Python: no nacl/_cffi_backend)."""
    root = ensure_bundle("aarch64")
    meta = read_bundle_manifest(root)
    cores = sorted(f for f in meta["files"] if f.startswith("python/tvm_ffi/core."))
    assert cores == ["python/tvm_ffi/core.cpython-311-aarch64-linux-gnu.so",
                     "python/tvm_ffi/core.cpython-313-aarch64-linux-gnu.so"]
    assert meta["device_pythons"] == ["3.11", "3.13"]
    extensions = [f for f in meta["files"] if f.startswith("python/") and f.endswith(".so") and "/lib/" not in f]
    assert extensions == [c for c in extensions if c in cores], extensions


def test_verify_bundle_reports_a_changed_file(tmp_path):
    import shutil

    copy = tmp_path / "b"
    shutil.copytree(ensure_bundle("x86_64"), copy)
    loader = copy / "edge_sdk_runtime/loader.py"
    loader.write_text(loader.read_text() + "# tampered\n")
    (copy / "lib/extra.so").write_bytes(b"x")
    problems = verify_bundle(copy)
    assert any(p.startswith("edge_sdk_runtime/loader.py") for p in problems)
    assert any(p.startswith("lib/extra.so") for p in problems)


def test_bundle_archive_holds_the_bundle():
    root = ensure_bundle("x86_64")
    archive = bundle_archive("x86_64")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for rel, info in read_bundle_manifest(root)["files"].items():
            m = members[f"{root.name}/{rel}"]
            assert hashlib.sha256(tar.extractfile(m).read()).hexdigest() == info["sha256"]
        assert members[f"{root.name}/bin/edge-runner"].mode & 0o111
        assert f"{root.name}/bundle.json" in members


def test_missing_cross_compiler_names_the_package(monkeypatch):
    monkeypatch.setattr(bundle_mod.shutil, "which", lambda name: None)
    with pytest.raises(MissingDependency) as e:  # exit 9: a system program pip cannot bring (system_tools.py)
        ensure_bundle("aarch64", rebuild=True)
    assert "g++-aarch64-linux-gnu" in str(e.value)


def test_unknown_arch_is_a_usage_error():
    with pytest.raises(UsageError, match="armv7l"):
        ensure_bundle("armv7l")


# ---- runner --------------------------------------------------------------------------------

@pytest.mark.slow
def test_run_host_matches_numpy(host_model):
    lib, params = host_model
    r = run_compiled(lib=lib, params=params, input=X, arch=HOST, emulate_cpu=None, how=LocalRun(repeat=5))
    np.testing.assert_allclose(r.output, _reference(X), rtol=1e-5, atol=1e-5)
    assert r.output.shape == (1, 10) and r.output.dtype == np.float32
    assert not r.emulated and len(r.latencies_ms) >= 5 and r.threads == 1
    assert r.raw["num_params"] == 2 and r.raw["tvm_version"] == bundle_mod.TVM_VERSION
    r2 = run_compiled(lib=lib, params=params, input=X, arch=HOST, emulate_cpu=None, how=LocalRun(threads=2, repeat=1))
    assert r2.raw["pool_threads"] == 2 and r.raw["pool_threads"] == 1


@pytest.mark.slow
@pytest.mark.qemu
def test_run_pi3_under_qemu_matches_numpy(pi3_model):
    from edge_sdk.targets import get_target

    lib, params = pi3_model
    r = run_compiled(lib=lib, params=params, input=X, arch="aarch64", emulate_cpu=get_target("pi3").emulate_cpu,
                     how=LocalRun(repeat=3))
    np.testing.assert_allclose(r.output, _reference(X), rtol=1e-5, atol=1e-5)
    assert r.emulated and r.command[:3] == ["qemu-aarch64", "-cpu", "cortex-a53"]


@pytest.mark.slow
def test_uint8_input_and_int32_output(tmp_path):
    """The runner's .npy reader/writer beyond float32: uint8 in, int32 out, a 2-D shape."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "uint8"))
    p = relax.Var("p0000", relax.TensorType((3,), "int32"))
    with bb.function("main", [x, p]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(relax.op.astype(x, "int32"), p))
        bb.emit_func_output(y)
    lib, params = tmp_path / "u8.so", tmp_path / "u8.bin"
    tvm.compile(bb.get(), "llvm").export_library(str(lib))
    bias = np.array([-300, 0, 7], np.int32)
    tvm.runtime.save_param_dict_to_file({"p0000": tvm.runtime.tensor(bias)}, str(params))
    xs = np.array([[0, 1, 255], [10, 200, 3]], np.uint8)
    r = run_compiled(lib=lib, params=params, input=xs, arch=HOST, emulate_cpu=None, how=LocalRun(repeat=1))
    assert r.output.dtype == np.int32
    np.testing.assert_array_equal(r.output, xs.astype(np.int32) + bias)


@pytest.mark.slow
def test_wrong_input_dtype_is_reported(host_model):
    lib, params = host_model
    with pytest.raises(RuntimeFailure, match=r"unsupported input dtype '<f8'.*float32"):
        run_compiled(lib=lib, params=params, input=X.astype(np.float64), arch=HOST, emulate_cpu=None)


@pytest.mark.slow
def test_wrong_input_shape_is_reported(host_model):
    lib, params = host_model
    with pytest.raises(RuntimeFailure, match="exit code 1") as e:
        run_compiled(lib=lib, params=params, input=np.zeros((1, 9), np.float32), arch=HOST, emulate_cpu=None)
    assert "TVM error" in str(e.value)


def test_missing_files_are_reported(tmp_path, host_model):
    lib, params = host_model
    with pytest.raises(UsageError, match="nope.so"):
        run_compiled(lib=tmp_path / "nope.so", params=params, input=X, arch=HOST, emulate_cpu=None)
    runner = ensure_bundle(HOST) / "bin/edge-runner"
    missing = tmp_path / "missing.npy"
    proc = subprocess.run([str(runner), "--lib", str(lib), "--params", str(params), "--input", str(missing)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"{missing}: cannot open input file" in proc.stderr
    proc = subprocess.run([str(runner), "--lib", str(lib)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "--params" in proc.stderr


# ---- loader --------------------------------------------------------------------------------

def test_loader_runs_without_tvm(tmp_path, host_model):
    """The bundle's loader.py in a Python that can import only numpy, tvm_ffi and typing_extensions."""
    import numpy
    import tvm_ffi
    import typing_extensions

    lib, params = host_model
    root = ensure_bundle(HOST)
    site = tmp_path / "site"
    site.mkdir()
    for mod in (numpy, tvm_ffi):
        (site / mod.__name__).symlink_to(Path(mod.__file__).parent)
    (site / "typing_extensions.py").symlink_to(typing_extensions.__file__)
    libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    if libs.exists():
        (site / "numpy.libs").symlink_to(libs)
    np.save(tmp_path / "x.npy", X)
    script = (
        "import sys\n"
        f"sys.path[:] = [p for p in sys.path if 'site-packages' not in p] + [{str(site)!r}, {str(root)!r}]\n"
        "import numpy as np\n"
        "from edge_sdk_runtime.loader import load\n"
        f"m = load({str(lib)!r}, {str(params)!r}, threads=1)\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, m.run(np.load({str(tmp_path / 'x.npy')!r})))\n"
        "assert 'tvm' not in sys.modules and 'edge_sdk' not in sys.modules, sorted(sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    proc = subprocess.run([sys.executable, "-I", "-B", "-c", script], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _reference(X), rtol=1e-5, atol=1e-5)
