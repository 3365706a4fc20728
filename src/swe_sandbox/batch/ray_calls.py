"""A batch's jobs as Ray calls, and the results of calls whose node was lost (``--ray``).

``remote_call`` is what one Ray task of ``BatchRun`` ships to its worker (``swe_sandbox.batch.ray_worker``);
``lost_result`` is what the driver records when that task's worker or node was lost: a rollout
that is not done (it runs again, up to ``max_attempts``), or an evaluation without a verdict (the
agent's result stands, the evaluation runs again). No Ray import: the executor calls these.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypedDict

from swe_sandbox.batch.ray_settings import NODE_LOST, RemoteCall, short_node
from swe_sandbox.batch.rollouts import RolloutResult

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.driver import BatchRun, Job


class _CallFields(TypedDict):
    """The ``RemoteCall`` fields of every kind of call."""

    task: Any
    env_config: dict[str, Any]
    eval_timeout: float
    grading: str


class _LostFields(TypedDict):
    """The ``RolloutResult`` fields of every lost call."""

    instance_id: str
    backend: str
    node: str
    ray_node: str
    error: str
    started_at: float
    duration_s: float
    steps: int
    cost: float


def remote_call(run: BatchRun, job: Job) -> RemoteCall:
    """``job`` of ``run`` as a Ray task ships it: a rollout, or the evaluation of a kept patch."""
    common: _CallFields = {"task": run.tasks[job.instance_id], "env_config": run.env_config, "eval_timeout": run.eval_timeout,
                          "grading": run.grading}
    if not job.evaluate_only:
        return RemoteCall(kind="rollout", run_config=run.run_config, evaluate=run.evaluate,
                          cost_limit=run.budget.limit, **common)
    previous = run.final[job.instance_id]
    return RemoteCall(kind="evaluate_kept", exit_status=previous.exit_status, patch=run.kept_patch(job.instance_id),
                      backend=previous.backend, **common)


def lost_result(run: BatchRun, job: Job, exit_status: str, error: str, where: dict[str, str]) -> RolloutResult:
    """The result of ``job``'s Ray task, lost with its worker or node (``exit_status``: Ray's
    exception, e.g. ``NodeDiedError``; ``where``: what it last reported, if it did: its node, when
    it started, its step and cost so far, which the record keeps)."""
    from swe_sandbox.batch.evaluation import infra_failed

    kind = "evaluation" if job.evaluate_only else "rollout"
    error = NODE_LOST.format(kind=kind, node=short_node(where.get("ray_node", "")) or "?", error=error)
    started = float(where.get("started_at") or 0.0)
    fields: _LostFields = {"instance_id": job.instance_id, "backend": str(run.env_config.get("backend", "")),
              "node": where.get("node", ""), "ray_node": where.get("ray_node", ""), "error": error,
              "started_at": started, "duration_s": round(time.time() - started, 3) if started else 0.0,
              "steps": int(where.get("step") or 0), "cost": float(where.get("cost") or 0.0)}
    if not job.evaluate_only:
        return RolloutResult(exit_status=exit_status, done=False, **fields)
    previous, patch = run.final[job.instance_id], run.kept_patch(job.instance_id)
    return RolloutResult(exit_status=previous.exit_status, done=True, evaluate_only=True, submission=patch,
                         evaluation=infra_failed(run.tasks[job.instance_id], patch, error), **fields)
