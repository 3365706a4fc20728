"""The direct channel: the host talks to a container's runner over a unix socket, not the engine's attach.

Through ``docker start --attach`` (or Podman's, through conmon) every frame is relayed by the
engine's daemon: ~1.1 ms and a share of a CPU per command on this host (issue 26's measurement).
Here the host listens on a unix socket in a fresh directory of its own (``ChannelSocket``), bound
read-only into the container at ``SANDBOX_CHANNEL_DIR``; the runner's ``hello`` (written on the
attach, as before) names the socket, and the runner connects to it before anything else runs in
the container (``swe_sandbox.runner``, "Direct channel"). Then:

- exactly one connection is accepted, and at once the socket is unlinked and the listener closed:
  no command can connect, replace or flood it (the bound directory is empty and read-only inside,
  the runner is PID 1 and not dumpable, so ``/proc/1/fd`` is closed to them). The empty directory
  stays until the sandbox closes: Docker's archive API fails on a container whose bind source is
  gone (``gc`` removes those of dead owners);
- every frame, both ways, keeps its HMAC and counters (``runner.FrameAuth``), so a connection that
  was not the runner's (a process of this host racing it) fails the ready frame's check and the
  sandbox is refused, never used;
- the attach stays open with nothing on it but the tether: the owner's death (even ``kill -9``)
  still ends the runner (end of file on its stdin), and an interrupt or close of the host ends both;
- a runner that cannot reach the socket says so on stderr and answers on the attach as before:
  ``DirectChannel.kind`` then says ``attach``.

A remote engine cannot bind a directory of this host: the container backends declare
``capabilities.DIRECT_RUNNER_CHANNEL`` missing there, and in the exec fallback.
"""

from __future__ import annotations

import os
import select
import selectors
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO

from swe_sandbox.environments.base import Channel, poll_ms

#: Where the channel's directory is bound inside the sandbox (read-only).
SANDBOX_CHANNEL_DIR = "/run/swe-sandbox/channel"
#: The socket's name in that directory.
CHANNEL_SOCKET_NAME = "runner.sock"
#: Prefix of the host directories (``<prefix><owner pid>-<random>``), which ``gc`` sweeps.
CHANNEL_DIR_PREFIX = "swe-sandbox-chan-"
#: A ``CLI run`` writes its container's id in the channel directory under this name
#: (``container.environment``): read and removed once the runner answered, before any command runs.
CIDFILE_NAME = "container.cid"


class ChannelSocket:
    """The listening end of one sandbox's direct channel, in a fresh host directory.

    The directory is ``0755`` and the socket ``0666``: the container's users are remapped host
    uids (``userns: remap``), which must reach it; what keeps others out is that it lives only
    until the runner connects (milliseconds) and that the frames are authenticated.

    Raises:
        OSError: the directory or the socket cannot be made.
    """

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{CHANNEL_DIR_PREFIX}{os.getpid()}-"))
        self.listener: socket.socket | None = None
        try:
            os.chmod(self.dir, 0o755)
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(str(self.dir / CHANNEL_SOCKET_NAME))
            os.chmod(self.dir / CHANNEL_SOCKET_NAME, 0o666)
            self.listener.listen(1)
        except OSError:
            self.close()
            raise

    @property
    def sandbox_path(self) -> str:
        """The socket's path inside the sandbox (what the runner's hello names)."""
        return f"{SANDBOX_CHANNEL_DIR}/{CHANNEL_SOCKET_NAME}"

    def binds(self) -> dict[str, str]:
        """``{host directory: SANDBOX_CHANNEL_DIR}``, for ``ContainerSpec.binds``."""
        return {str(self.dir): SANDBOX_CHANNEL_DIR}

    def accept(self) -> socket.socket:
        """The one connection; the listener and the socket file are gone after it."""
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        finally:
            self.stop()
        return conn

    def stop(self) -> None:
        """Stop listening and unlink the socket (idempotent); the empty directory stays."""
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
            (self.dir / CHANNEL_SOCKET_NAME).unlink(missing_ok=True)

    def close(self) -> None:
        """Stop listening and remove the directory (idempotent)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class DirectChannel(Channel):
    """A ``Channel`` whose frames go over the direct socket once the runner has connected.

    Until then (the hello, a launcher's unauthenticated frame, a runner that could not connect)
    it reads the attach process's stdout, as ``Channel`` does, while it waits for the connection.
    """

    def __init__(self, proc: subprocess.Popen[bytes], stderr_file: IO[bytes] | None, listening: ChannelSocket):
        super().__init__(proc, stderr_file)
        self._listening = listening
        self._sock: socket.socket | None = None
        self._poll: select.poll | None = None
        self._sock_lock = threading.Lock()

    @property
    def kind(self) -> str:
        """``socket`` once the runner is connected, else ``attach``."""
        return "socket" if self._sock is not None else "attach"

    def _write(self, data: bytes) -> None:
        if self._sock is None:
            super()._write(data)
        else:
            self._sock.sendall(data)

    def _read_some(self, timeout: float | None) -> bytes | None:
        if self._poll is not None:  # connected: one poll(2) per read, registered once
            if not self._poll.poll(poll_ms(timeout)):
                return None
            assert self._sock is not None
            return self._sock.recv(1 << 20)
        stdout = self._process.stdout
        assert stdout is not None  # spawn_runner's stdout=PIPE
        with selectors.DefaultSelector() as sel:
            sel.register(stdout.fileno(), selectors.EVENT_READ, "attach")
            if self._listening.listener is not None:
                sel.register(self._listening.listener, selectors.EVENT_READ, "listener")
            ready = [key.data for key, _ in sel.select(timeout)]
        if "attach" in ready:
            return os.read(stdout.fileno(), 1 << 20)
        if "listener" in ready:
            self._connect()
            return self._read_some(0)
        return None

    def stop_listening(self) -> None:
        """No runner will connect (the exec fallback): the socket goes now."""
        self._listening.stop()

    def _connect(self) -> None:
        with self._sock_lock:
            self._sock = self._listening.accept()
            self._poll = select.poll()
            self._poll.register(self._sock, select.POLLIN)

    def _end_socket(self, close: bool) -> None:
        """End of file to the runner on the socket too (``close``: and let the socket go)."""
        with self._sock_lock:
            sock = self._sock
            if sock is None:
                return
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if close:
                sock.close()

    def interrupt(self) -> None:
        super().interrupt()
        self._end_socket(close=False)

    def release(self) -> None:
        """End of file to the runner (socket and attach) without waiting for anything; the
        directory is removed (``close(wait=False)`` of the sandbox)."""
        self.interrupt()
        self._listening.close()

    def close(self, wait: float = 2.0) -> None:
        self._end_socket(close=False)
        try:
            super().close(wait)
        finally:
            self._end_socket(close=True)
            self._listening.close()


def gc(directory: str | None = None) -> int:
    """Remove the channel directories of owners that are gone (a host killed before it closed).

    Args:
        directory (str | None): where they are made; default ``tempfile.gettempdir()``.

    Returns:
        int: how many were removed.
    """
    removed = 0
    for path in Path(directory or tempfile.gettempdir()).glob(f"{CHANNEL_DIR_PREFIX}*-*"):
        pid = path.name[len(CHANNEL_DIR_PREFIX):].partition("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and path.is_dir() and not path.is_symlink() \
                and path.stat().st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
