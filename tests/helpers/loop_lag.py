"""How late an asyncio loop runs a ticker: the tests' measure of "never blocks the event loop"."""

from __future__ import annotations

import asyncio
import contextlib
import time


class LoopLag:
    """``async with LoopLag() as lag: ...``; afterwards ``lag.worst`` is the longest a ticker
    sleeping ``period`` seconds on the same loop waited past its time (seconds)."""

    def __init__(self, period: float = 0.02):
        self.period = period
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.period)
            self.worst = max(self.worst, time.monotonic() - before - self.period)

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
