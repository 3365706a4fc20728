"""Byte streams of the ``ssh`` backend over session channels of one ``SshLink``.

- ``SshChannel``: the runner's stdin and stdout over ONE channel, for the environment's life.
- ``RemoteProcess``: one command of the exec fallback on its own channel, shaped like the
  ``subprocess.Popen`` that ``ExecFallbackChannel`` expects.

Both keep every stream of their channel drained (the runner's stderr, the fallback's status
stream), so a stream nobody reads never stalls the channel's window.
"""

from __future__ import annotations

import os
import threading
import time

from swe_sandbox.environments.base import Channel
from swe_sandbox.environments.ssh.link import EXIT_DRAIN_S, NOISE_KEPT, Preamble, SshLink, ssh_errors


class SshChannel(Channel):
    """The runner's stdin and stdout over one SSH session channel.

    Args:
        chan: the channel running the runner (started with ``SshLink.start``).
        link: its connection.
    """

    KIND = "ssh"

    def __init__(self, chan, link: SshLink):
        super().__init__(None)
        self.chan, self.link, self.stderr, self.clean = chan, link, b"", False
        self.preamble = Preamble(link.marker.encode())

    def _write(self, data: bytes) -> None:
        self.link.send(self.chan, data)

    def _read_some(self, timeout: float | None) -> bytes | None:
        while True:
            while self.chan.recv_stderr_ready():  # drained, so it never stalls the window
                self.stderr = (self.stderr + self.chan.recv_stderr(1 << 16))[-NOISE_KEPT:]
            try:
                data = self.chan.recv(1 << 20)  # waits at most POLL_S
            except TimeoutError:
                if self.link.dead():
                    raise OSError(self.link.failed) from None
                if timeout is not None:
                    return None  # Channel.recv keeps the deadline
                continue
            if data:
                self.link.alive_at = time.monotonic()
                data = self.preamble.feed(data)
                if data or timeout is not None:
                    return data or None
                continue
            if not self.chan.eof_received:
                self.link.failed = self.link.failed or "the SSH connection was lost"
            if self.link.dead():
                raise OSError(self.link.failed)
            return b""

    def diagnose(self) -> str:
        parts = [f"exit status {self.chan.exit_status}"] if self.chan.exit_status_ready() else []
        for name, text in (("stderr", self.stderr), ("login shell output", self.preamble.noise)):
            if text.strip():
                parts.append(f"{name}: {text.decode('utf-8', 'replace').strip()}")
        return "; ".join(parts)

    def interrupt(self) -> None:
        try:
            self.chan.shutdown_write()  # the runner ends the running command, then exits
        except ssh_errors():  # close() follows anyway
            pass

    def close(self, wait: float = 2.0) -> None:
        """End of file to the runner (it ends what commands left, then exits), then close."""
        try:
            if not self.link.dead():
                self.chan.shutdown_write()
                self.clean = self.chan.status_event.wait(wait) and self.chan.exit_status == 0
        except ssh_errors():  # closing anyway
            pass
        self.chan.close()


class RemoteProcess:
    """One command on its own channel, shaped like ``subprocess.Popen`` for ``ExecFallbackChannel``.

    ``stdout`` is a real pipe (the fallback selects on its fd), filled by a thread. Output still
    arriving ``EXIT_DRAIN_S`` seconds after the exit status is not waited for: that only happens
    when the remote wrapper was killed while its children held the stream.
    """

    def __init__(self, chan, link: SshLink):
        self.chan, self.link = chan, link
        self._exited_at: float | None = None
        read_fd, write_fd = os.pipe()
        self.stdout, self.stdin, self.stderr = os.fdopen(read_fd, "rb", 0), self, self
        threading.Thread(target=self._pump, args=(write_fd,), daemon=True, name="swe-sandbox-ssh-pump").start()

    def _ended(self) -> bool:
        """True once the exit status has been known for ``EXIT_DRAIN_S`` seconds."""
        if not self.chan.exit_status_ready():
            return False
        self._exited_at = self._exited_at or time.monotonic()
        return time.monotonic() - self._exited_at > EXIT_DRAIN_S

    def _pump(self, fd: int) -> None:
        preamble = Preamble(self.link.marker.encode())
        try:
            while data := self.link.recv(self.chan, self.chan.recv, ended=self._ended):
                data = preamble.feed(data)
                while data:
                    data = data[os.write(fd, data):]
        except OSError:
            pass
        finally:
            os.close(fd)

    def write(self, data: bytes) -> None:
        self.link.send(self.chan, data)

    def read(self, n: int = 1 << 16) -> bytes:
        """Next bytes of the remote stderr (b"" at its end)."""
        return self.link.recv(self.chan, self.chan.recv_stderr, n, ended=self._ended)

    def close(self) -> None:
        self.chan.shutdown_write()

    def wait(self, timeout: float | None = None) -> int:
        return self.link.exit_status(self.chan, timeout)

    def poll(self) -> int | None:
        return self.chan.exit_status if self.chan.exit_status_ready() else None

    def terminate(self) -> None:
        """Close the channel; the pump then ends and ``stdout`` reaches end of file (for a reader)."""
        try:
            self.chan.close()
        except ssh_errors():  # the transport is already gone (EOFError): so is the channel
            pass

    def kill(self) -> None:
        self.chan.close()
        self.stdout.close()  # a pump blocked on a full pipe gets EPIPE
