"""Controls shared by the rollouts of one batch: cancellation (Ctrl-C) and the total cost limit.

Both are thread-safe and passed to ``rollout`` by the driver; a trainer calling ``rollout``
directly may pass its own or none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Cancellation:
    """Set once (Ctrl-C): rollouts stop at their next step and their sandboxes are closed at once.

    A rollout registers each sandbox it runs with ``closing``; ``cancel`` closes them all, which
    ends a running command immediately (``Environment.close`` from another thread).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._closers: dict[int, Callable[[], Any]] = {}

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Mark cancelled and close every registered sandbox (idempotent)."""
        self._event.set()
        with self._lock:
            closers, self._closers = list(self._closers.values()), {}
        for close in closers:
            try:
                close()
            except Exception:  # noqa: BLE001 - best effort: the rollout closes it again
                pass

    @contextmanager
    def closing(self, environment: Any) -> Iterator[Any]:
        """Register ``environment`` to be closed by ``cancel`` while the block runs.

        Raises:
            KeyboardInterrupt: already cancelled (nothing is started after Ctrl-C).
        """
        with self.calling(environment.close):
            yield environment

    @contextmanager
    def calling(self, callback: Callable[[], Any]) -> Iterator[None]:
        """Register ``callback`` (e.g. a model's ``interrupt``) to be called by ``cancel`` while
        the block runs.

        Raises:
            KeyboardInterrupt: already cancelled.
        """
        key = id(callback)
        with self._lock:
            if self.cancelled:
                raise KeyboardInterrupt("batch cancelled")
            self._closers[key] = callback
        try:
            yield
        finally:
            with self._lock:
                self._closers.pop(key, None)


class CostBudget:
    """The batch's total cost limit, in USD: finished attempts plus running ones.

    Args:
        limit: USD; 0: no limit.
    """

    def __init__(self, limit: float = 0.0) -> None:
        self.limit = float(limit)
        self._lock = threading.Lock()
        self._finished = 0.0
        self._running: dict[str, Callable[[], float]] = {}

    def track(self, key: str, cost: Callable[[], float]) -> None:
        """Count ``cost()`` (a running agent's cost so far) until ``finish(key, ...)``."""
        with self._lock:
            self._running[key] = cost

    def finish(self, key: str, cost: float) -> None:
        """Stop tracking ``key`` and add its final ``cost``."""
        with self._lock:
            self._running.pop(key, None)
            self._finished += float(cost)

    def total(self) -> float:
        """USD spent so far, running attempts included."""
        with self._lock:
            running = list(self._running.values())
            finished = self._finished
        return finished + sum(_safe(cost) for cost in running)

    def exhausted(self) -> bool:
        return self.limit > 0 and self.total() >= self.limit


def _safe(cost: Callable[[], float]) -> float:
    try:
        return float(cost() or 0.0)
    except Exception:  # noqa: BLE001 - a model that cannot say: count nothing
        return 0.0
