"""The host side of the allow-list proxy: start, phase change, stop, decisions, and ``gc``.

Standard library only (no ``proxy`` import): the proxy itself runs in its own process
(``python -m swe_sandbox.network.serve``), in its own session, its stdin a pipe from this process, so
it dies with its owner even when the owner is SIGKILLed. Each running proxy leaves a small JSON file
in ``state_directory()`` (owner pid and start time, proxy pgid and start time) for ``gc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from swe_sandbox.errors import SandboxStartError
from swe_sandbox.network.policy import PROXY_SOCKET_NAME, NetworkPolicy

#: Longest unix socket path the kernel takes, in bytes (``sun_path`` less its NUL).
MAX_SOCKET_PATH = 107
#: How much of the proxy's stderr a start error quotes, in characters.
STDERR_TAIL = 2000
#: How long a stopping proxy gets to log its open connections and exit, in seconds.
STOP_GRACE = 2.0
#: The ``nobody`` uid and gid where the passwd file names none (the Linux overflow id).
NOBODY = 65534
_READY = b"ready\n"


def state_directory() -> Path:
    """Where running proxies are recorded: ``$XDG_RUNTIME_DIR/swe-sandbox/proxies``, else ``/tmp/swe-sandbox-UID/proxies``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "swe-sandbox" if runtime else Path(tempfile.gettempdir()) / f"swe-sandbox-{os.getuid()}"
    return base / "proxies"


def process_start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, ``/proc/PID/stat`` field 22).

    Returns:
        int | None: None when the process is gone or a zombie (its parent has not reaped it yet).
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def owned_privately(directory: Path) -> bool:
    """Whether ``directory`` is owned by this user and writable by no one else (``gc`` trusts its records)."""
    info = directory.lstat()
    return info.st_uid == os.getuid() and not info.st_mode & 0o022 and directory.is_dir() and not directory.is_symlink()


def live_group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` that are not zombies (from ``/proc``)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _alive(pid: int, start: int | None) -> bool:
    return start is not None and process_start_time(pid) == start


class AllowListProxy:
    """One allow-list proxy process, listening on ``directory / PROXY_SOCKET_NAME``.

    The policy file and the decision log live in a private directory (0700, never bound into the
    sandbox) this object creates at ``start`` and removes at ``stop``.

    Args:
        policy (NetworkPolicy): the policy of the first phase.
        directory (Path): the directory (made by the caller) the backend binds into the sandbox.
        state_dir (Path | None): where the proxy is recorded for ``gc``; default ``state_directory()``.

    Raises:
        ValueError: the socket path is longer than a unix socket path may be.
    """

    def __init__(self, policy: NetworkPolicy, directory: Path, *, state_dir: Path | None = None) -> None:
        self.policy = policy
        self.socket_path = Path(directory) / PROXY_SOCKET_NAME
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise ValueError(f"unix socket path too long ({MAX_SOCKET_PATH} bytes at most): {self.socket_path}")
        self.state_dir = state_dir or state_directory()
        self._private: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._decisions: list[dict[str, Any]] = []
        self._log_offset = 0  # bytes of the decision log parsed into ``_decisions``

    @property
    def pid(self) -> int | None:
        """The proxy process's pid (None when not running)."""
        return self._process.pid if self._process else None

    @property
    def pgid(self) -> int | None:
        """The proxy's process group (its pid: it leads its own session; None when not running)."""
        return self.pid

    def __enter__(self) -> AllowListProxy:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout: float = 30) -> None:
        """Start the proxy and wait until it accepts connections on the socket.

        Args:
            timeout (float): seconds to wait for it; default 30.

        Raises:
            SandboxStartError: it exited or did not come up in time (the message quotes its stderr), or
                the state directory is not owned by this user alone.
        """
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the proxy without waiting for it (``wait_ready`` then does): the caller can start
        its sandbox meanwhile. Idempotent.

        Raises:
            SandboxStartError: the state directory is not owned by this user alone.
        """
        if self._process is not None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not owned_privately(self.state_dir):
            raise SandboxStartError(f"the proxy state directory {self.state_dir} is not ours alone (owner, mode)")
        self._process = self._spawn()
        self._record()
        self._ready = False

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until the launched proxy accepts connections (at once when it already does).

        Raises:
            SandboxStartError: it exited or did not come up in ``timeout`` seconds (default 30;
                the message quotes its stderr); it is stopped then.
        """
        if self._ready:
            return
        try:
            self._wait_ready(timeout)
        except SandboxStartError:
            self._kill()
            raise
        self._ready = True

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Write the policy into the private directory (made once) and start serve.py on it."""
        if self._private is None:
            self._private = Path(tempfile.mkdtemp(prefix="swe-sandbox-net-"))
            self._log_offset = 0  # a new, empty log (decisions so far stay)
        policy_file = self._private / "policy.json"
        policy_file.write_text(self.policy.model_dump_json())
        command = [
            sys.executable, "-m", "swe_sandbox.network.serve", "--socket", str(self.socket_path),
            "--policy", str(policy_file), "--log", str(self._private / "decisions.jsonl"),
        ]
        ids = proxy_ids()
        if ids is not None:  # root: the proxy runs as nobody, so a flaw in it is not the host's root
            for path in (self._private, self.socket_path.parent):
                if path.is_dir():  # a missing one: the proxy then fails to listen, and says so
                    os.chown(path, *ids)
            command += ["--drop-to", f"{ids[0]}:{ids[1]}"]
        with open(self._private / "stderr.log", "ab") as stderr:  # the child keeps its own copy
            return subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                cwd="/",
            )

    def _wait_ready(self, timeout: float) -> None:
        assert self._process is not None and self._process.stdout is not None
        deadline, seen = time.monotonic() + timeout, b""
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            while not seen.endswith(_READY):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxStartError(f"the network proxy did not come up in {timeout:g} s: {self._stderr_tail()}")
                if selector.select(left):
                    chunk = os.read(self._process.stdout.fileno(), 64)
                    if not chunk:
                        code = self._process.wait()
                        raise SandboxStartError(f"the network proxy exited ({code}): {self._stderr_tail()}")
                    seen += chunk

    def _stderr_tail(self) -> str:
        assert self._private is not None
        with contextlib.suppress(OSError):
            return (self._private / "stderr.log").read_text(errors="replace")[-STDERR_TAIL:].strip() or "(no stderr)"
        return "(no stderr)"

    def _record(self) -> None:
        assert self._process is not None and self._private is not None
        state = {
            "owner_pid": os.getpid(), "owner_start": process_start_time(os.getpid()),
            "pgid": self._process.pid, "proxy_start": process_start_time(self._process.pid),
            "socket": str(self.socket_path), "private_dir": str(self._private),
        }
        (self.state_dir / f"{self._process.pid}.json").write_text(json.dumps(state))

    def _kill(self) -> None:
        """Stop the proxy's process group (SIGTERM, SIGKILL after ``STOP_GRACE``), reap it, remove its files."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        self._wait_group_gone(process.pid)
        self.socket_path.unlink(missing_ok=True)
        (self.state_dir / f"{process.pid}.json").unlink(missing_ok=True)
        self._read_log()

    @staticmethod
    def _wait_group_gone(pgid: int, timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while live_group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def set_policy(self, policy: NetworkPolicy, timeout: float = 30) -> None:
        """Change phase: stop the proxy (its open tunnels die with it), start one with ``policy``.

        Decisions so far are kept. Args and errors as ``start``.
        """
        self.policy = policy
        running = self._process is not None
        self._kill()
        if running:
            self.start(timeout)

    def stop(self) -> None:
        """Stop the proxy and remove its socket and private directory; idempotent.

        ``decisions()`` still answers afterwards.
        """
        self._kill()
        if self._private is not None:
            self._read_log()
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

    def _read_log(self) -> None:
        if self._private is None:
            return
        try:  # only what was appended since the last read, up to its last whole line
            with open(self._private / "decisions.jsonl", "rb") as log:
                log.seek(self._log_offset)
                chunk = log.read()
        except FileNotFoundError:
            return
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._log_offset += len(whole)
        for line in whole.splitlines():
            with contextlib.suppress(ValueError):
                self._decisions.append(json.loads(line))

    def decisions(self) -> list[dict[str, Any]]:
        """Every decision so far, all phases (``Decision.as_dict()`` objects), oldest first."""
        self._read_log()
        return list(self._decisions)


def proxy_ids() -> tuple[int, int] | None:
    """``(uid, gid)`` the proxy drops to when this process is root: the ``nobody`` user (65534 where
    the passwd file has none); None when not root (the proxy runs as this user)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return NOBODY, NOBODY


def gc(state_dir: Path | None = None) -> int:
    """Kill the proxies whose owner process is gone, and forget stale records.

    A state directory not owned by this user alone (or writable by others) is not read.

    Args:
        state_dir (Path | None): where proxies are recorded; default ``state_directory()``.

    Returns:
        int: how many proxy processes were still running and were killed.
    """
    directory = state_dir or state_directory()
    killed = 0
    if not directory.is_dir() or not owned_privately(directory):
        return 0
    for record in sorted(directory.glob("*.json")):
        try:
            state = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if _alive(state["owner_pid"], state["owner_start"]):
            continue
        if _alive(state["pgid"], state["proxy_start"]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(state["pgid"], signal.SIGKILL)
            killed += 1
        Path(state["socket"]).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the directory bound into the sandbox, once empty
            Path(state["socket"]).parent.rmdir()
        shutil.rmtree(state["private_dir"], ignore_errors=True)
        record.unlink(missing_ok=True)
    return killed
