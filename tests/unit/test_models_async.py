"""``LitellmModel.aquery``: ``query`` through ``litellm.acompletion`` (real litellm, the scripted
server on loopback), with the same reply, errors and retry policy; its retry waits leave the loop free."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from swe_sandbox.errors import FormatError, ModelError
from swe_sandbox.models.litellm_model import LitellmModel
from swe_sandbox.models.retry import INTERRUPTED_MESSAGE, Interruption

from helpers.litellm_models import TASK, litellm_imported, make_model  # noqa: F401 - the fixture is autouse
from helpers.loop_lag import LoopLag
from helpers.openai_server import ScriptedOpenAIServer, error, rate_limited, text, tool_call


def without_times(message: dict) -> dict:
    return {**message, "extra": {k: v for k, v in message["extra"].items() if k not in ("timestamp", "response_id")}}


def test_aquery_gives_what_query_gives():
    with ScriptedOpenAIServer([tool_call("ls", id="c1"), tool_call("ls", id="c1")], require_tools=True) as server:
        model = make_model(server)
        sync = model.query(TASK)
        awaited = asyncio.run(model.aquery(TASK))
    assert without_times(awaited) == without_times(sync)
    assert awaited["extra"]["actions"] == [{"command": "ls", "tool_call_id": "c1"}]
    assert model.n_calls == 2 and server.requests[0] == server.requests[1]


def test_aquery_raises_the_same_format_error():
    with ScriptedOpenAIServer([text("no tool"), text("no tool")]) as server:
        model = make_model(server)
        with pytest.raises(FormatError) as sync:
            model.query(TASK)
        with pytest.raises(FormatError) as awaited:
            asyncio.run(model.aquery(TASK))
    assert [m["role"] for m in awaited.value.messages] == [m["role"] for m in sync.value.messages]
    assert awaited.value.messages[-1]["content"] == sync.value.messages[-1]["content"]


def test_aquery_retries_a_rate_limit_and_gives_up_on_a_bad_request():
    with ScriptedOpenAIServer([rate_limited(retry_after=0.3), tool_call("ls"), error(400, "bad")]) as server:
        model = make_model(server)
        start = time.monotonic()
        assert asyncio.run(model.aquery(TASK))["extra"]["actions"][0]["command"] == "ls"
        waited = time.monotonic() - start
        with pytest.raises(ModelError, match="not retried") as info:
            asyncio.run(model.aquery(TASK))
    assert waited >= 0.3 and not info.value.gave_up
    assert [r.status for r in server.log] == [429, 200, 400]


def test_a_retry_wait_leaves_the_loop_free_and_interrupt_ends_it():
    """While aquery sits out a Retry-After, a ticker on the same loop keeps its pace; ``interrupt``
    from another thread ends the wait at once, as for ``query``."""

    async def main(model: LitellmModel) -> tuple[float, float]:
        async with LoopLag() as lag:
            threading.Timer(0.6, model.interrupt).start()
            start = time.monotonic()
            with pytest.raises(ModelError, match=INTERRUPTED_MESSAGE):
                await model.aquery(TASK)
            elapsed = time.monotonic() - start
        late = lag.worst
        return elapsed, late

    with ScriptedOpenAIServer([rate_limited(retry_after=30)]) as server:
        elapsed, late = asyncio.run(main(make_model(server, max_total_s=60)))
    assert 0.5 < elapsed < 3, elapsed
    assert late < 0.1, late
    assert len(server.requests) == 1


def test_cancelling_aquery_abandons_it():
    async def main(model: LitellmModel) -> None:
        task = asyncio.create_task(model.aquery(TASK))
        await asyncio.sleep(0.3)  # inside its Retry-After wait (nothing to poll there)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with ScriptedOpenAIServer([rate_limited(retry_after=30)]) as server:
        start = time.monotonic()
        asyncio.run(main(make_model(server, max_total_s=60)))
    assert time.monotonic() - start < 2


def test_interruption_wakes_waits_on_every_loop():
    interruption = Interruption()
    results: list[bool] = []

    def wait_on_own_loop() -> None:
        results.append(asyncio.run(interruption.wait_async(30)))

    threads = [threading.Thread(target=wait_on_own_loop) for _ in range(3)]
    for thread in threads:
        thread.start()
    assert not asyncio.run(interruption.wait_async(0.05))  # not set: the sleep runs its course
    interruption.set()
    for thread in threads:
        thread.join(5)
    assert results == [True, True, True]
    assert interruption.wait(0) and asyncio.run(interruption.wait_async(30))
