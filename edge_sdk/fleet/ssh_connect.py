"""Opening an SSH session to one device, in steps, so a failure says which step failed:

    TCP connect     "unreachable: connection refused (nothing listens on port 22 ...)"
                    "unreachable: no answer to the TCP connect within 10 s ..."
    SSH banner      "unreachable: timed out after 10 s waiting for the SSH banner ..."  (a port that accepts
                    connections but never speaks: an overloaded sshd, a tarpit, not an SSH server)
    key exchange    "SSH handshake failed: ..." / "... did not finish within 10 s"
    host key        "unknown host key ..." / "host key CHANGED ..." (never accepted silently)
    authentication  "authentication failed for user 'pi' with ..."

Every step waits at most `connect_timeout` (the fleet file's defaults.connect_timeout, or the
command's --connect-timeout). ssh.Connection.open calls open_client.
"""
from __future__ import annotations

import base64
import hashlib
import os
import socket
from pathlib import Path

import paramiko

from edge_sdk.errors import DeviceError
from edge_sdk.fleet.config import Device


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's form, 'SHA256:<base64 without padding>', as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(device: Device) -> str:
    """The host field of a known_hosts line, as OpenSSH writes it."""
    return device.host if device.port == 22 else f"[{device.host}]:{device.port}"


class _Refuse(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a key it has no record of: accept a matching pinned
    fingerprint, refuse everything else with the fingerprint in the message."""

    def __init__(self, device: Device, known_hosts: Path):
        self.device, self.known_hosts = device, known_hosts

    def missing_host_key(self, client, hostname, key):
        got = fingerprint(key)
        pin = self.device.host_key
        if pin and pin.startswith("SHA256:"):
            if pin == got:
                return
            raise DeviceError(
                f"device {self.device}: host key {key.get_name()} {got} does not match the key pinned "
                f"in {self.device.where} ({pin})",
                hint="if the device was reinstalled, update its host_key in the fleet file")
        raise DeviceError(
            f"device {self.device}: unknown host key {key.get_name()} {got}; refusing to connect",
            hint=f"check the fingerprint on the device (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then run "
                 f"`edge-sdk fleet trust --device {self.device.name}` to record it in {self.known_hosts}")


def _client(d: Device, known_hosts: Path) -> paramiko.SSHClient:
    """An SSHClient that knows only the pinned key or edge-sdk's known_hosts, refusing any other."""
    client = paramiko.SSHClient()
    if d.host_key and not d.host_key.startswith("SHA256:"):
        key_type, blob = d.host_key.split(" ")[:2]
        try:
            pinned = paramiko.PKey.from_type_string(key_type, base64.b64decode(blob))
        except (ValueError, TypeError, paramiko.SSHException) as e:  # base64 of something that is no key
            raise DeviceError(f"device {d}: the host_key pinned in {d.where} is not a valid {key_type} "
                              f"public key ({e or type(e).__name__})",
                              hint="copy it from the device's /etc/ssh/ssh_host_ed25519_key.pub") from None
        client.get_host_keys().add(known_hosts_name(d), key_type, pinned)
    elif not d.host_key and known_hosts.exists():
        try:
            client.get_host_keys().load(os.fspath(known_hosts))
        except (OSError, paramiko.SSHException) as e:
            raise DeviceError(f"cannot read known_hosts {known_hosts}: {e}") from None
    client.set_missing_host_key_policy(_Refuse(d, known_hosts))
    if d.key is not None and not os.path.exists(d.key):
        raise DeviceError(f"device {d}: key file {d.key} does not exist ({d.where})")
    return client


def open_client(d: Device, *, known_hosts: Path, connect_timeout: float, io_timeout: float) -> paramiko.SSHClient:
    """A connected, authenticated SSHClient, or a DeviceError saying which step failed (module docstring)."""
    client = _client(d, known_hosts)
    sock = None
    try:
        sock = tcp_connect(d, connect_timeout)
        _bound_silence(sock, io_timeout)
        wait_for_banner(d, sock, connect_timeout)
        client.connect(
            d.host, port=d.port, username=d.user, key_filename=d.key, timeout=connect_timeout, sock=sock,
            banner_timeout=connect_timeout, auth_timeout=connect_timeout,
            allow_agent=d.key is None, look_for_keys=d.key is None)
    except BaseException as e:
        client.close()
        if sock is not None:
            sock.close()
        if isinstance(e, (OSError, paramiko.SSHException, EOFError)):
            raise _failure(d, e, connect_timeout, known_hosts) from None
        raise
    return client


def _failure(d: Device, e: BaseException, seconds: float, known_hosts: Path) -> DeviceError:
    if isinstance(e, paramiko.BadHostKeyException):
        return DeviceError(
            f"device {d}: host key CHANGED: expected {fingerprint(e.expected_key)}, the device offered "
            f"{e.key.get_name()} {fingerprint(e.key)}; refusing to connect (possible impersonation)",
            hint=(f"if the device was reinstalled, update host_key in {d.where}" if d.host_key else
                  f"if the device was reinstalled, remove its line from {known_hosts} and run "
                  f"`edge-sdk fleet trust --device {d.name}`"))
    if isinstance(e, paramiko.AuthenticationException):
        return DeviceError(f"device {d}: authentication failed for user '{d.user}' with "
                           f"{d.key or 'the ssh agent / ~/.ssh keys'}: {e}")
    text = str(e) or type(e).__name__
    if isinstance(e, paramiko.SSHException) and "No existing session" in text:  # start_client gave up waiting
        return DeviceError(f"device {d}: unreachable: the SSH key exchange did not finish within {seconds:g} s")
    if isinstance(e, TimeoutError):
        return DeviceError(f"device {d}: unreachable: timed out after {seconds:g} s in the SSH handshake")
    if isinstance(e, (EOFError, ConnectionError)):
        return DeviceError(f"device {d}: unreachable: the device closed the connection during the SSH handshake "
                           f"({text}; sshd refusing new connections?)")
    return DeviceError(f"device {d}: SSH handshake failed: {text}")


def tcp_connect(d: Device, seconds: float) -> socket.socket:
    try:
        return socket.create_connection((d.host, d.port), timeout=seconds)
    except ConnectionRefusedError:
        raise DeviceError(f"device {d}: unreachable: connection refused (nothing listens on port {d.port}: "
                          "is the device up and sshd running, is the port right?)") from None
    except TimeoutError:
        raise DeviceError(f"device {d}: unreachable: no answer to the TCP connect within {seconds:g} s (device off, "
                          "wrong address, or a firewall dropping packets?)") from None
    except socket.gaierror as e:
        raise DeviceError(f"device {d}: unreachable: cannot resolve the host name '{d.host}' "
                          f"({e.strerror or e})") from None
    except OSError as e:
        raise DeviceError(f"device {d}: unreachable: {e.strerror or e}") from None


def wait_for_banner(d: Device, sock: socket.socket, seconds: float) -> None:
    """An SSH server speaks first ("SSH-2.0-..."): wait for its first byte (peeked, not consumed)."""
    sock.settimeout(seconds)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        raise DeviceError(f"device {d}: unreachable: timed out after {seconds:g} s waiting for the SSH banner "
                          f"(port {d.port} accepts connections but nothing answers: an overloaded sshd, or "
                          "not an SSH server)") from None
    if not first:
        raise DeviceError(f"device {d}: unreachable: the device closed the connection before sending the SSH "
                          "banner (sshd refusing new connections: MaxStartups, a TCP wrapper?)")


def _bound_silence(sock: socket.socket, seconds: float) -> None:
    """Make the kernel end a connection whose peer stopped acknowledging for `seconds`.

    paramiko's writer retries a full socket send buffer forever (packet.write_all), so on a
    silent link (no RST, no FIN) a channel timeout alone cannot stop an upload; TCP_USER_TIMEOUT
    turns that into ETIMEDOUT, and keepalive probes do the same for a connection waiting idle
    on a long command. A live but busy device answers probes from its kernel, so slow work is
    never cut."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(seconds * 1000))
        probe = max(1, int(seconds // 3))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, probe)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, probe)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
