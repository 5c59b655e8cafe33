"""Issue 15 item 5: `fleet status` gives every device a row, with its error -- also a device whose
pinned host key does not parse (it was parsed outside the try and silently dropped)."""
from __future__ import annotations

import base64
import json

from edge_sdk.cli import main as cli_main
from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.trust import fleet_status

BAD_PIN = "ssh-ed25519 " + base64.b64encode(b"not a key at all").decode()  # valid base64, no key inside


def _with_bad_pins(fleet, tmp_path):
    loop1 = fleet.devices[0]
    text = fleet.fleet_yaml.read_text()
    extra = (f"  bad-pin: {{host: {loop1.ip}, port: {loop1.port}, user: {loop1.user}, host_key: \"{BAD_PIN}\"}}\n"
             f"  bad-type: {{host: {loop1.ip}, port: {loop1.port}, user: {loop1.user}, "
             f"host_key: \"ssh-rsa {base64.b64encode(b'x' * 40).decode()}\"}}\n")
    head, sep, tail = text.partition("devices:\n")
    out = tmp_path / "fleet.yaml"
    out.write_text(head + sep + extra + tail)
    return out


def test_every_device_gets_a_row_with_its_error(loopback_fleet, known_hosts_for, tmp_path, capsys):
    kh = known_hosts_for(loopback_fleet)
    path = _with_bad_pins(loopback_fleet, tmp_path)
    devices = load_fleet(path).select()
    results = fleet_status(devices, known_hosts=kh)
    assert [r.device.name for r in results] == [d.name for d in devices] and all(r.ok for r in results)
    by_name = {r.device.name: r.value for r in results}
    assert not by_name["bad-pin"].reachable and "is not a valid ssh-ed25519 public key" in by_name["bad-pin"].error
    assert not by_name["bad-type"].reachable and "ssh-rsa" in by_name["bad-type"].error
    assert all(by_name[d.name].reachable for d in loopback_fleet.devices)

    assert cli_main(["fleet", "status", "--fleet", str(path), "--known-hosts", str(kh), "--json"]) == 8
    rows = json.loads(capsys.readouterr().out)
    assert [r["device"] for r in rows] == [d.name for d in devices]
    assert cli_main(["fleet", "status", "--fleet", str(path), "--known-hosts", str(kh)]) == 8
    table = capsys.readouterr().out
    for d in devices:
        assert d.name in table
    assert "not a valid ssh-ed25519 public key" in table and "Traceback" not in table
