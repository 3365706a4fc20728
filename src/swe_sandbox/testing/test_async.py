"""The asyncio API (``swe_sandbox.aio``) on the backend under test: concurrent sandboxes never block
the loop, cancelling an awaited command (or leaving a stream early) kills it and keeps the sandbox
usable, and Ctrl-C of an asyncio script closes every sandbox it opened.

The tests are sync functions driving one ``asyncio.Runner`` per module (no pytest-asyncio); the
``SANDBOXES`` environments are started once per module and shared. The process probes of the kit
take the sync environment (``AsyncEnvironment.sync``), called only while no call of it is awaited.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from swe_sandbox.aio import WORKER_NAME, AsyncEnvironment
from swe_sandbox.capabilities import HOST_VISIBLE_PROCESSES
from swe_sandbox.testing.kit import (
    FIXTURE_TIMEOUT,
    Variant,
    host_pid_gone,
    host_processes_with,
    host_server_pid,
    still_there,
    unique_marker,
    wait_host_gone,
    wait_sandbox_gone,
)

#: Sandboxes started for the module (all run a command at once in the concurrency test).
SANDBOXES = 20
#: Longest wait of a 10 ms ticker on the loop while they run, seconds.
MAX_LOOP_LAG_S = 0.1
#: Longest time from cancelling an awaited command to its ``CancelledError``, seconds.
CANCEL_WITHIN_S = 1.0


class LoopRunner:
    """One event loop for a module's tests: ``run(coro)``; ``close()`` ends it as ``asyncio.run``
    does (every task left cancelled and awaited). ``asyncio.Runner`` where there is one (3.11+)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        left = asyncio.all_tasks(self.loop)
        for task in left:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture(scope="module")
def loop_runner() -> Iterator[Any]:
    """One event loop for the module's tests (``loop_runner.run(coro)``)."""
    runner = asyncio.Runner() if hasattr(asyncio, "Runner") else LoopRunner()
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture(scope="module")
def sandboxes(backend_under_test: Variant, loop_runner: Any) -> Iterator[list[AsyncEnvironment]]:
    """``SANDBOXES`` started AsyncEnvironments of the variant (started at once, not timed), closed after the module."""
    backend_under_test.require_available()
    envs = [AsyncEnvironment(backend_under_test.make(timeout=FIXTURE_TIMEOUT)) for _ in range(SANDBOXES)]
    try:
        loop_runner.run(_each(envs, "start"))
        yield envs
    finally:
        loop_runner.run(_each(envs, "close"))


async def _each(envs: list[AsyncEnvironment], method: str) -> None:
    await asyncio.gather(*(getattr(env, method)() for env in envs))


async def _ticker(stop: asyncio.Event, lateness: list[float]) -> None:
    """Sleep 10 ms in a loop until ``stop``; how late each wake-up was, in seconds."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(0.01)
        lateness.append(loop.time() - before - 0.01)


def _host_visible(variant: Variant) -> bool:
    return HOST_VISIBLE_PROCESSES not in variant.missing()


def assert_nothing_left(env: AsyncEnvironment, marker: str, variant: Variant) -> None:
    """No process with ``marker`` in its command line, seen from the sandbox and (where it can) the host."""
    assert wait_sandbox_gone(env.sync, marker) == [], "left running inside the sandbox"
    if _host_visible(variant):
        assert wait_host_gone(marker) == [], "left running (seen from the host's /proc)"


async def _until_running(marker: str, variant: Variant) -> None:
    """Until a process with ``marker`` runs (seen from the host), else a short fixed wait."""
    if not _host_visible(variant):
        await asyncio.sleep(0.5)  # fixed: the sandbox is busy with the command, nothing else to poll
        return
    deadline = time.monotonic() + 20
    while not host_processes_with(marker):
        assert time.monotonic() < deadline, f"the command with {marker} never started"
        await asyncio.sleep(0.02)


# -- concurrency -------------------------------------------------------------------------------


def test_concurrent_sandboxes_do_not_block_the_loop(sandboxes, loop_runner):
    """``SANDBOXES`` sandboxes each awaiting ``sleep 1`` at once finish together (in under 2 s, or 1 s
    plus one command's own cost per sandbox where each command is an exec: the exec fallback), while a
    ticker on the same loop is never late by more than ``MAX_LOOP_LAG_S``."""

    async def scenario() -> tuple[float, float, float, list[dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        costs = []
        for _ in range(3):
            before = loop.time()
            await sandboxes[0].execute({"command": "true"})
            costs.append(loop.time() - before)
        stop, lateness = asyncio.Event(), list[float]()
        ticker = asyncio.create_task(_ticker(stop, lateness))
        await asyncio.sleep(0.05)
        before = loop.time()
        results = await asyncio.gather(*(env.execute({"command": "sleep 1; echo done"}) for env in sandboxes))
        wall = loop.time() - before
        stop.set()
        await ticker
        return statistics.median(costs), wall, max(lateness), results

    one, wall, lag, results = loop_runner.run(scenario())
    assert [(r["returncode"], r["output"]) for r in results] == [(0, "done\n")] * SANDBOXES
    bound = max(2.0, 1.0 + SANDBOXES * one)
    assert wall < bound, f"{SANDBOXES} concurrent `sleep 1` took {wall:.2f} s (bound {bound:.2f} s, one `true` {one:.3f} s)"
    assert lag < MAX_LOOP_LAG_S, f"the loop was blocked for {lag * 1000:.0f} ms"
    workers = [t for t in threading.enumerate() if t.name.startswith(WORKER_NAME + "_")]
    assert len(workers) >= SANDBOXES, "each environment runs in a worker thread of its own"


def test_results_and_errors_are_the_sync_ones(sandboxes, loop_runner):
    """The awaited result is the sync dict; the sentinel raises the backend's ``Submitted``."""
    env = sandboxes[1]

    async def scenario() -> tuple[dict[str, Any], BaseException | None]:
        result = await env.execute({"command": "printf 'a\\nb'; exit 3"}, "/", timeout=10)
        try:
            await env.execute("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the patch")
        except Exception as exc:  # noqa: BLE001 - checked below
            return result, exc
        return result, None

    result, error = loop_runner.run(scenario())
    assert result["output"] == "a\nb" and result["returncode"] == 3 and result["exception_info"] == ""
    assert result["extra"]["timed_out"] is False
    assert isinstance(error, env.sync.submitted_error) and error.submission == "the patch\n", error


# -- cancellation ------------------------------------------------------------------------------


def test_cancelled_execute_kills_the_command_and_the_sandbox_stays_usable(sandboxes, loop_runner, backend_under_test):
    """Cancelling the task awaiting ``sleep``: ``CancelledError`` in under ``CANCEL_WITHIN_S``, the
    command's tree gone, the next command runs."""
    env, marker = sandboxes[2], unique_marker()

    async def scenario() -> tuple[float, dict[str, Any]]:
        task = asyncio.create_task(env.execute({"command": f"bash -c 'sleep {marker}; true'"}, timeout=60))
        await _until_running(marker, backend_under_test)
        cancelled = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - cancelled, await env.execute({"command": "echo alive"})

    elapsed, after = loop_runner.run(scenario())
    assert elapsed < CANCEL_WITHIN_S, f"CancelledError came {elapsed:.2f} s after cancel()"
    assert (after["output"], after["returncode"]) == ("alive\n", 0)
    assert_nothing_left(env, marker, backend_under_test)


async def _within(seconds: float, awaitable: Any) -> Any:
    """``awaitable`` under ``asyncio.timeout(seconds)`` (3.11+; ``asyncio.wait_for`` before)."""
    if not hasattr(asyncio, "timeout"):
        return await asyncio.wait_for(awaitable, seconds)
    async with asyncio.timeout(seconds):
        return await awaitable


def test_asyncio_timeout_around_execute(sandboxes, loop_runner, backend_under_test):
    """``asyncio.timeout`` sees its own cancellation come back (``TimeoutError``), early or late in the
    command's start; nothing is left and the sandbox is usable."""
    env, marker = sandboxes[3], unique_marker()

    async def scenario() -> dict[str, Any]:
        for delay in (0.0, 0.3):
            with pytest.raises(asyncio.TimeoutError):
                await _within(delay, env.execute({"command": f"sleep {marker}"}, timeout=60))
        return await env.execute({"command": "echo alive"})

    after = loop_runner.run(scenario())
    assert (after["output"], after["returncode"]) == ("alive\n", 0)
    assert_nothing_left(env, marker, backend_under_test)


def test_leaving_a_stream_early_kills_the_command(sandboxes, loop_runner, backend_under_test):
    """``break`` out of ``async for event in env.stream(...)`` after its first output: the command's
    tree is killed (asyncio closes the generator) before the next command, under ``CANCEL_WITHIN_S``."""
    env, marker = sandboxes[4], unique_marker()

    async def scenario() -> tuple[str, float, dict[str, Any]]:
        seen = ""
        async for event in env.stream({"command": f"echo start; sleep {marker}"}, timeout=60):
            seen += event.text
            if "start" in seen:
                break
        left = time.monotonic()
        after = await env.execute({"command": "echo alive"})  # runs once the stream's command is over
        return seen, time.monotonic() - left, after

    seen, elapsed, after = loop_runner.run(scenario())
    assert seen.startswith("start"), seen
    assert elapsed < CANCEL_WITHIN_S + 0.5, f"the next command came {elapsed:.2f} s after leaving the stream"
    assert (after["output"], after["returncode"]) == ("alive\n", 0)
    assert_nothing_left(env, marker, backend_under_test)


def test_cancelled_stream_consumer(sandboxes, loop_runner, backend_under_test):
    """Cancelling the task iterating a stream: ``CancelledError`` in under ``CANCEL_WITHIN_S``, the
    command's tree gone, the next command's full stream arrives."""
    env, marker = sandboxes[5], unique_marker()

    async def consume(started: asyncio.Event) -> None:
        async for event in env.stream({"command": f"echo start; sleep {marker}"}, timeout=60):
            if event.text:
                started.set()

    async def scenario() -> tuple[float, list[Any]]:
        started = asyncio.Event()
        task = asyncio.create_task(consume(started))
        await asyncio.wait_for(started.wait(), 30)
        cancelled = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        elapsed = time.monotonic() - cancelled
        return elapsed, [event async for event in env.stream("echo one; echo two")]

    elapsed, events = loop_runner.run(scenario())
    assert elapsed < CANCEL_WITHIN_S, f"CancelledError came {elapsed:.2f} s after cancel()"
    assert events[-1].done and "".join(e.text for e in events) == events[-1].result["output"] == "one\ntwo\n"
    assert_nothing_left(env, marker, backend_under_test)


# -- Ctrl-C ------------------------------------------------------------------------------------

#: An asyncio script opening 3 sandboxes (one left open, two in ``async with``), each with a
#: background job, then awaiting a long command in each; argv[1]: JSON [config, fields, job marker,
#: [command markers]].
CTRL_C_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from swe_sandbox import aio

    async def main(config, fields, job, markers):
        left_open = await aio.get_environment(config, **fields)  # the loop's end closes it
        async with await aio.get_environment(config, **fields) as one, await aio.get_environment(config, **fields) as two:
            envs = [left_open, one, two]
            await asyncio.gather(*(env.execute(f"sleep {job} >/dev/null 2>&1 &") for env in envs))
            print("ready", flush=True)
            await asyncio.gather(*(env.execute(f"sleep {m}", timeout=120) for env, m in zip(envs, markers)))

    asyncio.run(main(*json.loads(sys.argv[1])))
""")


def test_ctrl_c_of_an_asyncio_script_closes_every_sandbox(backend_under_test):
    """SIGINT (as a terminal's Ctrl-C) to ``asyncio.run(main())`` awaiting commands in 3 sandboxes:
    it exits, and nothing of them remains: commands, background jobs, runners (or exec wrappers),
    containers (the backend's ``gc`` finds none of the script's)."""
    backend_under_test.require_available()
    job, markers = unique_marker(), [unique_marker() for _ in range(3)]
    config, fields = backend_under_test.environment_args(timeout=FIXTURE_TIMEOUT)
    argv = [sys.executable, "-c", CTRL_C_SCRIPT, json.dumps([config, fields, job, markers], default=str)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.communicate(timeout=60)
        visible = _host_visible(backend_under_test)
        servers = [host_server_pid(marker) for marker in markers] if visible else []
        if not visible:
            time.sleep(1.0)  # fixed: the commands run where this host cannot see them
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "KeyboardInterrupt" in stderr or proc.returncode in (-signal.SIGINT, 128 + signal.SIGINT), stderr
    if visible:
        assert wait_host_gone(job, grace=5) == [], "a background job outlived the script"
        for marker in markers:
            assert wait_host_gone(marker, grace=5) == [], "a command outlived the script"
        assert still_there(lambda: [p for p in servers if not host_pid_gone(p)], 5) == [], "a runner outlived it"
    owned = [e for e in backend_under_test.environment_class.gc(dry_run=True) if e.get("owner_pid") == str(proc.pid)]
    assert owned == [], f"sandboxes of the script remain: {owned}"
