"""The results store (SQLite): `ResultsStore.record_run` writes runs (bench, the classify app), the dashboard reads them.

The command line (`edge-sdk results {record,list,export}`) is the CLI package's results module.
"""
from __future__ import annotations

from edge_sdk.results.store import (SCHEMA_VERSION, ResultsStore, default_db_path, device_facts,
                                    normalize_per_layer)

__all__ = ["SCHEMA_VERSION", "ResultsStore", "default_db_path", "device_facts", "normalize_per_layer"]
