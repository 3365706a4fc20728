"""``arollout``: ``rollout`` awaited, its model calls through ``litellm.acompletion`` on the caller's
loop (real litellm against the scripted OpenAI-compatible server on loopback), the sandbox work in a
thread per rollout; many at once on one loop, cancellation that closes the sandbox at once."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from typing import Any

import pytest
from batch_fixtures import FIX, SUBMIT, calc_repo, calc_task, run_config, wait_for, write_tasks  # noqa: F401 - fixture

from swe_sandbox.agent.config import load_run_config
from swe_sandbox.batch import Cancellation, arollout, load_tasks, rollout
from swe_sandbox.models.litellm_model import _litellm

from helpers.loop_lag import LoopLag
from helpers.openai_server import ScriptedOpenAIServer, SilentProvider, tool_call
from helpers.variants import require_backend

litellm = _litellm()  # LITELLM_LOCAL_MODEL_COST_MAP set first: no fetch at import
API_KEY = "sk-test-arollout-0123456789abcdef"
SLOW_SUBMIT = "sleep 1 && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo done"
LONG = "sleep 30.4817"  # a command no other process runs (looked for with pgrep after the cancel)


@pytest.fixture(scope="module", autouse=True)
def litellm_imported() -> None:
    """Import litellm (seconds) before any test measures time."""
    _litellm()


def litellm_config(url: str) -> dict[str, Any]:
    config = load_run_config()
    config["model"] = {"model_name": "openai/scripted", "cost_tracking": "ignore_errors",
                       "model_kwargs": {"api_base": f"{url}/v1", "api_key": API_KEY}}
    return config


class CallSpy:
    """Records where litellm's entry points run, then calls the real ones (nothing replaced)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.async_calls: list[tuple[int, asyncio.AbstractEventLoop]] = []
        self.sync_calls = 0
        real_async, real_sync = litellm.acompletion, litellm.completion

        async def acompletion(**kwargs: Any) -> Any:
            self.async_calls.append((threading.get_ident(), asyncio.get_running_loop()))
            return await real_async(**kwargs)

        def completion(**kwargs: Any) -> Any:
            self.sync_calls += 1
            return real_sync(**kwargs)

        monkeypatch.setattr(litellm, "acompletion", acompletion)
        monkeypatch.setattr(litellm, "completion", completion)


def one_task(tmp_path, calc_repo, name: str = "a"):
    return load_tasks(write_tasks(tmp_path / f"{name}.jsonl", [calc_task(name, calc_repo)]))[0]


@pytest.mark.bwrap
def test_arollout_gives_what_rollout_gives_through_acompletion_on_the_callers_loop(calc_repo, tmp_path, monkeypatch):
    require_backend("bwrap")
    task = one_task(tmp_path, calc_repo)
    spy = CallSpy(monkeypatch)
    script = [tool_call(FIX), tool_call(SUBMIT)]
    with ScriptedOpenAIServer(script + script, require_tools=True) as server:
        config = litellm_config(server.url)
        sync = rollout(task, config, {"backend": "bwrap"})
        assert spy.sync_calls == 2 and not spy.async_calls

        async def main() -> tuple[Any, int, asyncio.AbstractEventLoop]:
            return await arollout(task, config, {"backend": "bwrap"}), threading.get_ident(), asyncio.get_running_loop()

        awaited, loop_thread, loop = asyncio.run(main())
        statuses = [r.status for r in server.log]
    assert (awaited.exit_status, awaited.done, awaited.steps, awaited.api_calls) == ("Submitted", True, 2, 2)
    assert (awaited.exit_status, awaited.submission, awaited.resolved) == (sync.exit_status, sync.submission, True)
    assert awaited.submission.startswith("diff --git a/calc.py")
    assert spy.sync_calls == 2 and spy.async_calls == [(loop_thread, loop)] * 2
    assert statuses == [200] * 4
    assert API_KEY not in str(awaited.messages)


@pytest.mark.local
def test_a_model_without_aquery_runs_in_the_rollouts_thread(calc_repo, tmp_path):
    task = one_task(tmp_path, calc_repo)
    config = run_config([FIX, SUBMIT])
    result = asyncio.run(arollout(task, config, {"backend": "local"}, evaluate=False))
    assert (result.exit_status, result.steps) == ("Submitted", 2)
    assert result.submission == rollout(task, config, {"backend": "local"}, evaluate=False).submission


@pytest.mark.local
def test_a_cancelled_batch_cancels_its_arollouts(calc_repo, tmp_path):
    cancel = Cancellation()
    cancel.cancel()
    result = asyncio.run(arollout(one_task(tmp_path, calc_repo), run_config([FIX, SUBMIT]), {"backend": "local"},
                                  cancel=cancel))
    assert (result.exit_status, result.done) == ("KeyboardInterrupt", False)


@pytest.mark.local
def test_a_batch_cancelled_while_its_arollout_runs_stops_it(calc_repo, tmp_path):
    """The batch's ``Cancellation`` (Ctrl-C) reaches the rollout's own: the command is ended, the
    result says interrupted (a value, as ``rollout`` gives; the awaiting task was not cancelled)."""
    cancel = Cancellation()

    def progress(instance_id: str, **fields: Any) -> None:
        if fields.get("command") == LONG:
            threading.Thread(target=lambda: wait_for(lambda: still_running(LONG), 30) and cancel.cancel()).start()

    start = time.monotonic()
    result = asyncio.run(arollout(one_task(tmp_path, calc_repo), run_config([LONG]), {"backend": "local"},
                                  cancel=cancel, progress=progress))
    assert (result.exit_status, result.done) == ("KeyboardInterrupt", False)
    assert time.monotonic() - start < 10 and not still_running(LONG)


@pytest.mark.bwrap
def test_eight_arollouts_run_at_once_and_the_loop_stays_free(calc_repo, tmp_path, monkeypatch):
    require_backend("bwrap")
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"c{n}", calc_repo) for n in range(8)]))
    spy = CallSpy(monkeypatch)

    async def main(config: dict[str, Any]) -> tuple[float, float, list[Any]]:
        start = time.monotonic()
        # the first call of litellm in a process builds its types on the loop (~0.3 s, once): not ticked
        first = await arollout(tasks[0], config, {"backend": "bwrap"}, evaluate=False)
        one = time.monotonic() - start
        async with LoopLag() as lag:
            start = time.monotonic()
            results = await asyncio.gather(*(arollout(t, config, {"backend": "bwrap"}, evaluate=False)
                                             for t in tasks))
            eight = time.monotonic() - start
        late = lag.worst
        print(f"one arollout {one:.2f} s, eight at once {eight:.2f} s, ticker at most {late * 1000:.0f} ms late")
        return one, eight, late, [first, *results]

    with ScriptedOpenAIServer([tool_call(SLOW_SUBMIT) for _ in range(9)], require_tools=True) as server:
        one, eight, late, results = asyncio.run(main(litellm_config(server.url)))
        assert len(server.log) == 9
    assert [r.exit_status for r in results] == ["Submitted"] * 9
    assert eight < 3 * one, (one, eight)
    assert late < 0.1, late
    assert len(spy.async_calls) == 9 and len({loop for _, loop in spy.async_calls}) == 1 and not spy.sync_calls


def still_running(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


async def cancelled_after(awaitable: Any, ready: threading.Event) -> float:
    """Start ``awaitable``, cancel it once ``ready`` is set; the seconds until CancelledError."""
    task = asyncio.ensure_future(awaitable)
    while not ready.is_set():
        assert not task.done(), task.result()
        await asyncio.sleep(0.02)
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return time.monotonic() - start


@pytest.mark.bwrap
def test_cancelling_an_arollout_closes_its_sandbox_at_once(calc_repo, tmp_path):
    require_backend("bwrap")
    running = threading.Event()

    def progress(instance_id: str, **fields: Any) -> None:
        if fields.get("command") == LONG:  # reported just before it runs: cancel once it does
            threading.Thread(target=lambda: wait_for(lambda: still_running(LONG), 30) and running.set()).start()

    with ScriptedOpenAIServer([tool_call(LONG)], require_tools=True) as server:
        task = one_task(tmp_path, calc_repo)
        elapsed = asyncio.run(cancelled_after(arollout(task, litellm_config(server.url), {"backend": "bwrap"},
                                                       progress=progress), running))
    print(f"cancelled in {elapsed:.2f} s")
    assert elapsed < 1.5, elapsed
    assert not still_running(LONG)


@pytest.mark.bwrap
def test_cancelling_an_arollout_cancels_its_model_call_in_flight(calc_repo, tmp_path):
    """A provider that never answers: the cancel does not wait for the request (a batch's Ctrl-C
    waits ``CANCEL_GRACE_S`` for it), the call is cancelled on the loop."""
    require_backend("bwrap")
    silent = SilentProvider()
    asked = threading.Event()
    try:
        threading.Thread(target=lambda: asked.set() if silent.asked.wait(60) else None, daemon=True).start()
        task = one_task(tmp_path, calc_repo)
        elapsed = asyncio.run(cancelled_after(arollout(task, litellm_config(f"http://127.0.0.1:{silent.port}"),
                                                       {"backend": "bwrap"}), asked))
    finally:
        silent.close()
    print(f"cancelled in {elapsed:.2f} s")
    assert elapsed < 1.5, elapsed
