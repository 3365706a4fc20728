"""The host side of every backend: one ``execute`` on top of the in-sandbox runner.

``Environment`` owns ``start``, ``execute`` and ``close`` (a template method, invoke's ``Runner``
style); a backend fills in primitives and hooks, and overrides none of those three:

- ``_open_channel()``: start the sandbox, start ``python3 -c BOOTSTRAP`` in it, return a
  ``Session``: a ``Channel`` (bytes to and from that process) or the exec fallback's
  (``fallback.ExecFallbackChannel``). Its primitives are ``frames(req, timeout)`` (a request's
  streamed chunks, then its result) and ``cancel(request_id)``;
- ``_stop()``: remove the sandbox (idempotent);
- hooks, all optional: ``_after_start()`` (the sandbox is up), ``_check_result(result)`` (a
  result before the submission check), ``_lost_connection(exc)`` (the transport, not the sandbox,
  was lost: ``ConnectionLost``), ``_drop_connection()`` (then), ``_explain_death(exc)`` (a dead
  sandbox's error, after cleanup), ``_interrupt()`` and ``_close()`` (``close`` from another
  thread, and under the lock);
- ``_upload`` / ``_download`` where the backend has its own way to move files.

Everything in DESIGN.md §1 happens in ``swe_sandbox.runner``; this module only frames requests,
waits, turns a lost runner into ``SandboxDied`` and recognises the submission sentinel. ``execute``
and ``stream`` (DESIGN.md §10) are one exchange: a streamed request also yields the runner's chunks,
and leaving a stream early, or ``cancel()``, sends the runner a ``cancel`` for the request in flight.
"""

from __future__ import annotations

import collections
import json
import math
import os
import posixpath
import select
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, cast

from swe_sandbox import runner
from swe_sandbox.capabilities import (
    COMMAND_STDIN,
    NETWORK_ALLOWLIST,
    RESET_IN_PLACE,
    RUN_AS_USER,
    SEPARATE_STDERR,
    SNAPSHOT,
    missing_capabilities,
)
from swe_sandbox.config import DEFAULT_ENV, EnvironmentConfig, check_env, encodable, network_policy_of
from swe_sandbox.errors import (
    ConfigError,
    ConnectionLost,
    ProtocolError,
    ResetFailed,
    SandboxDied,
    SandboxError,
    SandboxStartError,
    Submitted,
    SweSandboxError,
)
from swe_sandbox.network.policy import NetworkPolicy, proxy_environment
from swe_sandbox.streaming import StreamEvent

if TYPE_CHECKING:
    from swe_sandbox.environments.snapshot import Snapshot, SnapshotRoot
    from swe_sandbox.network.proxy_process import AllowListProxy

SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: Extra seconds the host waits beyond a command's timeout before it calls the sandbox dead. The
#: runner itself answers within timeout + ~0.6 s; this only catches a frozen or lost runner.
HOST_GRACE_S = 5.0
#: Why a command cannot start while this thread has one in flight (a stream left open).
REENTERED = ("a command is already running in this environment from this thread (a stream not finished "
             "or closed): finish or close() it first; one command runs at a time per sandbox")
#: How long leaving a stream early waits for the cancelled command's record (seconds) before it
#: closes the sandbox (the runner answers a cancel within ~0.5 s: ``runner.KILL_BUDGET_S`` and
#: ``KILL_COLLECT_S``).
CANCEL_WAIT_S = 3.0
#: Seconds the runner has for a ``reset`` request (kill every process, empty the trees).
RESET_TIMEOUT_S = 120.0
#: Longest per-command timeout accepted, in seconds (about 11.5 days; select() refuses ~2.1e6 s).
MAX_TIMEOUT_S = 1e6
_RUNNER_SOURCE: bytes | None = None


def runner_payload(hello: dict[str, Any]) -> bytes:
    """What a transport writes to ``python3 -c BOOTSTRAP``'s stdin: length line, runner source, and
    the plain ``hello`` frame (the key and the runner's options, see ``runner``)."""
    global _RUNNER_SOURCE
    if _RUNNER_SOURCE is None:
        _RUNNER_SOURCE = Path(runner.__file__).read_bytes()
    data = json.dumps(hello).encode()
    return b"%d\n" % len(_RUNNER_SOURCE) + _RUNNER_SOURCE + struct.pack(">I", len(data)) + data


def poll_ms(timeout: float | None) -> int | None:
    """``timeout`` (seconds, None: no limit) as ``poll(2)``'s milliseconds, rounded up (never 0 for a
    positive timeout, which would spin)."""
    return None if timeout is None else max(0, math.ceil(timeout * 1000))


def check_timeout(timeout: float | None) -> float | None:
    """Return ``timeout`` (seconds) if it is None or a finite number in (0, ``MAX_TIMEOUT_S``].

    Raises:
        ConfigError: anything else (checked before a request is sent, so nothing is half-done).
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ConfigError(f"timeout: expected a number of seconds, got {timeout!r}")
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise ConfigError(f"timeout: must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout!r}")
    return float(timeout)


def mount_relative(path: str, mount: str) -> str:
    """Sandbox ``path`` (absolute) as a path relative to ``mount``; "" for ``mount`` itself.

    A name that merely starts with two dots (``..foo``) is a legal name under ``mount``.

    Raises:
        ValueError: ``path`` is outside ``mount`` (the message names both).
    """
    rel = posixpath.relpath(posixpath.normpath(path), mount)
    if rel == ".." or rel.startswith("../"):
        raise ValueError(f"{path}: only paths under {mount} can be copied")
    return "" if rel == "." else rel


def command_of(action: dict[str, Any] | str) -> str:
    """The command of an ``execute`` action (``{"command": str}`` or a plain string).

    Raises:
        TypeError: ``action`` holds no command string.
    """
    command = action if isinstance(action, str) else action.get("command")
    if not isinstance(command, str):
        raise TypeError(f"action must be {{'command': str}}, got {action!r}")
    return command


def streamed_rest(output: str, streamed: str) -> str | None:
    """What of a result's ``output`` was not streamed yet, or None when ``streamed`` is not its prefix."""
    return output[len(streamed):] if output.startswith(streamed) else None


def last_frame(frames: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """The last of ``frames`` (a ``Session.frames`` iterator: the result), the chunks skipped."""
    return collections.deque(frames, maxlen=1)[0]


def find_submission(output: str, returncode: int) -> str | None:
    """Return the submission if ``output`` submits (first non-empty line is the sentinel), else None."""
    if returncode != 0:
        return None
    rest = output
    while rest:
        line, newline, after = rest.partition("\n")
        if line.strip():
            return after if line.rstrip("\r") == SUBMIT_SENTINEL else None
        rest = after
    return None


#: The result's ``extra`` keys every runner sends, and their types.
RESULT_EXTRA: dict[str, type | tuple[type, ...]] = {
    "timed_out": bool, "truncated": bool, "output_bytes": int, "dropped_bytes": int, "duration_s": (int, float),
}
#: The ``extra`` keys of a result whose stderr was kept apart (``separate_stderr``).
STDERR_EXTRA: dict[str, type | tuple[type, ...]] = {"stderr_bytes": int, "stderr_dropped_bytes": int}
#: The result keys a command's output streams go to (``StreamEvent.stream``).
STREAMS = ("output", "stderr")
#: Longest ``exception_info`` accepted from a runner (characters).
MAX_INFO_CHARS = 4096


def check_result(reply: dict[str, Any], max_output_bytes: int, stderr: bool = False) -> None:
    """Refuse a result whose fields have the wrong type or an impossible value.

    Args:
        reply: the runner's ``result`` frame.
        max_output_bytes: the request's cap; the output (one character at most per byte kept)
            may exceed it only by the truncation marker.
        stderr: the request kept stderr apart: ``stderr`` and its ``extra`` counts must be there too.

    Raises:
        ProtocolError: naming the first bad field.
    """
    def bad(field: str, value: Any) -> ProtocolError:
        return ProtocolError(f"the sandbox sent an invalid result ({field}={str(value)[:80]!r}); "
                             "the sandbox is no longer trusted")

    output, code, info, extra = (reply.get(k) for k in ("output", "returncode", "exception_info", "extra"))
    if not isinstance(output, str) or len(output) > max_output_bytes + 200:
        raise bad("output", type(output).__name__ if not isinstance(output, str) else f"{len(output)} characters")
    if type(code) is not int or not -1 <= code <= 255:
        raise bad("returncode", code)
    if not isinstance(info, str) or len(info) > MAX_INFO_CHARS:
        raise bad("exception_info", info)
    if not isinstance(extra, dict):
        raise bad("extra", extra)
    expected = {**RESULT_EXTRA, **STDERR_EXTRA} if stderr else RESULT_EXTRA
    if stderr and (not isinstance(reply.get("stderr"), str) or len(reply["stderr"]) > max_output_bytes + 200):
        raise bad("stderr", type(reply.get("stderr")).__name__)
    for key, kind in expected.items():
        value = extra.get(key)
        # past isinstance, and kind not bool (int, or int and float): value is a number
        if not isinstance(value, kind) or (kind is not bool and (isinstance(value, bool) or cast(float, value) < 0)):
            raise bad(f"extra.{key}", value)


def check_chunk(frame: dict[str, Any], request: dict[str, Any]) -> str:
    """The text of a streamed request's ``chunk`` frame.

    Raises:
        ProtocolError: the frame is not a chunk of ``request`` or its text is not a bounded string.
    """
    text = frame.get("output")
    stream = frame.get("stream", "output")
    if frame.get("id") != request.get("id") or not isinstance(text, str) \
            or len(text) > request["max_output_bytes"] + 200 \
            or stream not in (STREAMS if request.get("stderr") == "separate" else STREAMS[:1]):
        raise ProtocolError(f"the sandbox sent an invalid chunk ({str(frame)[:120]}); the sandbox is no longer trusted")
    return text


def check_reset_reply(reply: dict[str, Any]) -> None:
    """Refuse a ``reset`` reply whose ``processes`` or ``errors`` is not a bounded list of strings.

    Raises:
        ProtocolError: naming the bad field.
    """
    for field in ("processes", "errors", "entries"):
        value = reply.get(field)
        values = list(value.values()) if field == "entries" and isinstance(value, dict) else value
        if not isinstance(values, list) or len(values) > 100_000 \
                or not all(isinstance(v, str) or (v is None and field == "entries") for v in values):
            raise ProtocolError(f"the sandbox sent an invalid reset reply ({field}={str(value)[:80]!r}); "
                                "the sandbox is no longer trusted")


def check_forward_reply(reply: dict[str, Any]) -> None:
    """Raise ProtocolError unless ``reply`` is a forward result (``listening`` or ``error``)."""
    if reply.get("op") != "result" or not (isinstance(reply.get("listening"), int) or isinstance(reply.get("error"), str)):
        raise ProtocolError(f"bad forward reply from the runner: {str(reply)[:200]}")


class KillAllReply(NamedTuple):
    """The runner's answer to ``Environment.kill_all``."""

    processes: list[str]
    errors: list[str]
    entries: dict[str, str | None]


class Session(Protocol):
    """What ``Environment`` talks to: the runner over a ``Channel``, or the exec fallback."""

    @property
    def kind(self) -> str:
        """How frames reach the sandbox: ``pipe`` (the runner's own pipes), ``socket`` (the direct
        channel), ``attach`` (an engine's attach stream), ``ssh``, or ``exec`` (no runner)."""

    def ready(self, timeout: float | None, unauthenticated: tuple[str, ...] = ()) -> dict[str, Any]:
        """The session's first frame (the runner's ``ready``), read once; ``timeout`` in seconds."""

    def frames(self, req: dict[str, Any], timeout: float | None) -> Iterator[dict[str, Any]]:
        """Send one ``exec`` request; yield its ``chunk`` frames (a streamed request's), then its
        ``result`` frame, last (``timeout``: seconds for all of them, None: no limit)."""

    def cancel(self, request_id: int) -> None:
        """From any thread: end request ``request_id`` now (its result says it was cancelled)."""

    def diagnose(self) -> str:
        """What the sandbox's process left behind (for errors)."""

    def interrupt(self) -> None:
        """From another thread: end the running command now."""

    def close(self, wait: float = 2.0) -> None:
        """End the session (``wait``: seconds for its process to exit)."""


class Channel:
    """Bytes to and from the runner process of one sandbox, over a child process's pipes: a
    ``Session``.

    Backends whose runner is reached otherwise (a socket, an SSH channel) subclass it and
    override ``_write`` and ``_read_some``.
    """

    #: Largest frame accepted, in bytes: a bound on host memory whatever the sandbox sends.
    max_frame = 256 << 20
    #: ``kind`` of this class's channels (a subclass whose kind can change overrides ``kind``).
    KIND: ClassVar[str] = "pipe"

    @property
    def kind(self) -> str:
        """How frames reach the runner (``env.info["channel"]``): ``pipe``, the runner's own pipes."""
        return self.KIND

    def __init__(self, proc: subprocess.Popen[bytes] | None, stderr_file: IO[bytes] | None = None):
        self.proc = proc
        self.stderr_file = stderr_file
        self._buf = bytearray()
        self._auth: runner.FrameAuth | None = None
        self._first: dict[str, Any] | None = None
        self._send_lock = threading.Lock()  # a cancel from another thread never splits a frame
        self._stdout_poll: select.poll | None = None

    def start_runner(self, **options: Any) -> None:
        """Hand the runner its source and a fresh key (``runner``'s hello); from now on every
        frame, both ways, is authenticated with it. ``options``: the hello's other fields
        (``max_lifetime``). A write error is ignored: the ready wait reports why it died."""
        key = os.urandom(32)
        self._auth = runner.FrameAuth(key, b"host", b"runner")
        try:
            self._write(runner_payload({"op": "hello", "key": key.hex(), **options}))
        except OSError:
            pass

    def ready(self, timeout: float | None, unauthenticated: tuple[str, ...] = ()) -> dict[str, Any]:
        """The runner's first frame (``ready``, or a launcher's ``unauthenticated`` one), read once:
        later calls return the same frame. Raises as ``recv``."""
        if self._first is None:
            self._first = self.recv(timeout, unauthenticated)
        return self._first

    def frames(self, req: dict[str, Any], timeout: float | None) -> Iterator[dict[str, Any]]:
        """Send ``req``; yield the runner's ``chunk`` frames for it (``"stream": true``), then its
        ``result`` frame (same ``id``), all within ``timeout`` seconds (None: no limit) of the
        runner's time: what the consumer spends between chunks is not counted.

        Raises:
            SandboxDied: the runner is gone, or no reply within ``timeout`` seconds.
            ProtocolError: a reply is not a chunk or the result of ``req``, or is not authentic.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self.send(req)
        while True:
            reply = self.recv(timeout, deadline=deadline)
            if reply.get("op") == "chunk" and req.get("stream"):
                paused = time.monotonic()
                yield reply
                if deadline is not None:  # the consumer's time is not the runner's
                    deadline += time.monotonic() - paused
                continue
            if reply.get("op") != "result" or reply.get("id") != req.get("id"):
                raise ProtocolError(f"expected the result of request {req.get('id')}, got {str(reply)[:200]}")
            yield reply
            return

    def request(self, req: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """Send ``req`` and return the runner's ``result`` frame for it (``frames``' last). Raises as
        ``frames``."""
        return last_frame(self.frames(req, timeout))

    def cancel(self, request_id: int) -> None:
        """From any thread: ask the runner to end request ``request_id`` (its tree is killed as on a
        timeout; the result, still to be read, says it was cancelled).

        Raises:
            SandboxDied: the runner cannot be written to.
        """
        self.send({"op": "cancel", "id": request_id})

    @property
    def _process(self) -> subprocess.Popen[bytes]:
        """``proc``; a subclass without a child process (``proc`` None) overrides every method
        that uses it (``_write``, ``_read_some``, ``diagnose``, ``interrupt``, ``close``)."""
        if self.proc is None:
            raise TypeError(f"{type(self).__name__} has no child process: it must override the methods using one")
        return self.proc

    def _write(self, data: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None  # spawn_runner's stdin=PIPE
        stdin.write(data)
        stdin.flush()

    def _read_some(self, timeout: float | None) -> bytes | None:
        """Bytes available within ``timeout`` seconds (b"" at end of file, None on timeout)."""
        stdout = self._process.stdout
        assert stdout is not None  # spawn_runner's stdout=PIPE
        fd = stdout.fileno()
        if self._stdout_poll is None:  # one poll(2) per read, registered once
            self._stdout_poll = select.poll()
            self._stdout_poll.register(fd, select.POLLIN)
        if not self._stdout_poll.poll(poll_ms(timeout)):
            return None
        return os.read(fd, 1 << 20)

    def send(self, obj: dict[str, Any]) -> None:
        """Send one frame; a request's ``input`` (bytes: the command's stdin) follows its JSON raw.

        Raises:
            SandboxDied: the runner cannot be written to.
        """
        blob = obj.get("input")
        if isinstance(blob, bytes):
            obj = {**{k: v for k, v in obj.items() if k != "input"}, "input_follows": len(blob)}
        data = json.dumps(obj).encode()
        frame = struct.pack(">I", len(data)) + data + (blob if isinstance(blob, bytes) else b"")
        try:
            with self._send_lock:  # signed and written in one order: the MACs count frames
                if self._auth is not None:
                    frame += self._auth.sign(frame)
                self._write(frame)
        except (OSError, ValueError) as exc:
            raise SandboxDied(gone(f"cannot write to its runner: {exc}", self.diagnose())) from None

    def recv(self, timeout: float | None, unauthenticated: tuple[str, ...] = (), *,
             deadline: float | None = None) -> dict[str, Any]:
        """Next frame from the runner (with its raw ``output`` put back in, see ``runner``).

        Args:
            timeout: seconds to wait for the whole frame; None: no limit.
            unauthenticated: ops accepted without a MAC (a container launcher's ``nopython``, sent
                before anything of the sandbox's runs); every other frame must carry a valid one.
            deadline: the ``time.monotonic()`` by which the frame must be read, when ``timeout``
                started earlier (a request's later frames); None: ``timeout`` from now.

        Raises:
            SandboxDied: end of file, or nothing within ``timeout`` seconds.
            ProtocolError: an oversized, undecodable, unauthenticated or non-object frame.
        """
        if deadline is None and timeout is not None:
            deadline = time.monotonic() + timeout
        self._fill(4, deadline, timeout)
        end = 4 + self._checked(struct.unpack(">I", self._buf[:4])[0])
        self._fill(end, deadline, timeout)
        try:
            frame = json.loads(bytes(self._buf[4:end]))
        except ValueError as exc:
            raise ProtocolError(f"bad frame from runner: {exc}") from None
        if not isinstance(frame, dict):
            raise ProtocolError(f"bad frame from runner: not an object ({type(frame).__name__})")
        if frame.get("op") in unauthenticated and not frame.keys() - {"op"}:
            del self._buf[:end]
            return frame
        follows = frame.pop("output_follows", None)
        if follows is not None:
            end += self._checked(follows)
            self._fill(end, deadline, timeout)
            frame["output"] = bytes(self._buf[end - follows:end]).decode("utf-8", "replace")
        self._authenticate(end, deadline, timeout)
        return frame

    def _authenticate(self, end: int, deadline: float | None, timeout: float | None) -> None:
        """Check the MAC after the frame's ``end`` bytes, then consume the frame and its MAC."""
        if self._auth is not None:
            self._fill(end + runner.MAC_SIZE, deadline, timeout)
            if not self._auth.verify(bytes(self._buf[:end]), bytes(self._buf[end:end + runner.MAC_SIZE])):
                raise ProtocolError("a frame from the sandbox failed authentication (forged or corrupted); "
                                    "the sandbox is no longer trusted")
            end += runner.MAC_SIZE
        del self._buf[:end]  # only now: a timeout above leaves the buffer as it was

    def _checked(self, size: Any) -> int:
        if not isinstance(size, int) or not 0 <= size <= self.max_frame:
            raise ProtocolError(f"the runner announced a {size}-byte frame (limit {self.max_frame})")
        return size

    def _fill(self, size: int, deadline: float | None, timeout: float | None) -> None:
        """Read from the runner until ``size`` bytes are buffered, by ``deadline`` (monotonic seconds)."""
        while len(self._buf) < size:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise SandboxDied(f"the sandbox stopped answering (no reply within {timeout:g} s)")
            try:
                data = self._read_some(left)
            except OSError as exc:
                raise SandboxDied(gone(str(exc), self.diagnose())) from None
            if data == b"":
                raise SandboxDied(gone("its runner exited", self.diagnose()))
            if data:
                self._buf += data

    def diagnose(self) -> str:
        """What the runner process left behind: exit status and the tail of its stderr."""
        parts = []
        code = self._process.poll()
        if code is not None:
            parts.append(f"exit status {code}")
        if self.stderr_file is not None:
            try:
                self.stderr_file.seek(0)
                tail = self.stderr_file.read()[-2000:].decode("utf-8", "replace").strip()
            except (OSError, ValueError):
                tail = ""
            if tail:
                parts.append(f"stderr: {tail}")
        return "; ".join(parts)

    def interrupt(self) -> None:
        """From another thread, during a command: end of file to the runner, which then kills the
        running command (its result says the sandbox was closed) and everything else, and exits."""
        stdin = self.proc.stdin if self.proc is not None else None
        try:
            if stdin is not None:
                stdin.close()
        except (OSError, ValueError):
            pass

    def close(self, wait: float = 2.0) -> None:
        """Ask the runner to end every process it started, then make sure it is gone."""
        proc = self._process
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # end of file: the runner kills what commands left, then exits
        except (OSError, ValueError):
            pass
        if not wait_exit(proc, wait):
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, self.stderr_file):
            if stream is not None:
                stream.close()


def gone(why: str, diagnosis: str) -> str:
    """``SandboxDied``'s message for a runner that cannot be reached: ``why``, then what its process
    left behind (``Channel.diagnose``), when anything."""
    return f"the sandbox is gone ({why})" + (f". {diagnosis}" if diagnosis else "")


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether ``proc`` exited (and was reaped) within ``timeout`` seconds.

    Through a pidfd where there is one (Linux >= 5.3): woken at the exit itself, where
    ``Popen.wait(timeout)`` polls with sleeps growing to 50 ms (a one-shot ``exec`` on bwrap spent
    ~30 ms of its close there).
    """
    if proc.poll() is not None:
        return True
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here: Popen's own wait
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(poll_ms(timeout))
    finally:
        os.close(pidfd)
    return proc.poll() is not None


_SPAWNER = None
_SPAWNER_LOCK = threading.Lock()


def in_long_lived_thread(func, *args, **kwargs):
    """Call ``func`` in the main thread or in one thread that lives as long as the process.

    A parent-death signal (bwrap's ``--die-with-parent``, ``PR_SET_PDEATHSIG``) fires when the
    *thread* that forked the child ends, so a sandbox started from a short-lived worker thread
    (a thread pool running rollouts) would be killed when that thread exits (prctl(2)).
    """
    global _SPAWNER
    if threading.current_thread() is threading.main_thread():
        return func(*args, **kwargs)
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            from concurrent.futures import ThreadPoolExecutor

            _SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="swe-sandbox-spawner")
        future = _SPAWNER.submit(func, *args, **kwargs)
    return future.result()


def spawn_runner(argv: list[str], env: dict[str, str], cwd: str | None = None, *,
                 make: Callable[[subprocess.Popen[bytes], IO[bytes]], Channel] = Channel, **options: Any) -> Channel:
    """Start ``argv`` (ending in ``python3 -c BOOTSTRAP``) as a child process and hand it the runner
    (``options``: the runner's, see ``Channel.start_runner``). ``make(proc, stderr_file)`` builds
    the channel (default ``Channel``: the process's pipes; ``direct.DirectChannel``: a socket).

    Raises:
        SandboxStartError: the process could not be started.
    """
    stderr_file = tempfile.TemporaryFile()
    try:
        proc = in_long_lived_thread(
            subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file,
            env=env, cwd=cwd, start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        stderr_file.close()
        raise SandboxStartError(f"cannot start {argv[0]}: {exc}") from None
    channel = make(proc, stderr_file)
    channel.start_runner(**options)
    return channel


class Environment:
    """Base class of every backend (mini-swe-agent's Environment protocol, plus ``close``).

    Use it as a context manager, or call ``close()``: closing ends every process the sandbox's
    commands started and removes the sandbox. The sandbox starts on first use.

    Attributes:
        config (EnvironmentConfig): the validated config.
    """

    config_class: ClassVar[type[EnvironmentConfig]] = EnvironmentConfig
    #: One line for ``swe-sandbox check`` and the docs: what this backend isolates (an instance may
    #: state it for its config: ssh with remote bwrap, a container in the host's user namespace).
    isolation: str = ""
    #: True when the backend cannot run without being told where (ssh: a host): ``swe-sandbox
    #: check`` without ``--env`` then shows it without counting it.
    needs_target: ClassVar[bool] = False

    #: In-memory directories a reset empties but a snapshot does not keep (``/dev/shm``).
    volatile_dirs: ClassVar[tuple[str, ...]] = ()

    #: The exception raised on the submission sentinel (a subclass of ``Submitted``; the
    #: mini-swe-agent classes raise one that is mini's ``Submitted`` too).
    submitted_error: ClassVar[type[Submitted]] = Submitted

    def __init__(self, config: EnvironmentConfig):
        self.config = config
        self._channel: Session | None = None
        self._closed = False
        self._lock = threading.RLock()
        self._seq = 0
        self._running: int | None = None  # the id of the request in flight (``cancel``)
        self.info: dict[str, Any] = {}
        #: ``network: allowlist``: the host directory bound into the sandbox at ``SANDBOX_NET_DIR``
        #: (the proxy's socket is in it); None otherwise or before start.
        self.net_dir: Path | None = None
        self._proxy: AllowListProxy | None = None
        self._decisions_seen = 0

    # -- primitives backends provide -------------------------------------------------------------
    def _open_channel(self) -> Session:
        """Start the sandbox and its runner (or the exec fallback); the session to it."""
        raise NotImplementedError

    def _stop(self) -> None:
        """Remove whatever the sandbox left on the host (idempotent)."""

    # -- hooks (optional) --------------------------------------------------------------------------
    def _start_error(self, exc: SandboxError) -> SweSandboxError:
        """What to raise when the runner did not start (``exc``: why its first frame did not come);
        a backend that checks its prerequisites only then says what is missing."""
        return SandboxStartError(f"{type(self).__name__}: the runner did not start: {exc}")

    def _after_start(self) -> None:
        """The sandbox and its session are up (``self.info`` holds the ready frame); a failure here
        should ``close()`` and raise ``SandboxStartError``."""

    def _check_result(self, result: dict[str, Any]) -> None:
        """Look at (and possibly annotate) a command's result before the submission check."""

    def _lost_connection(self, exc: SandboxDied) -> ConnectionLost | None:
        """Called when a command found the sandbox gone, before any cleanup: the error to raise
        when only the connection to it was lost (the environment then stays open), else None."""
        return None

    def _drop_connection(self) -> None:
        """After ``ConnectionLost``, the session closed: let go of the lost connection (the next
        command opens a new one)."""

    def _explain_death(self, exc: SandboxDied) -> SandboxDied:
        """The error a dead sandbox raises, after the environment was closed (default: ``exc``)."""
        return exc

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this backend cannot run on this host, or None when it can."""
        return None

    @classmethod
    def gc(cls, *, dry_run: bool = False, all_hosts: bool = False) -> list[dict[str, str]]:
        """Remove what killed runs of this backend left behind (``swe-sandbox gc``).

        The default has nothing to remove: a backend whose sandboxes end with their owner process.

        Args:
            dry_run: only say what would be removed. Default False.
            all_hosts: also what was created from other hosts (a shared remote engine). Default False.

        Returns:
            list[dict[str, str]]: one ``{"backend", "id", "run_id", "owner_pid", "action"}`` per leftover
            looked at (see ``container.engine.gc``); empty by default.
        """
        return []

    # -- shared ----------------------------------------------------------------------------------
    def sandbox_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The sandbox's environment: ``base``, ``DEFAULT_ENV``, ``forward_env``, then ``env``."""
        env = dict(base or {})
        env.update(DEFAULT_ENV)
        if network_policy_of(self.config) is not None:
            env.update(proxy_environment())
        env.update({k: os.environ[k] for k in self.config.forward_env if k in os.environ})
        env.update(self.config.env)
        return env

    def start(self) -> None:
        """Start the sandbox and its runner now (``execute`` does it on first use).

        Raises:
            SandboxStartError: the sandbox or runner did not come up within ``start_timeout``.
            SandboxError: the environment was closed.
        """
        if self._closed:
            raise SandboxError("this environment is closed")
        if self._channel is not None:
            return
        self._start_network()
        try:
            channel = self._open_channel()
        except BaseException:
            self._stop_network()
            raise
        try:
            ready = channel.ready(self.config.start_timeout)
        except SandboxError as exc:
            channel.close(wait=0.5)
            self._stop()
            self._stop_network()
            raise self._start_error(exc) from None
        if ready.get("op") != "ready":
            channel.close(wait=0.5)
            self._stop_network()
            raise ProtocolError(f"expected the runner's ready frame, got {ready!r}")
        self.info = dict(ready)
        self.info["channel"] = getattr(channel, "kind", "unknown")  # a third-party Session may predate it
        self._channel = channel
        self._forward_network()
        self._after_start()

    def execute(self, action: dict[str, Any] | str, cwd: str = "", *, timeout: float | None = None,
                stdin: str | bytes | None = None, env: Mapping[str, str] | None = None, user: str | int | None = None,
                separate_stderr: bool = False) -> dict[str, Any]:
        """Run one command in a fresh ``bash -c`` inside the sandbox (DESIGN.md §1).

        Args:
            action: ``{"command": str}``; other keys are ignored. A plain string is accepted too.
            cwd: working directory inside the sandbox; empty: ``config.cwd``, else the sandbox default.
            timeout: seconds; None: ``config.timeout``.
            stdin: bytes (or text, sent as UTF-8) the command reads on its stdin; None: ``/dev/null``.
            env: variables set for this command only, over the sandbox's.
            user: run the command as this user of the sandbox (a name or uid); None: the sandbox's.
            separate_stderr: keep stderr apart: ``output`` is then stdout alone, ``stderr`` the
                rest (each capped at ``max_output_bytes``), ``extra`` adds ``stderr_bytes`` and
                ``stderr_dropped_bytes``. Default False: one merged stream (the contract's).

        Returns:
            dict: ``output`` (str), ``returncode`` (int; 128+N on signal N, -1 if unfinished),
            ``exception_info`` (str), ``extra`` (``timed_out``, ``truncated``, ``output_bytes``,
            ``dropped_bytes``, ``duration_s``; ``cancelled`` (True) after ``cancel()``; ``user_error``
            (``unknown`` or ``not_permitted``) when ``user`` could not be taken on).

        Raises:
            Submitted: the output's first non-empty line is the sentinel and returncode is 0.
            SandboxDied: the sandbox died or vanished (the environment is closed then).
            SandboxStartError: the sandbox could not be started.
            ConfigError: an option the backend cannot honour (``stdin``, ``user``,
                ``separate_stderr``: its declared capabilities, ``swe_sandbox.capabilities``).
        """
        options = self._options(stdin, env, user, separate_stderr)
        return self._finished(self._run(command_of(action), cwd, timeout, options))

    def stream(self, action: dict[str, Any] | str, cwd: str = "", *, timeout: float | None = None,
               stdin: str | bytes | None = None, env: Mapping[str, str] | None = None, user: str | int | None = None,
               separate_stderr: bool = False) -> Iterator[StreamEvent]:
        """Run one command as ``execute`` does, yielding its output as it is written.

        Yields ``StreamEvent(text=...)`` chunks (merged stdout and stderr in the order written, whole
        UTF-8 characters, at most ``runner.STREAM_INTERVAL_S`` apart while output flows, only what
        the output cap keeps: the kept tail and the truncation marker come at the end), then one
        ``StreamEvent(result=...)``: the dict ``execute`` returns. The texts joined equal its
        ``output``.

        Closing the iterator early (``break``, an exception in the loop's body, ``close()``) cancels
        the command: its whole tree is killed and the runner's record read before ``close`` returns
        (within ~0.5 s; the sandbox stays usable). While open it holds the environment's lock:
        iterate and close it in one thread.

        With ``separate_stderr``, each event's ``stream`` says which it belongs to (``output``:
        stdout, or ``stderr``), each stream's texts joining to the result's key of that name.

        Args:
            action, cwd, timeout, stdin, env, user, separate_stderr: as for ``execute``.

        Raises:
            Submitted: at the end, instead of the last event, when the output submits (``execute``'s rule).
            SandboxDied, SandboxStartError, ProtocolError, ConfigError: as ``execute``.
        """
        command = command_of(action)
        options = self._options(stdin, env, user, separate_stderr)
        timeout = check_timeout(self.config.timeout if timeout is None else timeout)
        with self._lock:
            frames = self._exchange(self._request(command, cwd, timeout, options, stream=True))
            sent: dict[str, list[str]] = {name: [] for name in STREAMS}
            reply: dict[str, Any] = {}
            waiting = False  # True while the consumer holds a chunk: leaving then cancels
            try:
                for frame in frames:
                    if frame["op"] == "result":
                        reply = frame
                        continue
                    name = frame.get("stream", "output")
                    sent[name].append(frame["output"])
                    waiting = True
                    yield StreamEvent(text=frame["output"], stream=name)
                    waiting = False
            finally:
                if waiting:
                    self._abandon(frames)
        result = self._result_of(reply)
        for name in STREAMS:
            rest = streamed_rest(result.get(name, ""), "".join(sent[name]))
            if rest is None:
                self.close()
                raise ProtocolError(f"the sandbox streamed {name} that its result does not hold; "
                                    "the sandbox is no longer trusted")
            if rest:
                yield StreamEvent(text=rest, stream=name)
        yield StreamEvent(result=self._finished(result))

    def cancel(self) -> None:
        """End the command running in this environment now, from any thread; the sandbox stays usable.

        The command's whole tree is killed as on a timeout, and the running ``execute`` (or
        ``stream``) returns its record: ``returncode`` -1, ``exception_info``
        ``runner.CANCELLED_MESSAGE``, ``extra["cancelled"]`` True, the output so far. Does nothing
        when no command runs; never raises (a dead sandbox is the running call's to report).
        """
        channel, running = self._channel, self._running
        if channel is None or running is None:
            return
        try:
            channel.cancel(running)
        except (SandboxError, OSError):
            pass

    def _abandon(self, frames: Iterator[dict[str, Any]]) -> None:
        """A stream left early: cancel its command and read to its result (dropped); a runner that
        does not answer within ``CANCEL_WAIT_S`` seconds is closed from a timer thread."""
        if self._channel is None:  # closed meanwhile (close() from this thread): nothing runs any more
            return
        guard = threading.Timer(CANCEL_WAIT_S, self.close)
        guard.daemon = True
        guard.start()
        try:
            self.cancel()
            for _ in frames:
                pass
        except (SandboxError, OSError, ValueError):
            pass  # _exchange closed the environment (or it was closed): leaving raises nothing new
        finally:
            guard.cancel()

    def _finished(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` after the backend's check and the submission rule (``execute``'s end)."""
        self._check_result(result)
        if self._proxy is not None:
            result.setdefault("extra", {})["network"] = self.network_decisions(new=True)
        submission = find_submission(result["output"], result["returncode"])
        if submission is not None:
            raise self.submitted_error(submission, result)
        return result

    def _options(self, stdin: str | bytes | None, env: Mapping[str, str] | None, user: str | int | None,
                 separate_stderr: bool) -> dict[str, Any]:
        """The request fields of ``execute``'s options, checked.

        Raises:
            ConfigError: a value of the wrong type, or an option this backend cannot honour.
        """
        if stdin is not None and not (isinstance(stdin, bytes) or (isinstance(stdin, str) and encodable(stdin))):
            raise ConfigError(f"stdin: expected bytes or valid text, got {type(stdin).__name__}")
        try:
            command_env = check_env(env or {})
        except (ValueError, AttributeError) as exc:
            raise ConfigError(f"env: {exc}"[:300]) from None
        if user is not None and (isinstance(user, bool) or not isinstance(user, (str, int)) or not str(user)):
            raise ConfigError(f"user: expected a user name or uid, got {user!r}")
        asked = {COMMAND_STDIN: ("stdin", stdin is not None), RUN_AS_USER: ("user", user is not None),
                 SEPARATE_STDERR: ("separate_stderr", bool(separate_stderr))}
        lacking = missing_capabilities(type(self), self.config) if any(used for _, used in asked.values()) else {}
        for capability, (name, used) in asked.items():
            if used and capability in lacking:
                raise ConfigError(f"{name}: not available on this {self.config.backend} sandbox: {lacking[capability]}")
        options: dict[str, Any] = {"env": command_env}
        if stdin is not None:
            options["input"] = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        if user is not None:
            options["user"] = str(user)
        if separate_stderr:
            options["stderr"] = "separate"
        return options

    def _request(self, command: str, cwd: str, timeout: float | None, options: dict[str, Any] | None = None,
                 stream: bool = False) -> dict[str, Any]:
        """The runner's ``exec`` request (its ``id`` is set when it is sent); ``options``: ``_options``'."""
        request: dict[str, Any] = {"op": "exec", "command": command, "cwd": cwd or self.config.cwd, "env": {},
                                   "timeout": timeout, "max_output_bytes": self.config.max_output_bytes,
                                   **(options or {})}
        if stream:
            request["stream"] = True
        return request

    @staticmethod
    def _result_of(reply: dict[str, Any]) -> dict[str, Any]:
        keys = ("output", "returncode", "exception_info", "extra", "stderr")
        return {k: reply[k] for k in keys if k in reply}

    def _run(self, command: str, cwd: str = "", timeout: float | None = None,
             options: dict[str, Any] | None = None) -> dict[str, Any]:
        """One command's result dict, without the hooks and the submission check (``execute``).

        Raises:
            ConnectionLost: from ``_lost_connection`` (the environment stays open).
            SandboxDied: the sandbox is gone (the environment is closed).
            SandboxError: the sandbox is no longer trusted (the environment is closed).
        """
        timeout = check_timeout(self.config.timeout if timeout is None else timeout)
        with self._lock:  # one command at a time per sandbox; callers in other threads wait
            reply = last_frame(self._exchange(self._request(command, cwd, timeout, options)))
        return self._result_of(reply)

    def _exchange(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send one request; yield its chunk frames, then its result, each checked (``check_chunk``,
        ``check_result``). A lost or confused runner closes the sandbox (``ConnectionLost``: only the
        session). Call it under the lock.

        Raises:
            RuntimeError: this thread has a command in flight already (a stream it has not finished
                or closed): a usage error; the sandbox and that command are left as they are.
        """
        if self._running is not None:
            raise RuntimeError(REENTERED)
        self.start()
        self._seq += 1
        request["id"] = self._seq
        timeout = request["timeout"]
        channel = self._channel
        assert channel is not None  # start() set it or raised
        self._running = request["id"]
        try:
            for frame in channel.frames(request, None if timeout is None else timeout + HOST_GRACE_S):
                if frame.get("op") == "chunk":
                    check_chunk(frame, request)
                elif request["op"] == "reset":
                    check_reset_reply(frame)
                elif request["op"] == "forward":
                    check_forward_reply(frame)
                else:
                    check_result(frame, request["max_output_bytes"], stderr=request.get("stderr") == "separate")
                yield frame
        except SandboxDied as exc:
            lost = self._lost_connection(exc)
            if lost is not None:
                self._drop_session()
                raise lost from None
            self.close()
            raise self._explain_death(exc) from None
        except SandboxError:
            self.close()
            raise
        finally:
            self._running = None

    # -- snapshots (DESIGN.md section 10; ``swe_sandbox.environments.snapshot``) -----------------
    def snapshot(self) -> Snapshot:
        """Capture the sandbox's filesystem state now (it starts the sandbox; it keeps running).

        What is captured: containers, the whole root; bwrap, the workspace, ``/tmp`` and
        ``/var/tmp``; local, the working directory (``cwd``); ssh, the remote workspace. Processes
        are not (a background server is not running in a sandbox started from the snapshot).

        Returns:
            Snapshot: ``fork(n)``, ``environment()``, ``remove()``; remove it (or use it as a
            context manager) when done.

        Raises:
            ConfigError: this backend (or config) cannot take snapshots (``capabilities.SNAPSHOT``).
            SnapshotError: the state could not be captured.
        """
        self._require(SNAPSHOT, "snapshot")
        self.start()
        with self._lock:
            if self._running is not None:
                raise RuntimeError(REENTERED)
            return self._snapshot()

    def reset(self, snap: Snapshot) -> None:
        """Bring the sandbox back to ``snap`` in place, and prove it: every process but the runner
        killed, the snapshot's files restored, and then no process left and every captured tree's
        digest (read by the host) equal to the snapshot's.

        Args:
            snap: a snapshot of a sandbox of this backend and config (``snapshot()``).

        Raises:
            ValueError: ``snap`` is of another backend or config.
            ConfigError: this backend cannot reset in place (``capabilities.RESET_IN_PLACE``).
            SnapshotError: ``snap`` was removed.
            ResetFailed: something drifted (``drift`` lists what); the sandbox was closed, never
                reused: start a fresh one with ``snap.environment()``.
        """
        snap.check_compatible(self)
        self._require(RESET_IN_PLACE, "reset")
        snap.check_usable()
        self.start()
        with self._lock:
            if self._running is not None:
                raise RuntimeError(REENTERED)
            try:
                drift = snap.reset(self)
            except (OSError, ValueError, SandboxError) as exc:
                drift = [f"the reset did not complete: {exc}"]
        if drift:
            self.close()
            raise ResetFailed(drift)

    def kill_all(self, remove: Sequence[str] = (), clear: Sequence[str] = (), digest: Sequence[str] = ()
                 ) -> KillAllReply:
        """Kill every process of the sandbox but the runner, then remove the ``remove`` paths,
        empty the ``clear`` directories and read the ``digest`` paths' own entries (the runner's
        ``reset`` request: no link followed, no program started). Starts the sandbox.

        Returns:
            KillAllReply: ``processes`` still alive (``"pid: command line"``), ``errors`` (what
            could not be removed), ``entries`` (``{path: entry or None}``, ``runner.path_entry``).

        Raises:
            ConfigError: there is no runner to ask (the exec fallback: ``RESET_IN_PLACE``).
            SandboxDied: the sandbox is gone (the environment is closed).
        """
        self._require(RESET_IN_PLACE, "kill_all")
        with self._lock:
            reply = last_frame(self._exchange({"op": "reset", "remove": list(remove), "clear": list(clear),
                                               "digest": list(digest), "timeout": RESET_TIMEOUT_S}))
        return KillAllReply(reply["processes"], reply["errors"], reply["entries"])

    def path_entries(self, paths: Sequence[str]) -> dict[str, str | None]:
        """Each path's own entry as the runner reads it (``runner.path_entry``: type, mode, owner,
        a file's size and sha256, a link's target; None: absent), killing nothing.

        Raises:
            ConfigError: there is no runner to ask (the exec fallback).
            SandboxDied: the sandbox is gone.
        """
        self._require(RESET_IN_PLACE, "path_entries")
        with self._lock:
            reply = last_frame(self._exchange({"op": "reset", "kill": False, "digest": list(paths),
                                               "timeout": RESET_TIMEOUT_S}))
        return reply["entries"]

    def snapshot_roots(self) -> list[SnapshotRoot]:
        """The trees of this sandbox's state a store snapshot keeps (started sandbox); backends
        with store snapshots override it (``snapshot.StoreSnapshot``)."""
        raise ConfigError(f"{self.config.backend}: snapshots are not supported by {type(self).__name__}")

    def sibling_config(self) -> EnvironmentConfig:
        """The config of a new sandbox like this one but with a fresh workspace of its own (a
        snapshot's forks): this config, without ``workspace`` (never shared with a fork)."""
        if "workspace" in type(self.config).model_fields:
            return self.config.model_copy(update={"workspace": None})
        return self.config

    def _snapshot(self) -> Snapshot:
        """Take the snapshot (started sandbox, under the lock); default: a store of ``snapshot_roots``."""
        from swe_sandbox.environments.snapshot import StoreSnapshot

        return StoreSnapshot.take(self)

    # -- network (``network: allowlist``; DESIGN.md section 11) -----------------------------------
    def set_network(self, policy: NetworkPolicy | None) -> None:
        """Change the sandbox's allow-list for the next phase (setup, agent): the proxy is started
        anew with ``policy`` (None: every connection refused), so every tunnel open so far ends.

        Raises:
            ConfigError: the sandbox was not made with ``network: allowlist`` (a sandbox without
                the proxy's socket cannot be given one later).
        """
        if network_policy_of(self.config) is None:
            raise ConfigError(f"set_network: this {self.config.backend} sandbox was made without network: allowlist")
        with self._lock:
            self.start()
            assert self._proxy is not None
            self._proxy.set_policy(policy if policy is not None else NetworkPolicy())

    def network_decisions(self, new: bool = False) -> list[dict[str, Any]]:
        """The allow-list proxy's decisions (``swe_sandbox.network.policy.Decision`` dicts: host
        asked, port, allowed, reason, bytes), oldest first; ``new``: only those not returned by an
        earlier ``new`` call (what a command's result carries in ``extra["network"]``). Empty
        without ``network: allowlist``; kept after close."""
        if self._proxy is None:
            return []
        decisions = self._proxy.decisions()
        if not new:
            return decisions
        fresh, self._decisions_seen = decisions[self._decisions_seen:], len(decisions)
        return fresh

    def _start_network(self) -> None:
        """``network: allowlist``: the host directory bound into the sandbox and its proxy, up."""
        policy = network_policy_of(self.config)
        if policy is None:
            return
        self._require(NETWORK_ALLOWLIST, "network: allowlist")
        from swe_sandbox.network.proxy_process import AllowListProxy

        self.net_dir = Path(tempfile.mkdtemp(prefix="swe-sandbox-sock-"))
        os.chmod(self.net_dir, 0o755)  # the sandbox's (remapped) users reach the socket in it
        self._proxy = AllowListProxy(policy, self.net_dir)
        try:
            self._proxy.launch()  # comes up while the sandbox does (``_forward_network`` waits)
        except BaseException:
            self._stop_network()
            raise

    def _forward_network(self) -> None:
        """Have the runner relay ``127.0.0.1:SANDBOX_PROXY_PORT`` inside to the proxy's socket."""
        if self._proxy is None:
            return
        from swe_sandbox.network.policy import PROXY_SOCKET_NAME, SANDBOX_NET_DIR, SANDBOX_PROXY_PORT

        try:
            self._proxy.wait_ready(self.config.start_timeout)
        except SandboxStartError:
            self.close()
            raise
        request = {"op": "forward", "port": SANDBOX_PROXY_PORT, "socket": f"{SANDBOX_NET_DIR}/{PROXY_SOCKET_NAME}",
                   "timeout": self.config.start_timeout}
        with self._lock:
            reply = last_frame(self._exchange(request))
        if reply.get("listening") != SANDBOX_PROXY_PORT:
            self.close()
            raise SandboxStartError(f"{self.config.backend}: the runner could not forward the network proxy: "
                                    f"{reply.get('error') or reply}")
        self.info["network"] = {"proxy": f"http://127.0.0.1:{SANDBOX_PROXY_PORT}", "proxy_pid": self._proxy.pid}

    def _stop_network(self) -> None:
        """Stop the proxy (its decisions stay readable) and remove the bound directory."""
        if self._proxy is not None:
            self._proxy.stop()
        if self.net_dir is not None:
            shutil.rmtree(self.net_dir, ignore_errors=True)
            self.net_dir = None

    def _require(self, capability: str, what: str) -> None:
        """Raises ConfigError when this backend lacks ``capability`` (``what``: the call asked for)."""
        lacking = missing_capabilities(type(self), self.config)
        if capability in lacking:
            raise ConfigError(f"{what}: not available on this {self.config.backend} sandbox: {lacking[capability]}")

    def _drop_session(self) -> None:
        """After ``ConnectionLost``: close the session and the connection, keep the environment open."""
        self._close_session(then=self._drop_connection)

    def close(self, *, wait: bool = True) -> None:
        """End every process started in the sandbox and remove it. Idempotent.

        Called from another thread while a command runs, it ends that command at once (the
        ``execute`` in the other thread returns a "closed during the command" result or raises
        ``SandboxDied``) instead of waiting for it.

        Args:
            wait: True (default): the sandbox is gone when ``close`` returns. False: tell it to end
                and return at once where the backend can (docker and podman: the runner, told by
                an end of file, ends every process and exits, and the engine removes the container
                by itself a moment later, as ``auto_remove``; ``gc`` sweeps what a crash left); the
                other backends wait anyway. What a one-shot ``swe-sandbox exec`` uses.
        """
        if not self._lock.acquire(blocking=False):
            self._interrupt()
            self._lock.acquire()
        try:
            self._closed = True
            try:
                self._close() if wait else self._release()
            finally:
                self._stop_network()
        finally:
            self._lock.release()

    def _release(self) -> None:
        """``close(wait=False)`` under the lock; by default as ``_close``."""
        self._close()

    def _interrupt(self) -> None:
        """End the running command from another thread (``close`` then takes over)."""
        channel = self._channel
        if channel is not None:
            channel.interrupt()

    def _close(self) -> None:
        """``close`` under the lock: the channel, then the backend's own cleanup."""
        self._close_session(then=self._stop)

    def _close_session(self, then) -> None:
        """Close the session (if any), then call ``then()`` whatever happened."""
        channel, self._channel = self._channel, None
        try:
            if channel is not None:
                channel.close()
        finally:
            then()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Variables for the agent's templates: the config fields and the runner's facts."""
        values = {**self.config.model_dump(), **self.info}
        if self.config.cwd:  # where commands run; the runner's own start directory may differ (ssh)
            values["cwd"] = self.config.cwd
        return {**values, **kwargs}

    def serialize(self) -> dict[str, Any]:
        """mini-swe-agent's shape: ``{"info": {"config": {"environment": ..., "environment_type": ...}}}``."""
        kind = f"{type(self).__module__}.{type(self).__name__}"
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"), "environment_type": kind}}}

    # -- files -----------------------------------------------------------------------------------
    def upload(self, src: str | os.PathLike, dst: str) -> None:
        """Copy the host file or directory ``src`` to ``dst`` inside the sandbox.

        Args:
            src: a host path (followed if it is itself a symlink); a directory is copied as a
                tree (bytes, exec bits, empty directories, symlinks inside kept as links).
            dst: the sandbox path it becomes; relative: to the directory commands start in
                (``config.cwd``, else the sandbox's default). Missing parents are created, an
                existing directory is merged into.

        Raises:
            FileNotFoundError: ``src`` does not exist (nothing is created).
            ValueError: the backend cannot reach ``dst`` (bwrap: outside the workspace mount).
            SandboxError: the sandbox refused the copy.
        """
        source = Path(src)
        if not os.path.lexists(source):
            raise FileNotFoundError(2, "upload: no such file or directory", str(source))
        if source.is_symlink() and source.exists():  # `--workspace ./link-to-repo` means the repo
            source = source.resolve()
        self._upload(source, self.sandbox_path(dst))

    def download(self, src: str, dst: str | os.PathLike) -> None:
        """Copy the file or directory ``src`` inside the sandbox to ``dst`` on the host.

        Args:
            src: a sandbox path; relative: as for ``upload``.
            dst: the host path it becomes (missing parents created, an existing directory is
                merged into); a file onto an existing host directory lands inside it.

        At most ``config.max_download_bytes`` are written on the host, counted over the whole
        tree by apparent size (a sparse file counts its full length) and by the bytes really
        copied (a file growing during the copy is cut off), on every backend.

        Raises:
            FileNotFoundError: ``src`` does not exist in the sandbox (nothing is created on the host).
            ValueError: the backend cannot reach ``src`` (bwrap: outside the workspace mount).
            DownloadTooLarge: (a ``SandboxError``) the copy would pass ``max_download_bytes``; the
                message names the path and the limit. Nothing of this download is left on the
                host: refused before writing when the source measures over the limit, what was
                written removed when a file grows past it during the copy.
            SandboxError: the sandbox refused the copy, or its archive was unsafe.
        """
        self._download(self.sandbox_path(src), Path(dst))

    def sandbox_path(self, path: str | os.PathLike) -> str:
        """``path`` made absolute as commands see it: relative to ``config.cwd``, else to where the
        sandbox starts commands (the ``cwd`` its runner reported); starts the sandbox."""
        path = os.fspath(path)
        self.start()
        base = posixpath.join(str(self.info.get("cwd") or "/"), self.config.cwd or "")
        return posixpath.normpath(posixpath.join(base, path))

    def _upload(self, src: Path, dst: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no upload")

    def _download(self, src: str, dst: Path) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no download")
