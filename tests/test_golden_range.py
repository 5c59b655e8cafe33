"""Issue 21 item 7: the golden check is relative to the output's range. A float package whose output
spans hundreds gets atol = GOLDEN_RANGE_TOL x range (recorded with the range in the manifest), so errors
of 1e-6 of the range pass; the cap on a manifest's atol grows with the recorded range, and a forged atol
beyond it is still refused by the schema and by the device's verifier; bit-exact paths stay at 0."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from edge_sdk.compiler.build import GOLDEN_ATOL, GOLDEN_RANGE_TOL, Lowered, golden_tolerance
from edge_sdk.errors import PackageError
from edge_sdk.manifest_schema import check_manifest
from edge_sdk.runtime.device.verify_package import Refused, check_members
from tests.test_trust_manifest import full, minimal_manifest


def _low(out, atol=GOLDEN_ATOL):
    return Lowered(None, {}, np.zeros(1, np.float32), np.asarray(out, np.float32), "litert", atol=atol)


def test_atol_follows_the_output_range():
    logits = np.linspace(-120.0, 380.0, 1000, dtype=np.float32)  # a detector's raw box coordinates
    g = golden_tolerance(_low(logits), seed=0)
    assert g["range"] == pytest.approx(500.0) and g["range_tol"] == GOLDEN_RANGE_TOL
    assert g["atol"] == pytest.approx(GOLDEN_RANGE_TOL * 500.0)
    noisy = logits + np.float32(1.3e-6 * 500.0)  # the error the issue saw on correct packages
    assert not np.allclose(noisy, logits, rtol=g["rtol"], atol=GOLDEN_ATOL)  # the old check failed it
    assert np.allclose(noisy, logits, rtol=g["rtol"], atol=g["atol"])
    assert not np.allclose(logits + 1.0, logits, rtol=g["rtol"], atol=g["atol"])  # a wrong one still fails


def test_small_outputs_keep_the_absolute_floor_and_bit_exact_stays_exact():
    assert golden_tolerance(_low([0.01, 0.06]), seed=0)["atol"] == GOLDEN_ATOL
    exact = golden_tolerance(_low([-128.0, 127.0], atol=0.0), seed=0)
    assert exact["atol"] == 0.0 and exact["range_tol"] == 0.0


def test_the_manifest_cap_scales_with_the_recorded_range():
    ok = minimal_manifest(golden={"rtol": 1e-4, "atol": 0.05, "range": 500.0, "range_tol": 1e-4})
    assert check_manifest(full(ok), where="p")["golden"]["atol"] == 0.05
    for golden, says in [({"rtol": 1e-4, "atol": 0.05}, "from 0 to 0.001"),
                         ({"rtol": 1e-4, "atol": 0.6, "range": 500.0}, "from 0 to 0.5"),
                         ({"rtol": 1e-4, "atol": 0.01, "range": -1.0}, "golden.range")]:
        with pytest.raises(PackageError, match=says):
            check_manifest(full(minimal_manifest(golden=golden)), where="p")


def test_the_device_verifier_applies_the_same_cap(tmp_path):
    m = full(minimal_manifest(golden={"rtol": 1e-4, "atol": 0.6, "range": 500.0}))
    for name in m["members"]:
        (tmp_path / name).write_bytes(name.encode())
        m["members"][name] = {"sha256": hashlib.sha256(name.encode()).hexdigest(), "size": len(name)}
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(Refused, match="golden.atol is 0.6: expected a finite number from 0 to 0.5"):
        check_members(str(tmp_path), m)
    m["golden"]["atol"] = 0.05
    check_members(str(tmp_path), m)
