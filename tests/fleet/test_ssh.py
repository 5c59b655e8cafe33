"""The SSH layer against real OpenSSH servers (the loopback fleet)."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import subprocess

import pytest

from edge_sdk.errors import DeviceError
from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.group import for_each_device
from edge_sdk.fleet.ssh import Connection


def keygen_fingerprint(pub_file) -> str:
    """The fingerprint as OpenSSH itself prints it: the independent reference."""
    out = subprocess.run(["ssh-keygen", "-lf", os.fspath(pub_file)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


@pytest.fixture(scope="module")
def fleet(loopback_fleet):
    return load_fleet(loopback_fleet.fleet_yaml)


@pytest.fixture
def conn(fleet, loopback_fleet, known_hosts_for):
    with Connection(fleet.devices["loop1"], known_hosts=known_hosts_for(loopback_fleet)) as c:
        yield c


def test_unknown_host_key_is_refused_with_its_fingerprint(fleet, loopback_fleet, tmp_path):
    c = Connection(fleet.devices["loop2"], known_hosts=tmp_path / "empty_known_hosts")  # lazy: nothing yet
    with pytest.raises(DeviceError) as e:
        c.run(["true"])
    fp = keygen_fingerprint(loopback_fleet["loop2"].host_key_file.with_suffix(".pub"))
    assert "loop2" in str(e.value) and "unknown host key" in str(e.value) and fp in str(e.value)
    assert "fleet trust" in str(e.value)
    assert not (tmp_path / "empty_known_hosts").exists()  # nothing recorded behind the user's back


def test_known_host_key_connects(fleet, loopback_fleet, known_hosts_for):
    with Connection(fleet.devices["loop3"], known_hosts=known_hosts_for(loopback_fleet)) as c:
        assert c.run(["id", "-un"]).stdout.strip() == loopback_fleet["loop3"].user
        assert c.run(["pwd"]).stdout.strip() == str(loopback_fleet["loop3"].home)


def test_changed_host_key_is_refused(fresh_fleet, known_hosts_for):
    kh = known_hosts_for(fresh_fleet)
    device = load_fleet(fresh_fleet.fleet_yaml).devices["loop1"]
    old = keygen_fingerprint(fresh_fleet["loop1"].host_key_file.with_suffix(".pub"))
    fresh_fleet.stop_device("loop1")
    fresh_fleet.start_device("loop1", new_host_key=True)  # "reinstalled" (or impersonated)
    new = keygen_fingerprint(fresh_fleet["loop1"].host_key_file.with_suffix(".pub"))
    assert old != new
    with pytest.raises(DeviceError) as e, Connection(device, known_hosts=kh) as c:
        c.run(["true"])
    msg = str(e.value)
    assert "CHANGED" in msg and old in msg and new in msg and "loop1" in msg


def test_pinned_host_key_in_the_fleet_file(fleet, loopback_fleet, tmp_path):
    empty = tmp_path / "none"
    dev = fleet.devices["loop1"]
    right = loopback_fleet["loop1"].public_host_key()
    wrong = loopback_fleet["loop2"].public_host_key()
    fp = keygen_fingerprint(loopback_fleet["loop1"].host_key_file.with_suffix(".pub"))
    for pin in (right, fp):
        with Connection(dataclasses.replace(dev, host_key=pin), known_hosts=empty) as c:
            assert c.run(["echo", "hi"]).stdout == "hi\n"
    wrong_fp = keygen_fingerprint(loopback_fleet["loop2"].host_key_file.with_suffix(".pub"))
    for pin in (wrong, wrong_fp):
        with pytest.raises(DeviceError, match="loop1") as e, \
                Connection(dataclasses.replace(dev, host_key=pin), known_hosts=empty) as c:
            c.run(["true"])
        assert fp in str(e.value)


def test_failed_authentication(fleet, loopback_fleet, known_hosts_for, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.fspath(other)], check=True)
    dev = dataclasses.replace(fleet.devices["loop1"], key=os.fspath(other))
    with pytest.raises(DeviceError, match="authentication failed"), \
            Connection(dev, known_hosts=known_hosts_for(loopback_fleet)) as c:
        c.run(["true"])


def test_arguments_survive_quoting(conn, tmp_path):
    canary = tmp_path / "pwned"
    args = ["a b", "it's", 'say "hi"', "$HOME", "`id`", "; rm -rf ~", f"$(touch {canary})", "*", "", "line\nbreak",
            "-n", "\\x", "ü"]
    out = conn.run(["printf", "%s\\0", *args]).stdout
    assert out.split("\0")[:-1] == args
    assert not canary.exists()


def test_exit_codes_and_stderr(conn):
    r = conn.run(["sh", "-c", 'echo out; echo "err $1" >&2; exit 3', "sh", "x y"], check=False)
    assert (r.exit_code, r.stdout, r.stderr, r.ok) == (3, "out\n", "err x y\n", False)
    with pytest.raises(DeviceError, match=r"loop1.*exited with 3: err x y"):
        conn.run(["sh", "-c", 'echo "err $1" >&2; exit 3', "sh", "x y"])


def test_large_output_on_both_streams_and_stdin(conn):
    r = conn.run(["sh", "-c", "head -c 3000000 /dev/zero; head -c 2000000 /dev/zero >&2"], timeout=60)
    assert (len(r.stdout), len(r.stderr)) == (3000000, 2000000)
    data = os.urandom(100000).hex()
    assert conn.run(["cat"], input=data.encode()).stdout == data


def test_timeout(conn):
    with pytest.raises(DeviceError, match="timed out"):
        conn.run(["sleep", "10"], timeout=0.5)
    assert conn.run(["true"]).ok  # the connection is still usable


def test_put_get_round_trip(conn, tmp_path):
    payload = os.urandom(700_000)
    src = tmp_path / "model.edgepkg"
    src.write_bytes(payload)
    conn.run(["mkdir", "-p", "dir with space"])
    assert conn.put(src, "dir with space/m.edgepkg") == len(payload)
    remote_sha = conn.run(["sha256sum", "dir with space/m.edgepkg"]).stdout.split()[0]
    assert remote_sha == hashlib.sha256(payload).hexdigest()
    assert conn.run(["ls", "-a", "dir with space"]).stdout.split() == [".", "..", "m.edgepkg"]  # no .part left
    back = tmp_path / "back.bin"
    assert conn.get("dir with space/m.edgepkg", back) == len(payload)
    assert back.read_bytes() == payload
    assert conn.bytes_sent >= len(payload) and conn.bytes_received >= len(payload)
    conn.run(["rm", "-r", "dir with space"])


def test_put_into_missing_directory_fails_cleanly(conn, tmp_path):
    src = tmp_path / "f"
    src.write_bytes(b"x")
    with pytest.raises(DeviceError, match="loop1"):
        conn.put(src, "no/such/dir/f")
    with pytest.raises(DeviceError, match="download"):
        conn.get("no/such/file", tmp_path / "g")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "known_hosts") == ["f"]


def test_for_each_device_reports_the_down_device_and_finishes_the_others(fresh_fleet, known_hosts_for):
    kh = known_hosts_for(fresh_fleet)
    devices = load_fleet(fresh_fleet.fleet_yaml).select()
    fresh_fleet.stop_device("loop2")
    seen = []

    def hostname_of(device):
        with Connection(device, known_hosts=kh, connect_timeout=5) as c:
            return c.run(["id", "-un"]).stdout.strip()

    results = for_each_device(devices, hostname_of, max_workers=3, on_done=lambda r: seen.append(r.device.name))
    assert [r.device.name for r in results] == ["loop1", "loop2", "loop3"]
    assert [r.ok for r in results] == [True, False, True]
    assert [r.device.name for r in results.failed] == ["loop2"]
    assert "loop2" in str(results[1].error) and "unreachable" in str(results[1].error)
    assert results[0].value == fresh_fleet["loop1"].user and results[2].value == fresh_fleet["loop3"].user
    assert sorted(seen) == ["loop1", "loop2", "loop3"]
    with pytest.raises(DeviceError, match="1 of 3 devices") as e:
        results.raise_if_failed("status")
    assert e.value.results is results


def test_readlink_listdir_and_read_text_answer_what_the_device_holds(conn):
    """Connection.readlink (deploy, remote and trust share it) and its siblings over SFTP, checked
    against what `ls`/`readlink` print on the device; None or [] where the device says no."""
    d = "probe dir"
    conn.run(["sh", "-c", 'mkdir -p "$1/sub" && printf "h\\303\\251llo\\n" > "$1/f" && ln -sfn "sub" "$1/current" '
              '&& ln -sfn "gone" "$1/dangling"', "sh", d])
    try:
        assert conn.readlink(f"{d}/current") == conn.run(["readlink", f"{d}/current"]).stdout.strip() == "sub"
        assert conn.readlink(f"{d}/dangling") == "gone"  # a link's target, whether or not it exists
        assert conn.readlink(f"{d}/f") is None and conn.readlink(f"{d}/nothing") is None
        entries = dict(conn.listdir(d))
        assert sorted(entries) == sorted(conn.run(["ls", "-A", d]).stdout.split())
        assert stat.S_ISLNK(entries["current"]) and stat.S_ISDIR(entries["sub"]) and stat.S_ISREG(entries["f"])
        assert conn.listdir(f"{d}/nothing") == []
        assert conn.read_text(f"{d}/f") == "héllo\n" and conn.read_text(f"{d}/nothing") is None
    finally:
        conn.run(["rm", "-rf", d])
