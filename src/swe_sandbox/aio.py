"""The sandbox for asyncio programs: ``await env.execute(...)``, ``async for event in env.stream(...)``.

    from swe_sandbox import aio

    async def main():
        async with await aio.get_environment("docker", timeout=60) as env:
            result = await env.execute({"command": "pytest -q"})

An ``AsyncEnvironment`` wraps one sync ``Environment`` (``.sync``) and runs every call of it in ONE
thread of its own (named ``swe-sandbox-aio``), so awaiting never blocks the event loop.

Why a thread bridge and not a native asyncio transport: every backend's host side (starting the
sandbox through the docker / podman SDKs or paramiko, the exec fallback, death handling, result
checks, OOM marking) is one sync implementation of the contract; a bridge reuses all of it, and
parsing a 10 MiB result in a thread never stalls the loop. One thread per environment, not asyncio's
default executor (``min(32, cpus + 4)`` threads: 6 here, which would serialise 20 sandboxes), and
not a shared pool: calls of one environment run in order (as the sync lock would anyway), calls of
different environments never wait for each other. Measured (``benchmarks/bench_async.py``, its
docstring has the table; local backend, 2 CPUs): 200 sandboxes x 10 ``true`` take the same wall
(3.9-4.1 s) through the bridge as through a ``ThreadPoolExecutor(200)`` of the sync API (3.9-4.3
s) or a native ``loop.add_reader`` prototype without threads (3.3-4.5 s): the runners' own work
saturates the CPUs. The bridge's price is CPU in this process, ~0.46 ms per command (threads
~0.3 ms, native ~0.1 ms; a command costs the runner ~2 ms), and one thread per environment
(200 threads: +11 MiB RSS). One sandbox alone: 2.3-2.8 ms per command, as the sync API's 2.2-3.1.
20 sandboxes each awaiting ``sleep 1`` finish in 1.05-1.15 s on every backend with a runner,
with a 10 ms ticker on the loop at most 40 ms late.

Cancellation. When the task awaiting ``execute()`` (or iterating ``stream()``) is cancelled, the
sync environment's ``cancel()`` is called from the loop, the call waits (shielded, at most
``CANCELLED_CALL_WAIT_S``) for the worker to finish, then ``CancelledError`` is raised again, never
swallowed (``asyncio.timeout`` and ``TaskGroup`` depend on it). The command's whole tree is killed
as a timeout would kill it, and the sandbox stays usable. The sync side got the cancelled record
(returncode -1, ``extra["cancelled"]`` True, ``exception_info`` ``runner.CANCELLED_MESSAGE``, the
output so far); the awaiting task gets ``CancelledError`` instead, as asyncio requires.

Closing. ``close()`` (or leaving ``async with``) never queues behind a running command: the sync
``close()`` runs in a thread of its own, which interrupts the command and removes the sandbox;
the worker then ends. Environments left open are closed when the event loop that last used them
ends (see ``AsyncEnvironment``), which is what Ctrl-C of ``asyncio.run(main())`` goes through.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from swe_sandbox import environments
from swe_sandbox.errors import SandboxError

if TYPE_CHECKING:
    import os

    from swe_sandbox.environments.base import Environment
    from swe_sandbox.environments.snapshot import Snapshot
    from swe_sandbox.network.policy import NetworkPolicy
    from swe_sandbox.streaming import StreamEvent

__all__ = ["AsyncEnvironment", "afork", "get_environment"]

T = TypeVar("T")
#: Name (prefix) of each environment's worker thread.
WORKER_NAME = "swe-sandbox-aio"
#: Longest wait, in seconds, for a cancelled command's call to end before ``CancelledError`` is re-raised.
CANCELLED_CALL_WAIT_S = 2.0
#: Seconds between two ``cancel()`` calls while a cancelled command has not ended (a cancel that
#: came before the command reached the sandbox is a no-op there, so it is repeated; the runner
#: ends a command ~0.01 s after a cancel, the exec fallback ~0.2 s, one more exec each time).
CANCEL_RETRY_S = 0.25
#: What a call of a closed AsyncEnvironment raises (a ``SandboxError``).
CLOSED_MESSAGE = "this AsyncEnvironment is closed"

#: Every AsyncEnvironment not closed yet (weakly: a dropped one is cleaned up by its sync
#: environment's own finalisation).
_OPEN: weakref.WeakSet[AsyncEnvironment] = weakref.WeakSet()
#: The closer task of each event loop an AsyncEnvironment was used in (held here: asyncio keeps
#: only weak references to tasks).
_CLOSERS: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}


async def get_environment(config: str | Path | Mapping[str, Any] = "local", overrides: Sequence[str] = (),
                          **kwargs: Any) -> AsyncEnvironment:
    """Build an environment for asyncio code (not started yet: it starts on first use).

    The arguments are ``swe_sandbox.get_environment``'s; the sync environment is built in a thread
    (a backend's first use imports its SDK).

    Args:
        config: a preset name (``"local"``, ``"bwrap"``, ...), a YAML file, or a dict.
        overrides: ``-c`` style ``environment.key=value`` strings, applied before ``kwargs``.
        **kwargs: config fields that override the preset (e.g. ``timeout=30``).

    Returns:
        AsyncEnvironment: use it with ``async with``, or ``await env.close()``.

    Raises:
        ConfigError: unknown preset or backend, or an invalid field (named in the message).
    """
    build = functools.partial(environments.get_environment, config, overrides, **kwargs)
    return AsyncEnvironment(await _in_new_thread(build, f"{WORKER_NAME}-build", daemon=True))


class AsyncEnvironment:
    """One sandbox for asyncio code: the sync ``Environment`` ``sync``, driven from one worker thread.

    Every method has the sync one's arguments, results and exceptions (``Submitted``,
    ``SandboxDied``, ...). Calls of one environment run one after another in its worker thread;
    calls of different environments run at the same time.

    An environment is tied to the event loop that last used it: one still open when that loop ends
    is closed then, by a task of this module that waits for the end of the loop (``asyncio.run``
    and ``asyncio.Runner`` cancel every task left when the main coroutine ends, also after Ctrl-C,
    before the interpreter joins threads or runs ``atexit``, which is why this is no ``atexit``
    hook: a worker busy with a command would hold the exit before one ran). What no loop gets to
    (the process killed, ``SIGTERM`` without a handler), the sync environment's own tether ends
    when its owner process does: docker/podman (runner and exec fallback): the attach ends, the
    container's main process exits and the container is removed; local, bwrap, ssh (runner): the
    runner's channel closes and it kills every process of the sandbox. Not so the exec fallback
    on a host (``local`` and ``ssh`` with ``runner: exec``): nothing there outlives a command to
    notice, so after a ``kill -9`` of the owner the running command lasts until its timeout and
    background jobs stay (measured on this host; Ctrl-C is fine there too, the loop's end closes
    it).

    Attributes:
        sync (Environment): the wrapped environment; call it only from the worker (that is, through
            this class) while this one is open.
    """

    def __init__(self, env: Environment):
        """Wrap ``env`` (started or not); this object owns it from now on (closing one closes both)."""
        self.sync = env
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._starting: concurrent.futures.Future[None] | None = None
        self._closing: asyncio.Future[None] | None = None
        _OPEN.add(self)

    @property
    def config(self) -> Any:
        """The sync environment's validated config (an ``EnvironmentConfig``)."""
        return self.sync.config

    @property
    def info(self) -> dict[str, Any]:
        """The runner's ready frame (``pid``, ``run_id``, ``cwd``, ...); empty before the start."""
        return self.sync.info

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (or the loop's end closed it)."""
        return self._closing is not None

    async def __aenter__(self) -> AsyncEnvironment:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    # -- the contract ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the sandbox and its runner now (``execute`` does it on first use).

        A cancelled start raises ``CancelledError`` at once; the start goes on in the worker
        (it cannot be cut short), and ``close()`` waits for it before it removes the sandbox.

        Raises:
            SandboxStartError: the sandbox or runner did not come up within ``start_timeout``.
            SandboxError: the environment was closed.
        """
        future = self._submit(self.sync.start)
        self._starting = future
        try:
            await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise
        self._started = True

    async def execute(self, action: dict[str, Any] | str, cwd: str = "", *, timeout: float | None = None,
                      **options: Any) -> dict[str, Any]:
        """Run one command in a fresh ``bash -c`` inside the sandbox (``Environment.execute``).

        Args:
            action: ``{"command": str}``; other keys are ignored. A plain string is accepted too.
            cwd: working directory inside the sandbox; empty: ``config.cwd``, else the sandbox default.
            timeout: seconds; None: ``config.timeout``.
            **options: the sync ``execute``'s other keyword options, passed on as they are
                (``stdin``, ``env``, ``user``, ``separate_stderr``).

        Returns:
            dict: the sync result dict (``output``, ``returncode``, ``exception_info``, ``extra``).

        Raises:
            Submitted: the output's first non-empty line is the sentinel and returncode is 0.
            SandboxDied: the sandbox died or vanished (the environment is closed then).
            SandboxStartError: the sandbox could not be started.
            ConfigError: an option the backend cannot honour.
            asyncio.CancelledError: the awaiting task was cancelled: the command's tree was killed
                (the sync side returned the cancelled record) and the sandbox stays usable.
        """
        if not self._started:
            await self.start()
        return await self._command(functools.partial(self.sync.execute, action, cwd, timeout=timeout, **options))

    async def stream(self, action: dict[str, Any] | str, cwd: str = "", *, timeout: float | None = None,
                     **options: Any) -> AsyncIterator[StreamEvent]:
        """Run one command and yield its output as it is produced (``Environment.stream``).

        Yields ``StreamEvent(text=chunk)`` events, then ``StreamEvent(result=...)`` with the dict
        ``execute`` returns. Leaving the ``async for`` early (``break``, an exception, a cancelled
        task) cancels the command as a cancelled ``execute`` does. After a ``break``, asyncio
        closes the generator in a task of its own soon after; to wait for that, iterate inside
        ``contextlib.aclosing(env.stream(...))``.

        With ``separate_stderr``, each event's ``stream`` says which result key its text belongs to.

        Args:
            action, cwd, timeout, **options: as for ``execute``.

        Raises:
            Submitted, SandboxDied, SandboxStartError, ConfigError, asyncio.CancelledError: as
                ``execute`` (``Submitted`` instead of the last event).
        """
        if not self._started:
            await self.start()
        loop = self._bind()
        pump = _Pump(functools.partial(self.sync.stream, action, cwd, timeout=timeout, **options), loop)
        job = _Job(pump.run)
        future = self._submit(job)
        finished = False  # the sync stream ended: nothing to cancel
        try:
            while not finished:
                event, error = await pump.get()
                finished = event is None or event.done
                if error is not None:
                    raise error
                if event is not None:
                    yield event
        finally:
            if not finished:
                pump.stop()
                await self._stop_command(job, future)

    async def upload(self, src: str | os.PathLike[str], dst: str) -> None:
        """Copy the host file or directory ``src`` to ``dst`` inside the sandbox (``Environment.upload``).

        A cancelled copy raises ``CancelledError`` at once; the copy itself finishes in the worker.

        Raises:
            FileNotFoundError, ValueError, SandboxError: as the sync ``upload``.
        """
        await self._call(functools.partial(self.sync.upload, src, dst))

    async def download(self, src: str, dst: str | os.PathLike[str]) -> None:
        """Copy ``src`` inside the sandbox to the host path ``dst`` (``Environment.download``).

        A cancelled copy raises ``CancelledError`` at once; the copy itself finishes in the worker.

        Raises:
            FileNotFoundError, ValueError, DownloadTooLarge, SandboxError: as the sync ``download``.
        """
        await self._call(functools.partial(self.sync.download, src, dst))

    async def snapshot(self) -> Snapshot:
        """Capture the sandbox's filesystem state (``Environment.snapshot``). Its ``fork(n)`` and
        ``environment()`` are sync (they start sandboxes): call them through ``afork``.

        A cancelled wait raises ``CancelledError`` at once; the snapshot is still taken in the
        worker (and removed when garbage-collected).

        Raises:
            ConfigError, SnapshotError: as the sync ``snapshot``.
        """
        return await self._call(self.sync.snapshot)

    async def reset(self, snap: Snapshot) -> None:
        """Bring the sandbox back to ``snap`` in place, proven (``Environment.reset``).

        Raises:
            ValueError, ConfigError, SnapshotError, ResetFailed: as the sync ``reset`` (the
                sandbox is closed on ``ResetFailed``).
        """
        await self._call(functools.partial(self.sync.reset, snap))

    async def set_network(self, policy: NetworkPolicy | None) -> None:
        """Change the allow-list for the next phase (``Environment.set_network``: the proxy starts
        anew with ``policy``; None refuses everything).

        Raises:
            ConfigError: the sandbox was made without ``network: allowlist``.
        """
        await self._call(functools.partial(self.sync.set_network, policy))

    def network_decisions(self) -> list[dict[str, Any]]:
        """The allow-list proxy's decisions so far (``Environment.network_decisions``; reads a log
        file, no round trip to the sandbox)."""
        return self.sync.network_decisions()

    async def close(self) -> None:
        """End every process started in the sandbox and remove it; then the worker thread ends. Idempotent.

        Never waits for a running command: the sync ``close()`` runs in a thread of its own and
        interrupts it (the awaited ``execute`` then returns the "closed during the command"
        result or raises ``SandboxDied``). A start still under way is waited for first. A
        cancelled ``close()`` goes on to the end in its thread. Later calls wait for the first
        one to end and raise nothing.
        """
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_now())
            await asyncio.shield(self._closing)
        else:
            await asyncio.wait([self._closing])

    # -- the bridge ------------------------------------------------------------------------------
    async def _close_now(self) -> None:
        """The close itself: carried to its end even when cancelled (the loop's end cancels every
        task), then the cancellation is raised again."""
        _OPEN.discard(self)
        cancelled = False
        if self._starting is not None:
            cancelled = await _to_the_end(asyncio.wrap_future(self._starting))
        closing = _in_new_thread(self.sync.close, f"{WORKER_NAME}-close")
        cancelled = await _to_the_end(closing) or cancelled
        if self._executor is not None:
            self._executor.shutdown(wait=False)  # what is queued still runs: it finds the sandbox closed
        if cancelled:
            raise asyncio.CancelledError
        closing.result()

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, recorded as this environment's (its end closes it, see the class)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            if loop not in _CLOSERS:
                _CLOSERS[loop] = loop.create_task(_close_at_loop_end(loop), name=f"{WORKER_NAME}-closer")
        return loop

    def _submit(self, func: Callable[[], T]) -> concurrent.futures.Future[T]:
        """``func()`` queued in this environment's worker thread (made on first use)."""
        if self._closing is not None:
            raise SandboxError(CLOSED_MESSAGE)
        self._bind()
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=WORKER_NAME)
        return self._executor.submit(func)

    async def _call(self, func: Callable[[], T]) -> T:
        """``func()`` in the worker; a cancelled wait drops it if it has not started."""
        future = self._submit(func)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    async def _command(self, func: Callable[[], T]) -> T:
        """``func()`` (one command) in the worker; cancelling the wait cancels the command."""
        job = _Job(func)
        future = self._submit(job)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            await self._stop_command(job, future)
            raise

    async def _stop_command(self, job: _Job[Any], future: concurrent.futures.Future[Any]) -> None:
        """Cancel ``job``'s command and wait (at most ``CANCELLED_CALL_WAIT_S``, through further
        cancellations) for the worker to finish it; its result or error is dropped."""
        if future.cancel() or future.done():
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCELLED_CALL_WAIT_S
        waiter = asyncio.wrap_future(future)
        waiter.add_done_callback(_retrieve)  # its result or error is nobody's: the caller was cancelled
        while not waiter.done() and loop.time() < deadline:
            job.cancel_command(self.sync)  # again after CANCEL_RETRY_S: one that came first was a no-op
            try:
                await asyncio.wait([waiter], timeout=min(CANCEL_RETRY_S, max(0.0, deadline - loop.time())))
            except asyncio.CancelledError:
                continue  # cancelled again: the caller re-raises once the command is over


class _Job(Generic[T]):
    """One call of the sync environment in the worker, which knows whether it is running (so a
    cancel never reaches the command of the call queued after it)."""

    def __init__(self, func: Callable[[], T]):
        self._func = func
        self._running = False
        self._lock = threading.Lock()

    def __call__(self) -> T:
        with self._lock:
            self._running = True
        try:
            return self._func()
        finally:
            with self._lock:
                self._running = False

    def cancel_command(self, env: Environment) -> None:
        """``env.cancel()`` if this call is running (thread-safe; from the loop)."""
        with self._lock:
            if self._running:
                env.cancel()


class _Pump:
    """One ``stream()``: the worker iterates the sync generator and hands each event to the loop
    (``call_soon_threadsafe`` into an ``asyncio.Queue``; the runner bounds chunk rate and size)."""

    def __init__(self, open_stream: Callable[[], Iterator[StreamEvent]], loop: asyncio.AbstractEventLoop):
        self._open = open_stream
        self._loop = loop
        self._queue: asyncio.Queue[tuple[StreamEvent | None, BaseException | None]] = asyncio.Queue()
        self._stopped = threading.Event()

    def run(self) -> None:
        """In the worker: the whole sync stream, opened, iterated and closed in this one thread
        (it holds the environment's lock while open). Closing it early cancels the command."""
        try:
            events = self._open()
            try:
                for event in events:
                    if not self._post(event, None) or self._stopped.is_set():
                        break
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, raised there
            self._post(None, exc)
        else:
            self._post(None, None)

    async def get(self) -> tuple[StreamEvent | None, BaseException | None]:
        """In the loop: the next ``(event, None)``, ``(None, error)``, or ``(None, None)`` at the end."""
        return await self._queue.get()

    def stop(self) -> None:
        """In the loop: the consumer left; the worker closes the sync stream at its next event."""
        self._stopped.set()

    def _post(self, event: StreamEvent | None, error: BaseException | None) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (event, error))
        except RuntimeError:  # the loop is closed: nobody reads any more
            self._stopped.set()
            return False
        return True


async def _to_the_end(future: asyncio.Future[Any]) -> bool:
    """Wait until ``future`` is done, through cancellations of the waiting task; whether there was
    one (for the caller to raise). Its exception, if any, is left to whoever reads it."""
    future.add_done_callback(_retrieve)
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Done callback: mark an unwanted future's exception as retrieved (no "never retrieved" log)."""
    if not future.cancelled():
        future.exception()


async def afork(snap: Snapshot, n: int) -> list[AsyncEnvironment]:
    """``snap.fork(n)`` from asyncio: the ``n`` started sandboxes, each wrapped (``AsyncEnvironment``).

    The forks start in a thread of their own (concurrently, as the sync ``fork``); a cancelled wait
    raises ``CancelledError`` at once and the forks made meanwhile are closed.

    Raises:
        ValueError, SnapshotError: as ``Snapshot.fork``.
    """
    future = _in_new_thread(functools.partial(snap.fork, n), f"{WORKER_NAME}-fork")
    try:
        forks = await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_forks)
        raise
    return [AsyncEnvironment(env) for env in forks]


def _close_forks(done: asyncio.Future[list[Environment]]) -> None:
    """A cancelled ``afork``'s forks, once made: closed (from the loop; ``close`` does not wait long)."""
    if not done.cancelled() and done.exception() is None:
        for env in done.result():
            env.close()


def _in_new_thread(func: Callable[[], T], name: str, *, daemon: bool = False) -> asyncio.Future[T]:
    """``func()`` in a new thread of its own; awaitable from the running loop. Not a daemon by
    default: the interpreter's exit waits for it (a close under way is finished)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(func())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=daemon).start()
    return asyncio.wrap_future(future)


async def _close_at_loop_end(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until cancelled (the loop's end: ``asyncio.run`` cancels every task left), then close
    the environments still open whose loop this is."""
    try:
        await loop.create_future()
    finally:
        _CLOSERS.pop(loop, None)
        left = [env for env in list(_OPEN) if env._loop is loop]
        await asyncio.gather(*(env.close() for env in left), return_exceptions=True)
