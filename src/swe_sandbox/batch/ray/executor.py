"""The driver side of ``--ray``: one Ray task per unit of work, results as they finish.

``RayExecutor`` connects to a cluster (or starts a local Ray for the run) and is an ``Executor``
as the thread pool is (``swe_sandbox.batch.executors``): ``submit`` returns a
``concurrent.futures.Future`` for the unit's result, ``shutdown`` ends it. Each unit is one Ray task asking for one unit of the custom
resource ``swe_sandbox`` (no CPU), so no node runs more sandboxes than it offers, with Ray's own
retries off (``max_retries=0``): an infrastructure failure (the worker or its node lost, a result
lost with its node) resolves the future with the unit's ``lost`` result, which the driver records
as an attempt (with its node) and submits again, up to ``--max-attempts``. A ``pump`` thread
waits on the tasks with ``ray.wait`` and resolves each future as its task ends; in between it
reads the running tasks' reports from the ``BatchControl`` actor (progress, node, cost so far),
keeps the driver's ``CostBudget`` up to date, and tells the actor to stop the tasks when the
driver's ``Cancellation`` is cancelled (Ctrl-C) or the budget is exhausted.

Imported only when asked for: it imports Ray.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import ray

from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.ray.settings import (
    CONNECT_CHECK_S,
    CURRENT_CLUSTER_FILE,
    LOCAL,
    NO_SLOTS,
    RESOURCE,
    STOP_BUDGET,
    STOP_CANCEL,
    RayOptions,
)
from swe_sandbox.batch.ray.worker import BatchControl, execute
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.work import Progress, Results, WorkUnit
from swe_sandbox.errors import BackendUnavailable, ConfigError


def connect(options: RayOptions) -> bool:
    """Connect this process to Ray (unless it already is: a trainer's own session is used as it
    is); returns whether it connected here (then ``shutdown`` disconnects, and stops a local Ray).

    Raises:
        BackendUnavailable: no cluster answers at the address, or no node offers the
            ``swe_sandbox`` resource.
        ConfigError: the address is not ``auto``, ``local`` or ``host:port``.
    """
    here = not ray.is_initialized()
    if here and options.address == LOCAL:
        ray.init(address=LOCAL, num_cpus=1, resources={RESOURCE: options.local_slots}, include_dashboard=False,
                 object_store_memory=options.object_store_mib * 2**20, log_to_driver=False,
                 configure_logging=False)
    elif here:
        address = reachable(cluster_address(options.address))
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError) as exc:
            raise BackendUnavailable(f"Ray: cannot join the cluster at {address}: {_first_line(exc)}") from None
    if not ray.cluster_resources().get(RESOURCE):
        if here:
            ray.shutdown()
        raise BackendUnavailable(NO_SLOTS.format(resource=RESOURCE))
    return here


def cluster_address(address: str) -> str:
    """``host:port`` of the cluster ``address`` names (``auto``: ``RAY_ADDRESS``, else the one
    ``ray start --head`` started here, ``CURRENT_CLUSTER_FILE``).

    Raises:
        ConfigError: not ``auto`` nor ``host:port`` (``ray://`` needs Ray Client, not used here).
        BackendUnavailable: ``auto`` and no cluster is known on this machine.
    """
    if address == "auto":
        known = os.environ.get("RAY_ADDRESS", "").strip()
        if not known and os.path.isfile(CURRENT_CLUSTER_FILE):
            known = Path(CURRENT_CLUSTER_FILE).read_text().strip()
        if not known or known == "auto":
            raise BackendUnavailable("Ray: --ray auto found no running cluster here (no RAY_ADDRESS, no "
                                     f"{CURRENT_CLUSTER_FILE}): start one with ray start --head, or give its address")
        address = known
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in address:
        raise ConfigError(f"--ray: {address!r} is not a cluster address: auto, or host:port of the head node "
                          "(its GCS, 6379 by default)")
    return address


def reachable(address: str) -> str:
    """``address`` once its port accepts a connection within ``CONNECT_CHECK_S`` seconds.

    Raises:
        BackendUnavailable: nothing answers there (``ray.init`` would retry for minutes).
    """
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_CHECK_S).close()
    except OSError as exc:
        raise BackendUnavailable(f"Ray: no cluster answers at {address} ({exc}); is its head node started?") from None
    return address


class RayExecutor:
    """Runs units of work as Ray tasks (see the module docstring).

    Args:
        options: how to reach Ray.
        budget: the batch's cost limit (running tasks' costs are tracked in it, finished ones added).
        cancel: when cancelled, running tasks are told to stop.
        progress: receives ``(instance_id, node=..., phase=..., ...)`` from the running tasks.
    """

    def __init__(self, options: RayOptions, budget: CostBudget, cancel: Cancellation, progress: Progress) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.options, self.budget, self.cancel, self.progress = options, budget, cancel, progress
        self.connected_here = connect(options)
        self.run_id = uuid.uuid4().hex[:12]
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        # an ActorHandle[BatchControl]; Any: ray's stubs type its methods as the plain methods (no .remote)
        self.control: Any = ray.remote(BatchControl).options(num_cpus=0, scheduling_strategy=here).remote()
        self._tasks: dict[int, Any] = {}  # the remote function, by the slots a unit takes
        self._lock = threading.Lock()
        self._running: dict[ray.ObjectRef, tuple[WorkUnit, Results]] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._active: set[str] = set()
        self._stopped = ""
        self._closed = threading.Event()
        self._slots, self._slots_at = 0, 0.0
        self._pump = threading.Thread(target=self._pump_loop, name="swe-sandbox-ray", daemon=True)
        self._pump.start()

    def slots(self) -> int:
        """Calls to keep submitted: the slots the alive nodes offer now (read at most every
        ``slots_refresh_s``), plus ``queued_per_slot`` waiting for each."""
        if time.monotonic() - self._slots_at >= self.options.slots_refresh_s:
            self._slots = int(ray.cluster_resources().get(RESOURCE, 0))
            self._slots_at = time.monotonic()
        return self._slots * (1 + self.options.queued_per_slot)

    def submit(self, unit: WorkUnit) -> list[cf.Future[RolloutResult]]:
        """Start ``unit`` as one Ray task asking for ``unit.weight`` slots; one future per result
        (resolved when the task returns; lost: ``unit.lost_all(...)``)."""
        results = Results(unit)
        ref = self._task(unit.weight).remote(unit, self.control, self.run_id, self.options.heartbeat_s)
        with self._lock:
            self._running[ref] = (unit, results)
            self._active.add(unit.key)
        return results.futures()

    def _task(self, slots: int) -> Any:
        if slots not in self._tasks:
            self._tasks[slots] = ray.remote(execute).options(num_cpus=0, resources={RESOURCE: slots}, max_retries=0)
        return self._tasks[slots]

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the pump (after the running tasks when ``wait``), then disconnect from Ray
        (a local Ray started for the run is stopped; its tasks' workers end with it)."""
        if wait:
            with self._lock:
                futures = [f for _, results in self._running.values() for f in results.futures()]
            cf.wait(futures)
        self._closed.set()
        self._pump.join(timeout=10)
        with self._lock:
            refs = list(self._running)
        for ref in refs:
            ray.cancel(ref, force=True)
        ray.kill(self.control)
        if self.connected_here:
            ray.shutdown()

    # -- the pump thread ------------------------------------------------------------------------
    def _pump_loop(self) -> None:
        synced = 0.0
        while not self._closed.is_set():
            with self._lock:
                refs = list(self._running)
            if refs:
                ready, _ = ray.wait(refs, num_returns=1, timeout=self.options.poll_s)
                if ready:  # and every other one that is ready too
                    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                for ref in ready:
                    self._resolve(ref)
            else:
                self._closed.wait(self.options.poll_s)
            if time.monotonic() - synced >= self.options.poll_s:
                self._sync()
                synced = time.monotonic()

    def _resolve(self, ref: ray.ObjectRef) -> None:
        with self._lock:
            unit, results = self._running.pop(ref)
            self._active.discard(unit.key)
        try:
            found: list[RolloutResult] = ray.get(ref)
        except ray.exceptions.RayError as exc:
            found = unit.lost_all(type(exc).__name__, _first_line(exc), self._last.get(unit.key, {}))
        self._last.pop(unit.key, None)
        self.budget.finish(unit.key, sum(result.cost for result in found))
        for result in found:
            results.settle(result)
        results.fail(RuntimeError(f"the Ray task of {unit.key} gave no result for some of {unit.labels()}"))

    def _sync(self) -> None:
        """Take the running tasks' news into progress and the budget; tell them to stop if needed."""
        try:
            news = ray.get(self.control.drain.remote(), timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            return
        with self._lock:
            news = {i: fields for i, fields in news.items() if i in self._active}  # late news of a finished one
        for instance_id, fields in news.items():
            first = instance_id not in self._last
            self._last.setdefault(instance_id, {}).update(fields)
            if first:
                def cost_so_far(last: dict[str, Any] = self._last[instance_id]) -> float:
                    return float(last.get("cost", 0.0))

                self.budget.track(instance_id, cost_so_far)
            self.progress(instance_id, **fields)
        why = STOP_CANCEL if self.cancel.cancelled else STOP_BUDGET if self.budget.exhausted() else ""
        if why and why != self._stopped:
            self._stopped = why
            self.control.stop.remote(why)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__
