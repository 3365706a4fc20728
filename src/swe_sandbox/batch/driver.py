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

    def commit(self, result: RolloutResult) -> WorkUnit | None:
        """Write ``result``; returns the instance's next unit, or None (done, out of attempts, or
        an interrupted unit: not an attempt)."""
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
    running: dict[cf.Future[RolloutResult], WorkUnit] = {}
    wait = True
    try:
        with cancel.calling(stop_pulls):  # a caller's cancel stops the image pulls under way too
            _loop(plan, executor, cancel, budget, queue, running)
    except KeyboardInterrupt:
        try:
            cancel.cancel()  # running units stop at once; their sandboxes are closed
            stop_pulls()  # (unregistered by now)
            for future in cf.as_completed(running, timeout=CANCEL_GRACE_S):
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


def _loop(plan: Plan, executor: Executor, cancel: Cancellation, budget: CostBudget, queue: deque[WorkUnit],
          running: dict[cf.Future[RolloutResult], WorkUnit]) -> None:
    while queue or running:
        while queue and len(running) < executor.slots() and not cancel.cancelled and not budget.exhausted():
            start = queue.popleft()
            running[executor.submit(start)] = start
        if not running:
            return
        finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
        for future in finished:
            del running[future]
            again = plan.commit(future.result())
            if again is not None and not cancel.cancelled:
                queue.append(again)
