"""The A53 cost proxy's memory side (edge_sdk/qemu/runner.py, priced by edge_sdk/timing/proxy.py): qemu's cache.c plugin builds and is found,
its totals parse, its miss counts are deterministic and follow memory traffic (a buffer that fits in
the L1 vs one that streams past the L2), the cycle model's arithmetic and roofline verdict, bench rows
with --memory (table, JSON, results store), and a clear error when the plugin is missing.

No test asserts a speed.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from edge_sdk.bench import bench as B
from edge_sdk.qemu import runner as E
from edge_sdk.timing import proxy
from edge_sdk.errors import MissingDependency, UsageError

REPO = Path(__file__).resolve().parents[1]
TINY = {"alpha": 0.25, "resolution": 32, "classes": 10}

# A real log of libinsn + libcache (qemu 7.2, user mode: one core, no "sum" line), limit=3.
LOG = """core #, data accesses, data misses, dmiss rate, insn accesses, insn misses, imiss rate, l2 accesses, l2 misses, l2 miss rate
0       1035842        126942         12.2550%  4090300        1018            0.0249%  127960       127679         99.7804%

address, data misses, instruction
0x5500000880 (main), 62501, ldrb w3, [x2], #8

address, fetch misses, instruction
0x550282a310, 6, sub sp, sp, #0x100

address, L2 misses, instruction
0x5500000880 (main), 62502, ldrb w3, [x2], #8
insns: 4090300
"""

# Touches an n-byte buffer once, then reads one byte per 64 B line in k passes (argv: n k).
STREAM_C = r"""
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  long n = atol(argv[1]), k = atol(argv[2]), s = 0;
  volatile unsigned char *b = malloc(n);
  memset((void *)b, 1, n);
  for (long r = 0; r < k; r++)
    for (long i = 0; i < n; i += 64) s += b[i];
  printf("%ld\n", s);
  return 0;
}
"""


def test_parse_cache_log_reads_the_totals_not_the_top_list():
    got = E.parse_cache_log(LOG)
    assert got == {"l1d_accesses": 1035842, "l1d_misses": 126942, "l1i_accesses": 4090300, "l1i_misses": 1018,
                   "l2_accesses": 127960, "l2_misses": 127679}
    no_l2 = LOG.replace(", l2 accesses, l2 misses, l2 miss rate", "")
    with pytest.raises(Exception, match="no totals with an L2"):
        E.parse_cache_log(no_l2)


def test_pi3_cache_config_is_the_a53s():
    args = dict(kv.split("=") for kv in E.CACHES["cortex-a53"].plugin_args().split(","))
    assert args == {"dcachesize": "32768", "dassoc": "4", "dblksize": "64", "icachesize": "32768", "iassoc": "2",
                    "iblksize": "64", "l2cachesize": "524288", "l2assoc": "16", "l2blksize": "64", "evict": "lru",
                    "limit": "0"}


def test_cycle_model_terms_and_roofline_verdict():
    from edge_sdk.targets import get_target

    pi3 = get_target("pi3")
    mem = {"l2_accesses": 1000.0, "l2_misses": 400.0, "dram_bytes": 400.0 * 64}
    got = proxy.A53Model(ipc=1.0, l2_hit_cycles=13, dram_cycles=124).cycles(
        instructions=1e6, memory=mem, clock_ghz=pi3.clock_ghz, mem_gbps=pi3.mem_gbps)
    assert got["cycles"] == pytest.approx(1e6 + 600 * 13 + 400 * 124)
    assert got["ms_at_clock"] == pytest.approx(got["cycles"] / 1.2e6)
    assert got["bound"] == "compute"  # 25.6 KB at 3 B/cycle is ~8.5 k cycles, far below 1 M
    streaming = {"l2_accesses": 1e6, "l2_misses": 1e6, "dram_bytes": 64e6}
    assert proxy.A53.cycles(instructions=1e6, memory=streaming, clock_ghz=1.2, mem_gbps=3.6)["bound"] == "memory"


def test_missing_cache_plugin_names_the_script(tmp_path, monkeypatch):
    d = tmp_path / "qemu-plugins" / "7.2"
    d.mkdir(parents=True)
    for name in ("libinsn.so", "libfakeclock-aarch64.so", ".built"):
        (d / name).write_text("x")
    monkeypatch.setattr(E, "cache_root", lambda: tmp_path)
    assert E.plugin_dir() == d  # instructions alone still work
    with pytest.raises(MissingDependency, match="libcache.so") as e:
        E.plugin_dir(memory=True)
    from edge_sdk.qemu import BUILD_SCRIPT

    assert f"bash {BUILD_SCRIPT}" in str(e.value) and BUILD_SCRIPT.is_file()  # the installed package's script


def test_memory_needs_emulate():
    from edge_sdk.models.zoo import build_zoo_model

    with pytest.raises(UsageError, match="--memory.*--emulate"):
        B.run_bench(build_zoo_model("mobilenet_v1", seed=1, **TINY), variants=["float32"], memory=True)


def _need_qemu():
    if shutil.which("qemu-aarch64") is None or shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs qemu-user and gcc-aarch64-linux-gnu (tools/setup.sh)")


@pytest.mark.qemu
def test_build_script_builds_the_cache_plugin():
    _need_qemu()
    proc = subprocess.run(["bash", str(REPO / "tools/build_qemu_plugins.sh")], capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = Path(proc.stdout.strip().splitlines()[-1])
    assert (out / "libcache.so").is_file() and (out / "libinsn.so").is_file()
    assert E.plugin_dir(memory=True).joinpath("libcache.so").is_file()


def _stream_misses(tmp_path: Path, n: int) -> dict:
    """Per-pass cache counters of STREAM_C over n bytes: (K=3 - K=1) / 2, as the bench measures."""
    src, exe = tmp_path / "stream.c", tmp_path / "stream"
    if not exe.exists():
        src.write_text(STREAM_C)
        subprocess.run(["aarch64-linux-gnu-gcc", "-O1", str(src), "-o", str(exe)], check=True)
    caches = E.CACHES["cortex-a53"]
    raw = {}
    with E.workdir() as work:
        for k in (E.K_LOW, E.K_HIGH):
            _insns, raw[k] = E.count_once([str(exe), str(n), str(k)], prefix=E.runner_prefix("cortex-a53"),
                                          cpu="cortex-a53", work=work, guest_env={}, caches=caches)
    return E._memory(raw, caches)


@pytest.mark.qemu
def test_misses_follow_memory_traffic_and_repeat(tmp_path):
    _need_qemu()
    try:
        E.plugin_dir(memory=True)
    except MissingDependency as e:
        pytest.skip(str(e))
    lines = 4 * 1024 * 1024 // 64
    big = _stream_misses(tmp_path, 4 * 1024 * 1024)  # 8x the L2: every line of every pass comes from DRAM
    small = _stream_misses(tmp_path, 16 * 1024)  # half the L1 D: after the first touch, nothing misses
    assert 0.95 * lines <= big["l2_misses"] <= 1.05 * lines
    assert big["l1d_misses"] >= big["l2_misses"] and big["dram_bytes"] == big["l2_misses"] * 64
    assert small["l1d_misses"] < 16 and small["l2_misses"] < 16
    again = _stream_misses(tmp_path, 4 * 1024 * 1024)
    assert again["raw"] == big["raw"]  # deterministic to the miss


@pytest.mark.qemu
@pytest.mark.slow
def test_bench_memory_rows_are_deterministic_and_stored(tmp_path, monkeypatch, capsys):
    """--emulate pi3 --memory on a tiny model: two runs give the same misses and the same modelled cycles; the
    table shows modelled ms first (the A53 timing model), the JSON carries modelled_cycles / modelled_ms, and
    the store keeps the modelled time (its modelled columns too)."""
    _need_qemu()
    try:
        E.plugin_dir(memory=True)
    except MissingDependency as e:
        pytest.skip(str(e))
    from edge_sdk.bench.report import record, render
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.results.store import ResultsStore

    monkeypatch.setattr(B, "cache_root", lambda: tmp_path)
    model = build_zoo_model("mobilenet_v1", seed=1, **TINY)
    runs = [B.run_bench(model, variants=["float32"], emulate="pi3", memory=True) for _ in range(2)]
    first, second = (r.rows[0] for r in runs)
    assert first.status == B.OK, first.detail
    assert first.memory["raw"] == second.memory["raw"] and first.instructions == second.instructions
    m = first.memory
    assert 0 < m["l2_misses"] <= m["l1d_misses"] + m["l1i_misses"] and m["dram_bytes"] == 64 * m["l2_misses"]
    assert m["cycles"] > first.instructions / m["model"]["ipc"] and m["bound"] in ("compute", "memory")
    assert runs[0].to_json()["rows"][0]["memory"]["l2_misses"] == m["l2_misses"]
    js = runs[0].to_json()["rows"][0]
    assert js["modelled_cycles"] == second.modelled_cycles > first.instructions / 2  # deterministic, <= 2 IPC
    assert js["modelled_ms"] == pytest.approx(js["modelled_cycles"] / 1.2e6)  # pi3: 1.2 GHz
    assert js["misses"]["l2_misses"] > 0 and js["timing"]["target"] == "pi3"

    con = Console(record=True, width=250)
    render(runs[0], console=con)
    text = con.export_text()
    assert "L2 miss M" in text and "modelled A53 cycles" in text and m["bound"] in text
    assert "modelled ms" in text and f"{first.modelled_ms:.2f}" in text and "not a measurement" in text

    db = tmp_path / "results.sqlite"
    assert record(runs[0], db=db)["written"] == 1
    with ResultsStore(db) as store:
        (row,) = store.query(model="mobilenet_v1")
    assert row["emulated"] is True and "A53 timing model" in row["device"]
    assert row["latency_median_ms"] == pytest.approx(first.modelled_ms) == row["modelled_ms"]
    assert row["modelled_cycles"] == pytest.approx(first.modelled_cycles) and row["model_version"].startswith("a53-")
    assert row["extra"]["memory"]["l2_misses"] == m["l2_misses"] and row["extra"]["instructions"] == first.instructions
