"""One SSH connection of the ``ssh`` backend (paramiko): connecting, host keys, liveness, I/O.

Host keys (DESIGN.md §5): a key found in ``known_hosts`` must match; a changed key is always
refused; an unknown key is refused with its SHA256 fingerprint unless ``accept_new_host_keys``,
which saves it. No ``~/.ssh/config`` is read.

Liveness: every ``keepalive_interval`` seconds a keepalive request the server must answer. A
connection that closed, or stayed silent for ``keepalive_interval * keepalive_count_max`` seconds,
is dead: every blocked read or write wakes up at least every ``POLL_S`` seconds to check, so a
command on a dropped or frozen connection fails in bounded time instead of hanging.

Startup noise: sshd runs each channel's command through the user's login shell, whose startup
files may print (bash reads ``~/.bashrc`` under sshd). Every command starts with a marker
(``SshLink.start``); what comes before it on stdout is dropped (``Preamble``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shlex
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from swe_sandbox.errors import SandboxStartError

#: How often blocked reads and writes wake up to check the connection (seconds).
POLL_S = 0.2
#: Receive window of each channel, in bytes.
WINDOW = 8 << 20
#: Seconds a command's output may still trickle in after its exit status; then it counts as ended
#: (background processes of a killed wrapper may hold the stream open for ever).
EXIT_DRAIN_S = 2.0
#: Startup output kept for error messages, in bytes.
NOISE_KEPT = 2000


def ssh_errors() -> tuple[type[BaseException], ...]:
    """Every exception paramiko raises on a channel or connection: its ``SSHException``,
    ``EOFError`` (a transport already gone) and socket errors (``OSError``). The one place
    paramiko's errors are named. Imports paramiko."""
    import paramiko

    return (paramiko.SSHException, EOFError, OSError)


def fingerprint(key: Any) -> str:
    """``SHA256:...``, as ``ssh-keygen -l`` prints it, of a paramiko public key."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def connect(cfg: Any, timeout: float) -> SshLink:
    """Open the connection described by an ``SshConfig``.

    Args:
        cfg: the ``SshConfig`` (host, port, username, credentials, host-key and keepalive fields).
        timeout: seconds for the TCP connect, the banner and the authentication each.

    Raises:
        SandboxStartError: unreachable, authentication refused, or an unknown or changed host key
            (the message names the fingerprint and the ``known_hosts`` file).
    """
    import paramiko

    where = f"{cfg.username + '@' if cfg.username else ''}{cfg.host}:{cfg.port}"
    known = os.path.expanduser(cfg.known_hosts or "~/.ssh/known_hosts")
    client = paramiko.SSHClient()
    if os.path.exists(known):
        client.load_host_keys(known)
    client.set_missing_host_key_policy(_host_key_policy(cfg, known))
    secret = cfg.password.get_secret_value() if cfg.password else None
    try:
        client.connect(cfg.host, cfg.port, cfg.username, password=secret, passphrase=secret,
                       key_filename=cfg.key_filename, timeout=timeout, banner_timeout=timeout,
                       auth_timeout=timeout, allow_agent=not (cfg.key_filename or secret),
                       look_for_keys=not (cfg.key_filename or secret))
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise SandboxStartError(f"host key of {where} CHANGED (not the one in {known}): {exc}") from None
    except ssh_errors() as exc:
        client.close()
        raise SandboxStartError(f"cannot connect to {where}: {type(exc).__name__}: {exc}") from None
    except BaseException:
        client.close()
        raise
    return SshLink(client, where, cfg.keepalive_interval, cfg.keepalive_count_max)


def _host_key_policy(cfg: Any, known: str):
    """paramiko's policy for a host key not in ``known``: refuse it, or (``accept_new_host_keys``) save it."""
    import paramiko

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            if not cfg.accept_new_host_keys:
                raise SandboxStartError(
                    f"unknown host key of {hostname}: {key.get_name()} {fingerprint(key)} is not in {known}; "
                    f"check the fingerprint, then add it (ssh-keyscan -p {cfg.port} {cfg.host} >> {known}) or "
                    "set accept_new_host_keys: true")
            keys = paramiko.HostKeys(known if os.path.exists(known) else None)
            keys.add(hostname, key.get_name(), key)
            os.makedirs(os.path.dirname(known) or ".", exist_ok=True)
            keys.save(known)

    return Policy()


class Preamble:
    """Drops what a channel's stdout carries before ``marker`` (the login shell's startup output)."""

    def __init__(self, marker: bytes):
        self.marker, self.done, self._buf, self.noise = marker, False, b"", b""

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` that follows the marker (b"" until the marker has been seen)."""
        if self.done:
            return data
        self._buf += data
        at = self._buf.find(self.marker)
        if at < 0:
            keep = len(self.marker) - 1
            self.noise = (self.noise + self._buf[:-keep])[-NOISE_KEPT:]
            self._buf = self._buf[-keep:]
            return b""
        self.noise = (self.noise + self._buf[:at])[-NOISE_KEPT:]
        rest, self._buf, self.done = self._buf[at + len(self.marker):], b"", True
        return rest


class SshLink:
    """One SSH connection and its liveness (keepalives that must be answered).

    Args:
        client: a connected ``paramiko.SSHClient``.
        where: ``user@host:port``, for messages.
        interval: seconds between keepalives.
        count_max: unanswered keepalive intervals after which the connection is dead.
    """

    def __init__(self, client, where: str, interval: float, count_max: int):
        self.client, self.transport, self.where = client, client.get_transport(), where
        try:  # a request must not wait for the ACK of the previous packet (Nagle: +40 ms per command)
            self.transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (AttributeError, OSError):
            pass
        self.interval, self.limit = interval, interval * count_max
        self.marker = f"swe-sandbox-ssh-{secrets.token_hex(8)}:"
        self.alive_at, self.failed, self.done = time.monotonic(), "", threading.Event()
        threading.Thread(target=self._keepalive, daemon=True, name="swe-sandbox-ssh-keepalive").start()

    def _keepalive(self) -> None:
        while not self.done.wait(self.interval) and self.transport.is_active():
            self.transport.global_request("keepalive@openssh.com", wait=True)  # OpenSSH answers (a refusal)
            self.alive_at = time.monotonic()

    def dead(self) -> str:
        """Why the connection is unusable, or "" while it is fine."""
        quiet = time.monotonic() - self.alive_at
        if not self.failed and not self.transport.is_active():
            self.failed = "the SSH connection closed"
        elif not self.failed and quiet > self.limit:
            self.failed = f"the SSH server did not answer for {quiet:.0f} s"
        return self.failed

    def start(self, command: str, combine_stderr: bool = False):
        """Open a session channel running ``command`` (POSIX shell syntax) after the marker.

        Returns:
            paramiko.Channel: reads time out every ``POLL_S`` seconds (``recv`` handles that).
        """
        chan = self.transport.open_session(window_size=WINDOW, timeout=self.limit)
        chan.settimeout(POLL_S)
        chan.set_combine_stderr(combine_stderr)
        chan.exec_command(f"printf %s {self.marker}; {command}")
        return chan

    def recv(self, chan, read: Callable[[int], bytes], n: int = 1 << 20,
             ended: Callable[[], bool] = lambda: False) -> bytes:
        """``read(n)`` (``chan.recv`` or ``recv_stderr``) until data or end of file.

        Returns b"" at end of file, and also when the connection is lost or ``ended()`` says so
        during a pause of ``POLL_S`` seconds.
        """
        while True:
            try:
                data = read(n)
            except TimeoutError:
                if self.dead() or ended():
                    return b""
                continue
            except OSError:
                data = b""
            if data:
                self.alive_at = time.monotonic()
            elif not chan.eof_received:  # closed without the remote's EOF: the connection went away
                self.failed = self.failed or "the SSH connection was lost"
            return data

    def send(self, chan, data: bytes) -> None:
        """Write all of ``data``, waiting for window space.

        Raises:
            OSError: the connection is dead.
        """
        while data:
            try:
                data = data[chan.send(data[:1 << 18]):]
            except TimeoutError:
                pass
            if self.dead():
                raise OSError(self.failed)

    def exit_status(self, chan, timeout: float | None = None) -> int:
        """The remote command's exit status (-1: none, the connection was lost).

        Raises:
            TimeoutError: no status within ``timeout`` seconds.
        """
        end = None if timeout is None else time.monotonic() + timeout
        while not chan.status_event.wait(POLL_S) and not self.dead():
            if end is not None and time.monotonic() > end:
                raise TimeoutError("the remote command did not end")
        return chan.exit_status

    def run(self, script: str) -> tuple[int, str]:
        """Run ``script`` with ``sh`` on the remote.

        Returns:
            tuple: exit status, and stdout and stderr merged (text).

        Raises:
            SandboxStartError: the connection died meanwhile.
        """
        chan = self.start("exec sh -c " + shlex.quote(script), combine_stderr=True)
        chan.shutdown_write()
        preamble, out = Preamble(self.marker.encode()), []
        while data := self.recv(chan, chan.recv):
            out.append(preamble.feed(data))
        if self.dead():
            raise SandboxStartError(f"{self.where}: {self.failed}")
        return self.exit_status(chan), b"".join(out).decode("utf-8", "replace")

    def close(self) -> None:
        """Stop the keepalives and close the connection (idempotent)."""
        self.done.set()
        self.client.close()
