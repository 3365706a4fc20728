"""Where units of work run: ``Executor``, the interface the driver submits them to, and its two kinds.

``concurrent.futures.Executor``'s shape, narrowed to units (``swe_sandbox.batch.work``): ``submit``
returns a future of the unit's ``RolloutResult``, ``shutdown`` ends the executor, and ``slots`` says
how many units to keep submitted. ``ThreadExecutor`` runs them in this process's threads;
``RayExecutor`` (``swe_sandbox.batch.ray.executor``, imported only when asked for: it imports Ray)
as one Ray task each, on the node Ray places it on.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from pathlib import Path
from typing import Protocol

from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.options import RunOptions
from swe_sandbox.batch.ray.settings import ray_options
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.work import Progress, Results, WorkContext, WorkUnit


class Executor(Protocol):
    """Runs units of work; the driver's only view of threads and Ray."""

    def slots(self) -> int:
        """Units to keep submitted now."""
        ...

    def submit(self, unit: WorkUnit) -> list[cf.Future[RolloutResult]]:
        """Start ``unit``; one future per result it gives (``unit.labels()``, in that order), each
        resolved as that result is final (never an exception for the instance's failure)."""
        ...

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """End the executor, after the running units when ``wait``; ``cancel_futures``: drop queued ones."""
        ...


class ThreadExecutor:
    """Units in this process's threads, ``workers`` at once, all with one ``WorkContext``."""

    def __init__(self, workers: int, context: WorkContext) -> None:
        self.workers, self.context = workers, context
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swe-sandbox-work")

    def slots(self) -> int:
        return self.workers

    def submit(self, unit: WorkUnit) -> list[cf.Future[RolloutResult]]:
        futures = Results(unit)
        self._pool.submit(futures.run, unit, dataclasses.replace(self.context, emit=futures.settle))
        return futures.futures()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def make_executor(options: RunOptions, output_dir: Path, cancel: Cancellation, budget: CostBudget,
                  progress: Progress) -> Executor:
    """The executor ``options.executor`` names, its units' trajectories saved under ``output_dir``
    (on Ray: shipped back in the results, the driver writes them).

    Raises:
        ConfigError: ``ray`` and Ray is not installed.
        BackendUnavailable: ``ray`` and no cluster answers, or none offers the ``swe_sandbox`` resource.
    """
    ray = ray_options(options.executor, options.ray_address, options.workers)
    if ray is None:
        return ThreadExecutor(options.workers, WorkContext(cancel, budget, progress, output_dir))
    from swe_sandbox.batch.ray.executor import RayExecutor  # imports Ray

    return RayExecutor(ray, budget, cancel, progress)
