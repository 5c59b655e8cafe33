"""build_rootfs builds once when two processes (the suite's two workers on a cold cache) ask at the same time."""
from __future__ import annotations

import threading
import time

from edge_sdk.devices import emulated_pi as E


def test_two_builders_on_a_cold_cache_debootstrap_once(tmp_path, monkeypatch):
    monkeypatch.setattr(E, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(E, "check_host", lambda: None)
    builds = []

    def debootstrap(suite, final, mirror, log):  # stands in for the minutes of debootstrap
        builds.append(suite)
        time.sleep(0.5)
        final.mkdir(parents=True)
        (final / ".edge-sdk-rootfs").write_text("{}")
        return final

    monkeypatch.setattr(E, "_build_rootfs", debootstrap)
    got = []
    workers = [threading.Thread(target=lambda: got.append(E.build_rootfs("bookworm"))) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert builds == ["bookworm"]
    assert got == [E.rootfs_dir("bookworm")] * 2
