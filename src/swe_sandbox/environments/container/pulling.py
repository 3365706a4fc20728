"""Images on demand: one pull per image at a time in a process, shared by everyone who needs it.

``pull(request)`` pulls ``request.image`` on an engine (``PullRequest``: backend, engine url,
image, whether TLS may be skipped, ``pull_timeout``). While a pull of the same image on the same
engine is under way, later callers do not start another: they wait for that one and share its
outcome, success or ``ImagePullError``. ``present`` (the ``missing`` policy) is asked under the same
per-image lock, so an image that arrived meanwhile is not pulled again.

Each pull runs in a child process (``pull_child``) through the engine's SDK; its events update a
``PullProgress`` that every waiter's listener sees. A pull that outlives ``pull_timeout`` is
stopped (the child is killed, which makes the engine cancel it) and fails with reason
``timeout``; one that nobody waits for any more is stopped too, and ``stop_all`` (a batch's or
``image pull``'s Ctrl-C) stops every pull under way, failing its waiters with reason ``interrupted``.

Listeners are per caller and ambient: ``report_pulls(listener)`` sets one for the code it wraps
(the command line's display, a batch instance's line); ``pull`` reads it in the caller's thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from swe_sandbox.environments.container.image_ref import parse_image
from swe_sandbox.environments.container.pull_errors import from_engine_text, pull_error
from swe_sandbox.environments.container.pull_progress import PullProgress
from swe_sandbox.errors import ImagePullError

PullListener = Callable[[PullProgress], None]
_LISTENER: ContextVar[PullListener | None] = ContextVar("swe_sandbox_pull_listener", default=None)


@contextmanager
def report_pulls(listener: PullListener | None) -> Iterator[None]:
    """Within this block (this thread), pulls report their progress to ``listener``.

    ``listener(progress)`` is called from the pull's reader thread after every event, and once
    more when the pull ends (``progress.finished``); it must be quick and thread-safe.
    """
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


@dataclass(frozen=True)
class PullRequest:
    """What to pull, where, and how long it may take."""

    backend: str
    """``docker`` or ``podman``: the engine (its ``Engine`` class pulls)."""
    url: str
    """The engine's API socket (empty: the engine's default)."""
    image: str
    insecure: bool = False
    """Skip TLS verification, allow plain HTTP (Podman; Docker decides by itself)."""
    timeout: float = 1800.0
    """Seconds the pull may take (``pull_timeout``)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return self.backend, self.url, parse_image(self.image).qualified


class PullJob:
    """One pull under way: its child process, its progress, its waiters and its outcome."""

    def __init__(self, request: PullRequest, on_end: Callable[[], None]):
        self.request, self.on_end = request, on_end
        self.progress = PullProgress(request.image, engine=request.backend)
        self.error: ImagePullError | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.listeners: list[PullListener | None] = []
        self.timed_out = self.interrupted = False
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the child (see ``pull_child``), its reader thread and the ``timeout`` timer."""
        package_root = str(Path(__file__).resolve().parents[3])  # the child imports this same code
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        req = self.request
        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child cannot block on it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swe_sandbox.environments.container.pull_child", req.backend, req.url, req.image,
             "1" if req.insecure else "0", str(req.timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, start_new_session=True)
        self.timer = threading.Timer(req.timeout, self._expire)
        self.timer.daemon = True
        self.timer.start()
        threading.Thread(target=self._read, name=f"swe-sandbox-pull {req.image}", daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.progress.apply(event)
            self._notify()
        returncode = self.proc.wait()
        self.stderr.seek(0)
        stderr = self.stderr.read()[-4096:].decode(errors="replace")
        self.stderr.close()
        self._finish(returncode, stderr)

    def _finish(self, returncode: int, stderr: str) -> None:
        self.timer.cancel()
        req, progress = self.request, self.progress
        if self.interrupted:
            self.error = pull_error(req.backend, req.image, "interrupted")
        elif self.timed_out:
            self.error = pull_error(req.backend, req.image, "timeout", timeout=req.timeout)
        elif progress.error or returncode != 0:
            last = stderr.strip().splitlines()[-1:] or [f"the pull stopped (exit status {returncode})"]
            self.error = from_engine_text(req.backend, req.image, progress.error or last[0])
        progress.finished, progress.failed = True, self.error is not None
        self._notify()  # before done: the waiters stop listening once it is set
        self.on_end()
        self.done.set()

    def _notify(self) -> None:
        with self.lock:
            listeners = [listener for listener in self.listeners if listener is not None]
        for listener in listeners:
            listener(self.progress)

    def _expire(self) -> None:
        self.timed_out = True
        self.stop()

    def kill(self) -> None:
        """Kill the child: the engine cancels the pull when its connection closes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def stop(self) -> None:
        """``kill``, then wait (up to 10 s) for the outcome to be recorded."""
        self.kill()
        self.done.wait(10)

    def wait(self, listener: PullListener | None, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the outcome, ``listener`` seeing the progress.

        Raises:
            ImagePullError: the pull failed, or did not end in time.
        """
        with self.lock:
            self.listeners.append(listener)
        if listener is not None:
            listener(self.progress)
        try:
            ended = self.done.wait(timeout)
        finally:
            with self.lock:
                self.listeners.remove(listener)
                orphaned = not self.listeners
            if orphaned and not self.done.is_set():
                self.timed_out = True  # nobody waits any more (a timeout, Ctrl-C): stop it
                self.stop()
        if not ended:
            raise pull_error(self.request.backend, self.request.image, "timeout", timeout=timeout)
        if self.error is not None:
            raise self.error


_JOBS: dict[tuple[str, str, str], PullJob] = {}
_KEY_LOCKS: dict[tuple[str, str, str], threading.Lock] = {}
_REGISTRY_LOCK = threading.Lock()


def _key_lock(key: tuple[str, str, str]) -> threading.Lock:
    with _REGISTRY_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def pull(request: PullRequest, present: Callable[[], bool] | None = None) -> None:
    """Pull ``request.image``, or wait for the pull of it already under way (see the module doc).

    Args:
        request: what to pull.
        present: with the ``missing`` policy, asked before a new pull starts: True skips it.

    Raises:
        ImagePullError: the pull failed (the cause in ``reason``) or took longer than ``request.timeout``.
    """
    key = request.key
    with _key_lock(key):
        job = _JOBS.get(key)
        if job is None:
            if present is not None and present():
                return
            job = _JOBS[key] = PullJob(request, on_end=lambda: _forget(key))
            job.start()
    job.wait(_LISTENER.get(), request.timeout)


def stop_all() -> None:
    """Stop every pull under way in this process (Ctrl-C): each child is killed (the engine cancels
    its pull) and its waiters fail with ``ImagePullError`` reason ``interrupted``. Thread-safe."""
    with _REGISTRY_LOCK:
        jobs = list(_JOBS.values())
    for job in jobs:
        job.interrupted = True
        job.kill()
    for job in jobs:
        job.done.wait(10)


def _forget(key: tuple[str, str, str]) -> None:
    with _key_lock(key):
        _JOBS.pop(key, None)
