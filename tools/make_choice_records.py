"""Regenerate the shipped per-layer choice records (edge_sdk/tune/records/choice/a53-<model>-<variant>.json).

    EDGE_SDK_CACHE=/tmp/me/cache .venv/bin/python tools/make_choice_records.py [--models mobilenet_v1,...]
        [--variants float32,int8] [--out DIR]

Prices every layer workload's candidate schedules of each zoo model under qemu with the A53 timing plugin
(cached in $EDGE_SDK_CACHE/choice: resumable, a re-run prices only what changed), prints progress, and writes
one records file per model and variant with what it cost (edge_sdk/tune/make_records.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_sdk.tune.make_records import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
