"""The driver loop: a run's units of work on an executor, each result committed as it comes.

One loop for every run (``run_batch``, ``run_eval``) and every executor (threads, Ray). A ``Plan``
says what to run and writes what finished (the driver alone writes the output directory); the
loop keeps ``executor.slots()`` units submitted while the run is neither cancelled nor out of
budget, and hands each finished result to ``plan.commit``, which may ask for one more unit of the
same instance (an infrastructure failure runs again).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import deque
from typing import Protocol

from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.executors import Executor
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.work import WorkUnit
from swe_sandbox.environments.container.pulling import stop_all as stop_pulls
from swe_sandbox.errors import BatchAborted

#: Seconds the first Ctrl-C waits for running units to stop after their sandboxes were closed
#: and their models interrupted; one still busy then (a provider request in flight, bounded only
#: by its own timeout) is abandoned: nothing is recorded for it and it runs again on resume.
CANCEL_GRACE_S = 15.0


class Plan(Protocol):
    """What a run does: its units, and how a finished one is written."""

    def pending(self) -> list[WorkUnit]:
        """The units to run at the start."""
        ...

    def commit(self, result: RolloutResult) -> list[WorkUnit]:
        """Write ``result``; returns the instance's next units, if any (none: done, out of
        attempts, an interrupted unit, or other results of the instance still to come)."""
        ...


def drive(plan: Plan, executor: Executor, cancel: Cancellation, budget: CostBudget) -> None:
    """Run ``plan`` on ``executor`` to the end; shuts the executor down.

    Raises:
        KeyboardInterrupt: the first Ctrl-C: running units were cancelled (sandboxes closed, image
            pulls stopped) and awaited, finished ones committed.
        BatchAborted: a second Ctrl-C while that happened, or units still busy after
            ``CANCEL_GRACE_S``: nothing more is awaited (the caller should exit at once, e.g.
            ``os._exit``; sandboxes end with the process).
        Exception: what ``plan.commit`` raised to stop the run (e.g. ``BackendUnavailable``): the
            units under way were cancelled first.
    """
    queue = deque(plan.pending())
    running = Running()
    wait = True
    try:
        with cancel.calling(stop_pulls):  # a caller's cancel stops the image pulls under way too
            _loop(plan, executor, cancel, budget, queue, running)
    except KeyboardInterrupt:
        try:
            cancel.cancel()  # running units stop at once; their sandboxes are closed
            stop_pulls()  # (unregistered by now)
            for future in cf.as_completed(running.futures, timeout=CANCEL_GRACE_S):
                plan.commit(future.result())
        except KeyboardInterrupt:
            wait = False
            raise BatchAborted("interrupted twice") from None
        except cf.TimeoutError:
            wait = False
            raise BatchAborted(f"rollouts still busy {CANCEL_GRACE_S:g} s after the interrupt") from None
        raise
    except Exception:  # a plan that stops the run (BackendUnavailable): the units under way stop too
        cancel.cancel()
        raise
    finally:
        executor.shutdown(wait=wait, cancel_futures=True)


class Running:
    """The units under way: each result's future, and the slots (``WorkUnit.weight``) in use."""

    def __init__(self) -> None:
        self.futures: dict[cf.Future[RolloutResult], WorkUnit] = {}
        self._open: dict[int, int] = {}
        self.used = 0

    def fits(self, unit: WorkUnit, slots: int) -> bool:
        """Whether ``unit`` fits beside what runs (a unit heavier than every slot runs alone)."""
        return self.used == 0 or self.used + unit.weight <= slots

    def add(self, unit: WorkUnit, futures: list[cf.Future[RolloutResult]]) -> None:
        self.futures.update(dict.fromkeys(futures, unit))
        self._open[id(unit)] = len(futures)
        self.used += unit.weight

    def pop(self, future: cf.Future[RolloutResult]) -> None:
        """Forget ``future``; its unit's slots are free once its last result is in."""
        unit = self.futures.pop(future)
        self._open[id(unit)] -= 1
        if not self._open[id(unit)]:
            del self._open[id(unit)]
            self.used -= unit.weight


def _loop(plan: Plan, executor: Executor, cancel: Cancellation, budget: CostBudget, queue: deque[WorkUnit],
          running: Running) -> None:
    while queue or running.futures:
        while (queue and running.fits(queue[0], executor.slots()) and not cancel.cancelled
               and not budget.exhausted()):
            start = queue.popleft()
            running.add(start, executor.submit(start))
        if not running.futures:
            return
        finished, _ = cf.wait(running.futures, return_when=cf.FIRST_COMPLETED)
        for future in finished:
            running.pop(future)
            again = plan.commit(future.result())
            if not cancel.cancelled:
                queue.extend(again)
