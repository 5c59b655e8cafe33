"""Shipped choice records (issue 20 item 3): made by the regeneration command, applied by compile by default.

Every price is a real qemu-aarch64 run under the A53 timing plugin and every check a real run against numpy;
no speed is asserted. The records here are made on a small converter-written .tflite in a test folder
(EDGE_SDK_CHOICE_RECORDS), with a private choice cache.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from edge_sdk.compiler.choice import DEFAULT, Site
from edge_sdk.compiler.choice import cache as choice_cache
from edge_sdk.compiler.choice.chooser import ChoiceWarning, RecordChooser, code_hashes
from edge_sdk.tune import choice_records as R

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.slow


def _model():
    from edge_sdk.models.importers import load_model_file

    return load_model_file(DATA / "awkward_37x30_float.tflite", family="float")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The regeneration command's pair step end to end on a small model: (records folder, its file, cache)."""
    from edge_sdk.tune.make_records import make_pair

    tmp = tmp_path_factory.mktemp("records")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(choice_cache, "root", lambda: tmp / "choice")
        lines = []
        path = make_pair(_model(), "float32", tmp / "records", say=lines.append)
        yield tmp / "records", path, tmp / "choice", lines


@pytest.fixture
def records_env(made, monkeypatch):
    folder, _path, cache, _lines = made
    monkeypatch.setattr(choice_cache, "root", lambda: cache)
    monkeypatch.setenv("EDGE_SDK_CHOICE_RECORDS", str(folder))
    monkeypatch.delenv("EDGE_SDK_CHOICE", raising=False)
    return folder


def _compile(tmp_path, name="a.edgepkg", **kw):
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    return compile_model(_model(), variant=get_variant("float32"), target=get_target("pi3"),
                         out=tmp_path / name, **kw).manifest


def test_regeneration_writes_checked_records_with_their_cost(made):
    _folder, path, _cache, lines = made
    data = R.read_file(path)
    assert data["format"] == R.FORMAT and data["core"] == "cortex-a53"
    assert set(data["targets"]) == {"pi3", "pi3plus", "pi-zero2w"}
    assert data["cost"]["priced"] >= data["cost"]["workloads"] >= 3 and data["cost"]["cpu_s"] > 0
    fams = {r["family"] for r in data["records"]}
    assert fams >= {"float.conv", "float.dw", "float.gemm"}
    for r in data["records"]:  # a winner matched numpy and is the cheapest by the prices it carries
        assert r["schedule"] in r["candidates"] and r["modelled_cycles"] == min(r["candidates"].values())
        assert r["max_error"] <= 1e-3 and r["code"] in r["codes"]
        assert "in_zp" not in r["workload"] and isinstance(r["workload"]["act"], str)
    assert any("modelled cycles" in ln for ln in lines) and any(ln.startswith("wrote ") for ln in lines)


def test_compile_applies_records_by_default_without_pricing(records_env, tmp_path, capsys):
    from edge_sdk.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("error", ChoiceWarning)
        m = _compile(tmp_path)
    ch = m["choice"]
    assert ch["enabled"] and ch["mode"] == "records" and ch["priced"] == 0 and ch["checked"] == 0
    assert ch["from_records"] == ch["workloads"] >= 3 and ch["records"] == ["a53-awkward_37x30_float-float32.json"]
    recs = {R.key_text(r["family"], r["workload"]): r for r in R.read_file(records_env / ch["records"][0])["records"]}
    rows = [r for r in m["layers"] if "choice" in r]
    assert rows and all(r["choice"]["source"] == "record" for r in rows)
    for r in rows:  # a winner off the rule is the code that matched numpy when it was priced
        want = "the rule's own" if r["choice"]["schedule"] == DEFAULT else "same code as recorded"
        assert want in r["choice"]["record"]["verified"]
    assert {r["choice"]["schedule"] for r in rows} <= {r["schedule"] for r in recs.values()}
    priced = _compile(tmp_path, "on.edgepkg", choose=True)["choice"]  # --choice: prices only what records lack
    assert priced["mode"] == "priced" and priced["from_records"] == ch["workloads"] and priced["priced"] == 0
    off = _compile(tmp_path, "off.edgepkg", choose=False)  # --no-choice: no records either
    assert off["choice"] == {"enabled": False} and not any("choice" in r for r in off["layers"])
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "a.edgepkg")]) == 0
    text = capsys.readouterr().out
    assert "from the shipped records" in text and "nothing priced" in text and "^" in text


def _rewrite(folder: Path, change) -> None:
    path = R.files(R.CORE, folder)[0]
    data = json.loads(path.read_text())
    data["records"] = [change(dict(r)) for r in data["records"]]
    path.write_text(json.dumps(data))


def test_unknown_record_is_skipped_and_changed_code_is_checked_under_qemu(made, records_env, tmp_path, monkeypatch):
    folder = tmp_path / "edited"
    folder.mkdir()
    (folder / made[1].name).write_text(made[1].read_text())
    monkeypatch.setenv("EDGE_SDK_CHOICE_RECORDS", str(folder))
    fams = []

    def edit(r):  # the first record names a schedule no family offers; every other one claims other code
        if not fams:
            fams.append(r["family"])
            return {**r, "schedule": "gone_schedule"}
        return {**r, "code": "0" * 16, "codes": ["0" * 16]}

    _rewrite(folder, edit)
    with pytest.warns(ChoiceWarning, match="gone_schedule.*no longer a candidate"):
        m = _compile(tmp_path)
    ch = m["choice"]
    assert ch["skipped"] >= 1 and ch["priced"] == 0 and ch["from_records"] == ch["workloads"] - ch["skipped"]
    skipped = [r["choice"] for r in m["layers"] if r.get("choice", {}).get("record_skipped")]
    assert skipped and all(c["schedule"] == DEFAULT and c["source"] == "rule" for c in skipped)
    checked = [r["choice"] for r in m["layers"] if r.get("choice", {}).get("source") == "record"
               and r["choice"]["schedule"] != DEFAULT]
    for c in checked:  # a winner whose code is not the recorded one ran under plain qemu against numpy first
        assert "ran under qemu and matched numpy" in c["record"]["verified"]
    assert ch["checked"] == len({c["workload"] for c in checked})


def test_a_recorded_wrong_kernel_is_never_applied(tmp_path, monkeypatch):
    """A record naming a candidate that computes the wrong answer (its code not the recorded one, so it is
    run under qemu against numpy first) is skipped with a warning; the rule's schedule is kept."""
    from edge_sdk.targets import get_target
    from test_choice import _site

    monkeypatch.setattr(choice_cache, "root", lambda: tmp_path / "choice")
    site: Site = _site()
    wl = R.record_key(site.family, site.workload)["workload"]
    R.write_file(tmp_path / "rec" / "a53-test-float32.json", {
        "format": R.FORMAT, "core": R.CORE, "timing_model": "test", "records": [
            {"family": site.family, "workload": wl, "schedule": "wrong_triple", "code": "0" * 16,
             "codes": ["0" * 16], "max_error": 0.0, "modelled_cycles": 1, "default_cycles": 2}]})
    monkeypatch.setenv("EDGE_SDK_CHOICE_RECORDS", str(tmp_path / "rec"))
    ch = RecordChooser(get_target("pi3"))
    with pytest.warns(ChoiceWarning, match="wrong_triple.*not confirmed under qemu.*reference"):
        assert ch.choose(site) == DEFAULT
    assert ch.stats["checked"] == 1 and ch.layers["double0"]["record_skipped"].startswith("wrong_triple")
    # the right code as recorded: applied with no qemu run
    good = code_hashes(site, ["four_passes"])["four_passes"]
    R.write_file(tmp_path / "rec" / "a53-test-float32.json", {
        "format": R.FORMAT, "core": R.CORE, "timing_model": "test", "records": [
            {"family": site.family, "workload": wl, "schedule": "four_passes", "code": good, "codes": [good],
             "max_error": 0.0, "modelled_cycles": 1, "default_cycles": 2}]})
    ch2 = RecordChooser(get_target("pi3"), check=lambda *a: pytest.fail("no qemu check for recorded code"))
    assert ch2.choose(site) == "four_passes" and ch2.layers["double0"]["source"] == "record"


def test_record_key_leaves_out_values_and_keeps_shapes():
    a = {"x": [1, 8, 8, 16], "w": [1, 1, 16, 32], "in_zp": -3, "out_zp": 5, "act": [-128, 127], "pads": [0, 0, 0, 0]}
    b = {**a, "in_zp": 7, "out_zp": -1, "act": [0, 127]}
    assert R.key_text("int8.gemm8", a) == R.key_text("int8.gemm8", b)
    assert R.key_text("int8.gemm8", a) != R.key_text("int8.gemm8", {**a, "x": [1, 16, 16, 16]})
    f = {"m": 64, "k": 16, "n": 32, "nr": 8, "isa": "neon", "act": ["clip", 0.0, 6.0], "residual": False, "gate": False}
    assert R.key_text("float.gemm", f) == R.key_text("float.gemm", {**f, "act": ["clip", 0.0, 1.0]})
    assert R.key_text("float.gemm", f) != R.key_text("float.gemm", {**f, "act": ["relu"]})
    assert R.key_text("float.gemm", f) != R.key_text("float.gemm", {**f, "residual": True})
    for fam, w in (("int8.gemm8", a), ("float.gemm", f)):  # a stored key is its own key (files are re-keyed on load)
        assert R.key_text(fam, R.record_key(fam, w)["workload"]) == R.key_text(fam, w)


def test_bad_records_file_is_an_error_naming_it(tmp_path):
    from edge_sdk.errors import ConfigError

    p = tmp_path / "a53-x-float32.json"
    p.write_text('{"format": "nope"}')
    with pytest.raises(ConfigError, match="a53-x-float32.json"):
        R.read_file(p)


def test_a_record_made_against_another_rule_is_skipped_with_one_warning(tmp_path, monkeypatch):
    """A record whose comparison is out of date (the rule's code or the candidate list changed since it was
    made) is not applied: its winner beat a default that no longer exists. One warning for all of them."""
    from edge_sdk.targets import get_target
    from test_choice import _site

    site: Site = _site()
    wl = R.record_key(site.family, site.workload)["workload"]
    good = code_hashes(site, ["four_passes"])["four_passes"]
    rec = {"family": site.family, "workload": wl, "schedule": "four_passes", "code": good, "codes": [good],
           "max_error": 0.0, "modelled_cycles": 1, "default_cycles": 2, "names": site.candidates()}
    for name, edit in (("rule", {"default_codes": ["0" * 16]}), ("names", {"names": ["default", "four_passes"]})):
        R.write_file(tmp_path / name / "a53-test-float32.json", {
            "format": R.FORMAT, "core": R.CORE, "timing_model": "test", "records": [{**rec, **edit}]})
        monkeypatch.setenv("EDGE_SDK_CHOICE_RECORDS", str(tmp_path / name))
        ch = RecordChooser(get_target("pi3"), check=lambda *a: pytest.fail("a stale record is not checked"))
        with warnings.catch_warnings():
            warnings.simplefilter("error", ChoiceWarning)
            assert ch.choose(site) == DEFAULT
        assert ch.stats["stale"] == 1 and "other kernels" in ch.layers["double0"]["record_skipped"]
        with pytest.warns(ChoiceWarning, match="1 choice records were made against other kernels"):
            assert ch.report()["stale"] == 1


def test_records_of_another_timing_model_stay_applied(tmp_path, monkeypatch):
    """A timing-model change (the plugin or the pricing rules) does not make a record stale: the record's
    code is still the code that matched numpy, only its price is from the older model. It is applied, no
    warning, and the manifest's choice names the model it was priced under (so the choice is never turned
    off for users by a model change; tools/make_choice_records.py re-prices on the new one)."""
    from edge_sdk.targets import get_target
    from edge_sdk.timing.package_figures import model_version
    from test_choice import _site

    site: Site = _site()
    wl = R.record_key(site.family, site.workload)["workload"]
    good = code_hashes(site, ["four_passes"])["four_passes"]
    old = "a53-000000000000"
    assert old != model_version()
    R.write_file(tmp_path / "rec" / "a53-test-float32.json", {
        "format": R.FORMAT, "core": R.CORE, "timing_model": old, "records": [
            {"family": site.family, "workload": wl, "schedule": "four_passes", "code": good, "codes": [good],
             "max_error": 0.0, "modelled_cycles": 1, "default_cycles": 2, "names": site.candidates(),
             "default_codes": [code_hashes(site, [DEFAULT])[DEFAULT]]}]})
    monkeypatch.setenv("EDGE_SDK_CHOICE_RECORDS", str(tmp_path / "rec"))
    ch = RecordChooser(get_target("pi3"), check=lambda *a: pytest.fail("recorded code needs no qemu check"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChoiceWarning)
        assert ch.choose(site) == "four_passes"
        report = ch.report()
    assert report["from_records"] == 1 and report["stale"] == 0 and report["timing_model"] == old
    assert ch.layers["double0"]["record"]["timing_model"] == old


def test_a_remake_keeps_the_records_that_stand_and_prices_a_stale_one(made, tmp_path, monkeypatch):
    """make_records --keep-current: a record whose candidates, rule code and winner code are unchanged is kept as
    it is (its prices under the timing model it was made with, named on the record), priced by nothing; one made
    against another candidate list is priced again (from an empty choice cache), under the current model."""
    from edge_sdk.timing.package_figures import model_version
    from edge_sdk.tune.make_records import make_pair

    _folder, path, _cache, _lines = made
    data = R.read_file(path)
    old = "a53-000000000000"
    edited = json.loads(json.dumps(data))
    edited["timing_model"] = old
    stale = edited["records"][0]
    stale["names"] = ["default"]  # as if the family's candidate list had changed since
    out = tmp_path / "records"
    R.write_file(out / path.name, edited)
    monkeypatch.setattr(choice_cache, "root", lambda: tmp_path / "choice")
    lines = []
    new = R.read_file(make_pair(_model(), "float32", out, say=lines.append, keep_current=True))
    assert new["cost"]["kept"] == new["cost"]["workloads"] - stale["workloads"] >= 1
    assert new["cost"]["priced"] >= 1 and new["timing_model"] == model_version()
    by_key = {R.key_text(r["family"], r["workload"]): r for r in new["records"]}
    assert len(by_key) == len(data["records"])
    for r in data["records"]:
        got = by_key[R.key_text(r["family"], r["workload"])]
        assert got["schedule"] == r["schedule"]
        if r["workload"] == stale["workload"] and r["family"] == stale["family"]:
            assert "timing_model" not in got and set(got["names"]) == set(r["names"])  # priced again, now
        else:
            assert got["timing_model"] == old and got["candidates"] == r["candidates"]
            assert got["modelled_cycles"] == r["modelled_cycles"] and got["codes"] == r["codes"]
    assert any("its record stands" in ln for ln in lines)
