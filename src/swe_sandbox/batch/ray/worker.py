"""The worker side of the Ray executor: what one Ray task runs, and the batch's control actor.

A Ray task runs one unit of work (``swe_sandbox.batch.work``) on the node Ray placed it on, with
that node's engine, and returns its ``RolloutResult`` as a value; it writes nothing the driver
reads: the trajectory the agent saves goes to a temporary directory on the worker and comes back
as text in the result. While it runs, a ``Heartbeat`` thread reports to the
``BatchControl`` actor every ``heartbeat_s`` (node, phase, step, cost so far, last command) and
applies what the actor answers: ``STOP_CANCEL`` closes the sandbox at once (as Ctrl-C does on one
machine), ``STOP_BUDGET`` makes the agent stop with ``LimitsExceeded`` at its next step.

Imported only by the Ray executor (it imports Ray).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

import ray

from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.ray.settings import GO, LABEL_BATCH_RUN, LABEL_RAY_NODE, STOP_BUDGET, STOP_CANCEL
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.sandbox import IMAGE_BACKENDS
from swe_sandbox.batch.work import WorkContext, WorkUnit

#: Name prefix of a rollout's scratch directory on a worker (its trajectory until it returns),
#: followed by the worker's pid (``sweep_scratch``).
SCRATCH_PREFIX = "swe-sandbox-ray-"


class BatchControl:
    """The batch's control room, one actor on the driver's node: tasks report, the driver reads and decides."""

    def __init__(self) -> None:
        self._stop = GO
        self._news: dict[str, dict[str, Any]] = {}

    def beat(self, instance_id: str, fields: dict[str, Any]) -> str:
        """A running task's news; returns ``GO``, ``STOP_CANCEL`` or ``STOP_BUDGET``."""
        self._news.setdefault(instance_id, {}).update(fields)
        return self._stop

    def drain(self) -> dict[str, dict[str, Any]]:
        """The news since the last call, ``{instance_id: fields}``."""
        news, self._news = self._news, {}
        return news

    def stop(self, why: str) -> None:
        """Tell every running task to stop (``STOP_CANCEL`` wins over ``STOP_BUDGET``)."""
        if self._stop != STOP_CANCEL:
            self._stop = why


class RemoteBudget(CostBudget):
    """The batch's cost limit as a worker sees it: its own rollout's cost (tracked as on one
    machine), exhausted once the driver, which counts the whole batch, says so."""

    def __init__(self, limit: float) -> None:
        super().__init__(limit)
        self.reached = False

    def exhausted(self) -> bool:
        return self.reached


class Heartbeat:
    """Reports one running task to ``control`` every ``interval`` seconds and applies the answer.

    Args:
        control: the ``BatchControl`` actor handle.
        instance_id: the task's instance.
        fields: what every report carries besides the progress (node, host).
        interval: seconds between reports.
        cost_limit: the batch's total, USD (0: none).
    """

    def __init__(self, control: Any, instance_id: str, fields: dict[str, Any], interval: float,
                 cost_limit: float) -> None:
        self.control, self.instance_id, self.interval = control, instance_id, interval
        self.fields = dict(fields)
        self.cancel = Cancellation()
        self.budget = RemoteBudget(cost_limit)
        self.answer = GO
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swe-sandbox-heartbeat", daemon=True)

    def progress(self, instance_id: str, **fields: Any) -> None:
        """The rollout's ``progress`` callback: kept, sent with the next report."""
        self.fields.update(fields)

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self.beat()

    def beat(self) -> None:
        fields = {**self.fields, "cost": self.budget.total()}
        try:
            answer = ray.get(self.control.beat.remote(self.instance_id, fields), timeout=max(10.0, self.interval))
        except (ray.exceptions.RayError, TimeoutError):
            return  # the driver is gone or slow: Ray ends this task with its job, or the next beat gets through
        self.answer = answer
        if answer == STOP_CANCEL:
            self.cancel.cancel()
        elif answer == STOP_BUDGET:
            self.budget.reached = True


class NodeFields(TypedDict):
    """Where a unit runs: fields of its ``RolloutResult``."""

    ray_node: str
    node: str


def node_fields() -> NodeFields:
    """``{"ray_node": <node id>, "node": <host name>}`` of the node this runs on."""
    return {"ray_node": ray.get_runtime_context().get_node_id(), "node": socket.gethostname()}


def labelled(env_config: dict[str, Any], batch_run: str, ray_node: str) -> dict[str, Any]:
    """``env_config`` with the run's and the node's labels on every container (docker/podman)."""
    if env_config.get("backend") not in IMAGE_BACKENDS:
        return env_config
    labels = {**(env_config.get("labels") or {}), LABEL_BATCH_RUN: batch_run, LABEL_RAY_NODE: ray_node}
    return {**env_config, "labels": labels}


def execute(unit: WorkUnit, control: Any, batch_run: str, heartbeat_s: float) -> list[RolloutResult]:
    """Run ``unit`` here (the body of every Ray task of a run); returns its results as a value
    (one, or a group's samples: ``unit.run_all``).

    Args:
        unit: the work.
        control: the run's ``BatchControl`` actor handle.
        batch_run: the run's id, a label on the containers the unit creates (``LABEL_BATCH_RUN``).
        heartbeat_s: seconds between reports to ``control``.
    """
    where = node_fields()
    unit = unit.model_copy(update={"env_config": labelled(unit.env_config, batch_run, where["ray_node"])})
    reported = {**where, "started_at": time.time()}  # a lost task's record still says when it started
    with Heartbeat(control, unit.key, reported, heartbeat_s, unit.options.cost_limit) as beat:
        if beat.answer != GO:  # queued before the stop: it does not start
            return [result.model_copy(update=where) for result in unit.not_started_all()]
        sweep_scratch()
        with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
            context = WorkContext(beat.cancel, beat.budget, beat.progress, Path(scratch), ship_trajectory=True)
            results = unit.run_all(context)
    return [result.model_copy(update=where) for result in results]


def sweep_scratch(root: str | None = None) -> None:
    """Remove the scratch directories (``SCRATCH_PREFIX<pid>-...``) of worker processes that are
    gone: a task killed with its worker or node (a lost node, a SIGKILLed driver) leaves its own
    behind, with the conversation in it."""
    for path in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)
