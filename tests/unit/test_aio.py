"""The asyncio bridge (``swe_sandbox.aio``) itself, on the ``local`` backend (no engine): its
arguments, its threads, the order of calls, cancellation of queued and running calls, ``close``
during a command, and what the event loop's end closes. The contract on every backend is the
kit's ``test_async``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
import time
from pathlib import Path

import pytest

import swe_sandbox
from swe_sandbox import aio
from swe_sandbox.errors import ConfigError, SandboxDied, SandboxError, Submitted
from swe_sandbox.testing.kit import host_pid_gone, host_processes_with, still_there, unique_marker, wait_host_gone


def run(coro):
    return asyncio.run(coro)


async def local(**fields) -> aio.AsyncEnvironment:
    return await aio.get_environment("local", timeout=30, **fields)


async def until_host_sees(marker: str) -> None:
    deadline = time.monotonic() + 10
    while not host_processes_with(marker):
        assert time.monotonic() < deadline, f"nothing with {marker} started"
        await asyncio.sleep(0.02)


def test_get_environment_takes_the_sync_arguments():
    sync = inspect.signature(swe_sandbox.get_environment).parameters
    ours = inspect.signature(aio.get_environment).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [(p.name, p.kind, p.default) for p in sync.values()]

    async def scenario():
        env = await aio.get_environment({"backend": "local"}, ["environment.timeout=7"], cwd="/")
        assert (env.config.timeout, env.config.cwd, env.info) == (7, "/", {})
        await env.close()
        with pytest.raises(ConfigError, match="no_such_field"):
            await aio.get_environment("local", no_such_field=1)

    run(scenario())


def test_every_call_of_an_environment_runs_in_its_own_worker_thread():
    """One thread per environment, none of them the loop's; the sync env's calls stay in order."""
    loop_thread = threading.get_ident()

    async def scenario():
        envs = [await local(), await local()]
        results = await asyncio.gather(*(env.execute("echo $BASHPID") for env in envs))
        workers = [t for t in threading.enumerate() if t.name.startswith(aio.WORKER_NAME + "_")]
        seq = await asyncio.gather(*(envs[0].execute(f"echo {i}") for i in range(20)))
        for env in envs:
            await env.close()
        return results, workers, seq

    results, workers, seq = run(scenario())
    assert all(r["returncode"] == 0 for r in results)
    assert len(workers) >= 2 and loop_thread not in {t.ident for t in workers}
    assert [r["output"] for r in seq] == [f"{i}\n" for i in range(20)]


def test_a_big_result_is_parsed_off_the_loop():
    """A 10 MiB result (the default cap) is read and checked in the worker: a 10 ms ticker stays on time."""

    async def scenario():
        env = await local()
        await env.start()
        stop, lateness = asyncio.Event(), list[float]()

        async def tick():
            loop = asyncio.get_running_loop()
            while not stop.is_set():
                before = loop.time()
                await asyncio.sleep(0.01)
                lateness.append(loop.time() - before - 0.01)

        ticker = asyncio.create_task(tick())
        result = await env.execute("head -c 10485760 /dev/zero | tr '\\0' x")
        stop.set()
        await ticker
        await env.close()
        return result, max(lateness)

    result, lag = run(scenario())
    assert len(result["output"]) == 10 << 20 and result["extra"]["truncated"] is False
    assert lag < 0.1, f"the loop waited {lag * 1000:.0f} ms"


def test_results_errors_and_files_are_the_sync_ones(tmp_path: Path):
    (tmp_path / "in.txt").write_bytes(b"bytes \xff\n")

    async def scenario():
        async with await local(cwd=str(tmp_path)) as env:
            await env.upload(tmp_path / "in.txt", "copy/in.txt")
            await env.download("copy", tmp_path / "back")
            with pytest.raises(Submitted) as submitted:
                await env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; printf done"})
            with pytest.raises(FileNotFoundError):
                await env.upload(tmp_path / "missing", "x")
            failed = await env.execute("exit 5", timeout=5)
        return submitted.value, failed

    submitted, failed = run(scenario())
    assert (tmp_path / "back" / "in.txt").read_bytes() == b"bytes \xff\n"
    assert submitted.submission == "done"
    assert failed["returncode"] == 5 and set(failed["extra"]) >= {"timed_out", "duration_s"}


def test_a_queued_call_cancelled_never_runs(tmp_path: Path):
    """Cancelling a call still queued behind another drops it: its command never runs."""
    flag = tmp_path / "ran"

    async def scenario():
        async with await local() as env:
            first = asyncio.create_task(env.execute("sleep 0.5; echo first"))
            second = asyncio.create_task(env.execute(f"touch {flag}"))
            await asyncio.sleep(0.1)
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            return await first

    assert run(scenario())["output"] == "first\n"
    assert not flag.exists()


def test_a_cancel_never_reaches_the_next_command():
    """Cancelling one task's command leaves the command queued after it (another task's) alone."""
    marker = unique_marker()

    async def scenario():
        async with await local() as env:
            await env.start()
            victim = asyncio.create_task(env.execute(f"sleep {marker}"))
            after = asyncio.create_task(env.execute("sleep 0.3; echo next"))
            await until_host_sees(marker)
            victim.cancel()
            with pytest.raises(asyncio.CancelledError):
                await victim
            return await after

    result = run(scenario())
    assert (result["output"], result["returncode"]) == ("next\n", 0)
    assert wait_host_gone(marker) == []


def test_close_does_not_wait_for_the_running_command():
    """``close()`` during ``sleep 60`` returns at once and interrupts it; later calls raise."""
    marker = unique_marker()

    async def scenario():
        env = await local()
        await env.start()
        running = asyncio.create_task(env.execute(f"sleep {marker}", timeout=60))
        await until_host_sees(marker)
        before = time.monotonic()
        await env.close()
        took = time.monotonic() - before
        outcome = (await asyncio.gather(running, return_exceptions=True))[0]
        with pytest.raises(SandboxError, match="closed"):
            await env.execute("true")
        await env.close()  # idempotent
        return took, outcome, env

    took, outcome, env = run(scenario())
    assert took < 2, f"close took {took:.2f} s"
    assert isinstance(outcome, SandboxDied) or outcome["returncode"] == -1, outcome
    assert env.closed and wait_host_gone(marker) == []


def test_the_loops_end_closes_what_was_left_open():
    """An environment nobody closed is closed when ``asyncio.run`` ends (its closer task), runner included."""
    marker = unique_marker()

    async def scenario():
        env = await local()
        await env.execute(f"sleep {marker} &")
        return env

    env = run(scenario())
    assert env.closed
    assert wait_host_gone(marker) == [], "the background job outlived the loop"
    assert still_there(lambda: [] if host_pid_gone(env.info["pid"]) else [env.info["pid"]], 2) == []


def test_close_waits_for_a_start_under_way():
    """A ``close()`` while the start is still running (a cancelled ``start()``) removes the sandbox after it."""

    async def scenario():
        env = await local()
        starting = asyncio.create_task(env.start())
        await asyncio.sleep(0)  # queued in the worker
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await env.close()
        return env

    env = run(scenario())
    pid = env.info.get("pid")
    assert pid is None or still_there(lambda: [] if host_pid_gone(pid) else [pid], 2) == []
    with pytest.raises(SandboxError):
        env.sync.execute("true")


def test_stream_in_aclosing_has_killed_the_command_when_the_block_ends():
    marker = unique_marker()

    async def scenario():
        async with await local() as env:
            async with contextlib.aclosing(env.stream(f"echo start; sleep {marker}")) as events:
                async for event in events:
                    if event.text:
                        break
            left = host_processes_with(marker)
            full = [event async for event in env.stream("echo a; echo b >&2")]
            with pytest.raises(Submitted):
                async for _ in env.stream("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"):
                    pass
            return left, full

    left, full = run(scenario())
    assert wait_host_gone(marker, grace=0.5) == [], left
    assert full[-1].done and full[-1].result["output"] == "a\nb\n" == "".join(e.text for e in full)
    assert all(not e.done for e in full[:-1])


def test_the_worker_thread_ends_after_close():
    async def scenario():
        env = await local()
        await env.execute("true")
        await env.close()

    before = {t for t in threading.enumerate() if t.name.startswith(aio.WORKER_NAME)}
    run(scenario())
    assert still_there(lambda: [t for t in threading.enumerate() if t.name.startswith(aio.WORKER_NAME)
                                and t not in before], 2) == []


class RefusingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A default executor that fails the test if anything is submitted to it."""

    def submit(self, *args, **kwargs):
        raise AssertionError("the bridge used asyncio's default executor")


def test_no_default_executor_is_used():
    """The bridge never uses asyncio's default executor (its 6 threads here would serialise sandboxes)."""

    async def scenario():
        asyncio.get_running_loop().set_default_executor(RefusingExecutor(1))
        async with await local() as env:
            results = await asyncio.gather(*(env.execute("echo x") for _ in range(3)))
        return results

    assert [r["output"] for r in run(scenario())] == ["x\n"] * 3


def test_the_sync_options_pass_through():
    """``stdin``, ``env``, ``separate_stderr`` (the sync keyword options) reach the sync calls as they are."""

    async def scenario():
        async with await local() as env:
            fed = await env.execute("cat; echo $X", stdin="in\n", env={"X": "x"})
            events = [e async for e in env.stream("echo out; echo err >&2", separate_stderr=True)]
            return fed, events

    fed, events = run(scenario())
    assert fed["output"] == "in\nx\n"
    texts = {name: "".join(e.text for e in events if e.stream == name) for name in ("output", "stderr")}
    assert texts == {"output": "out\n", "stderr": "err\n"}
    assert (events[-1].result["output"], events[-1].result["stderr"]) == ("out\n", "err\n")
