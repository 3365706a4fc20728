"""The units of work of a batch or an evaluation run: values that an executor runs with ``run(context)``.

A unit is one attempt of one instance; the thread pool (``swe_sandbox.batch.executors``) and a Ray
worker (``swe_sandbox.batch.ray.worker``) run it alike and get a ``RolloutResult`` back, which the
driver alone commits (``swe_sandbox.batch.driver``):

- ``RolloutWork``: the agent in a fresh sandbox, then (``options.evaluate``) its patch evaluated;
- ``ReevaluationWork``: the patch an earlier, finished attempt left, evaluated again (its
  evaluation had no verdict); no agent runs;
- ``EvaluationWork``: a prediction evaluated (``swe-sandbox eval``).

A unit never raises for the instance's, the agent's or the sandbox's failure: its result says what
happened. ``lost`` is the result of its attempt when the worker running it was lost (Ray),
``not_started`` that of one the run stopped before it began (not an attempt).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.evaluation import evaluate, infra_failed
from swe_sandbox.batch.groups import rollout_group
from swe_sandbox.batch.options import RunOptions
from swe_sandbox.batch.ray.settings import NODE_LOST, short_node
from swe_sandbox.batch.records import sample_label, trajectory_file
from swe_sandbox.batch.rollouts import INTERRUPTED, RolloutResult, evaluate_kept, rollout
from swe_sandbox.batch.tasks import Task
from swe_sandbox.errors import Outcome

#: The exit status of a ``swe-sandbox eval`` attempt (its ``results.jsonl`` lines).
EVALUATED = "Evaluated"

#: ``progress(instance_id, **fields)``: news of a running unit (``phase``, ``step``, ``cost``, ...).
Progress = Callable[..., None]


def trajectory_path(directory: Path, instance_id: str, sample: int | None = None) -> Path:
    """``DIR/<instance_id>/<instance_id>.traj.json`` (a group's sample: ``DIR/<id>/<sample>/<id>.traj.json``)."""
    return trajectory_file(directory, instance_id, sample)


@dataclass(frozen=True)
class WorkContext:
    """What the process running a unit gives it.

    Attributes:
        cancel: stops the unit at its next step and closes its sandboxes at once.
        budget: the run's cost limit as this process sees it.
        progress: receives the unit's news.
        trajectory_dir: where the agent saves its trajectory (``trajectory_path``): the output
            directory, or a Ray worker's scratch directory.
        ship_trajectory: return the trajectory's text in the result (``RolloutResult.trajectory``),
            for a driver on another machine to write.
        emit: see the attribute.
    """

    cancel: Cancellation
    budget: CostBudget
    progress: Progress
    trajectory_dir: Path
    ship_trajectory: bool = False
    emit: Callable[[RolloutResult], None] | None = None
    """Takes each result of a unit with several (a group's samples) as soon as it is final, so the
    driver commits it before the unit ends; None: they come back when the unit returns (Ray)."""


class WorkUnit(BaseModel):
    """One attempt of one instance (see the module docstring); subclasses fill ``run``."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    #: What a lost attempt's message calls the unit.
    noun: ClassVar[str] = "rollout"

    task: Task
    env_config: dict[str, Any]
    """The environment config; the task's image, cwd and workspace are applied on top."""
    options: RunOptions
    sample: int | None = None
    """The group's sample this unit is about (``--rollouts K``); None: the instance's one rollout."""

    @property
    def instance_id(self) -> str:
        return self.task.instance_id

    @property
    def key(self) -> str:
        """What the unit's progress and cost are keyed by while it runs (unique among running units)."""
        return sample_label(self.instance_id, self.sample)

    @property
    def weight(self) -> int:
        """Sandboxes the unit holds at once (slots it takes)."""
        return 1

    def labels(self) -> list[str]:
        """The ``label`` of each result the unit gives (``RolloutResult.label``)."""
        return [self.key]

    def run(self, context: WorkContext) -> RolloutResult:
        """Do the work here; never raises for the instance's failure."""
        raise NotImplementedError

    def run_all(self, context: WorkContext) -> list[RolloutResult]:
        """Every result of the unit (one, but a group's: one per sample); never raises for the instance's failure."""
        return [self.run(context)]

    def lost_all(self, exit_status: str, error: str, where: dict[str, Any]) -> list[RolloutResult]:
        """``lost`` of every result the unit owed."""
        return [self.lost(exit_status, error, where)]

    def not_started_all(self) -> list[RolloutResult]:
        """``not_started`` of every result the unit owed."""
        return [self.not_started()]

    def lost(self, exit_status: str, error: str, where: dict[str, Any]) -> RolloutResult:
        """The result of this attempt, lost with its worker or node.

        Args:
            exit_status: what was lost, e.g. Ray's exception class (``NodeDiedError``).
            error: its first line.
            where: what the attempt last reported, if it did: ``node``, ``ray_node``,
                ``started_at`` (Unix time, s), ``step``, ``cost`` (USD).
        """
        started = float(where.get("started_at") or 0.0)
        message = NODE_LOST.format(kind=self.noun, node=short_node(where.get("ray_node", "")) or "?", error=error)
        return RolloutResult(
            instance_id=self.instance_id, exit_status=exit_status, done=False, outcome=Outcome.INFRASTRUCTURE,
            error=message, sample=self.sample,
            backend=self.backend, node=where.get("node", ""), ray_node=where.get("ray_node", ""),
            started_at=started, duration_s=round(time.time() - started, 3) if started else 0.0,
            steps=int(where.get("step") or 0), cost=float(where.get("cost") or 0.0))

    def not_started(self) -> RolloutResult:
        """The result of a unit the run stopped before it started: not an attempt (it runs on resume)."""
        return RolloutResult(instance_id=self.instance_id, exit_status=INTERRUPTED, done=False,
                             outcome=Outcome.INTERRUPTED, error="not started: the batch was stopping",
                             backend=self.backend, sample=self.sample)

    @property
    def backend(self) -> str:
        return str(self.env_config.get("backend", ""))


class RolloutWork(WorkUnit):
    """The agent on the task, then (``options.evaluate``) its patch evaluated (``rollouts.rollout``)."""

    run_config: dict[str, Any]
    """``{"agent": {...}, "model": {...}}``."""

    def run(self, context: WorkContext) -> RolloutResult:
        path = trajectory_path(context.trajectory_dir, self.instance_id)
        options = self.options
        result = rollout(self.task, self.run_config, self.env_config, options.evaluate, trajectory_path=path,
                         cancel=context.cancel, budget=context.budget, progress=context.progress,
                         eval_timeout=options.eval_timeout, grading=options.grading)
        result.messages = []  # not kept in memory: the trajectory file has them
        if context.ship_trajectory:
            result.trajectory = path.read_text(encoding="utf-8") if path.is_file() else None
        return result


class GroupWork(WorkUnit):
    """Samples of one instance's group (``--rollouts K``), from one preparation
    (``groups.rollout_group``): each sample's result is emitted as soon as it is final."""

    run_config: dict[str, Any]
    samples: tuple[int, ...]
    """The samples to run (a resumed group: the missing ones); all from one preparation."""
    concurrency: int = 1
    """Samples at once (forks); ``options.reuse``: one after another in one sandbox."""

    @property
    def key(self) -> str:
        return f"{self.instance_id}/{','.join(map(str, self.samples))}"

    @property
    def weight(self) -> int:
        return 1 if self.options.reuse else max(1, min(self.concurrency, len(self.samples)))

    def labels(self) -> list[str]:
        return [sample_label(self.instance_id, s) for s in self.samples]

    def run_all(self, context: WorkContext) -> list[RolloutResult]:
        options = self.options

        def finished(result: RolloutResult) -> None:
            result.messages = []  # not kept in memory: the trajectory file has them
            if context.ship_trajectory:
                path = trajectory_path(context.trajectory_dir, self.instance_id, result.sample)
                result.trajectory = path.read_text(encoding="utf-8") if path.is_file() else None
            if context.emit is not None:
                context.emit(result)

        group = rollout_group(self.task, options.rollouts, self.run_config, self.env_config, options.evaluate,
                              samples=list(self.samples), reuse=options.reuse, workers=self.weight,
                              trajectory_dir=context.trajectory_dir, cancel=context.cancel, budget=context.budget,
                              progress=context.progress, eval_timeout=options.eval_timeout, grading=options.grading,
                              on_sample=finished)
        return group.results

    def lost_all(self, exit_status: str, error: str, where: dict[str, Any]) -> list[RolloutResult]:
        return [self._one(s).lost(exit_status, error, where) for s in self.samples]

    def not_started_all(self) -> list[RolloutResult]:
        return [self._one(s).not_started() for s in self.samples]

    def _one(self, sample: int) -> WorkUnit:
        return WorkUnit(task=self.task, env_config=self.env_config, options=self.options, sample=sample)


class ReevaluationWork(WorkUnit):
    """The patch of an earlier, finished attempt evaluated again (``rollouts.evaluate_kept``)."""

    noun: ClassVar[str] = "evaluation"

    exit_status: str
    """The earlier attempt's exit status (it stands)."""
    patch: str
    previous_backend: str = ""
    outcome: Outcome | None = None
    """The earlier attempt's outcome (it stands; None: its record has none)."""

    def run(self, context: WorkContext) -> RolloutResult:
        context.progress(self.key, phase="evaluating")
        result = evaluate_kept(self.task, self.exit_status, self.patch, self.env_config, cancel=context.cancel,
                               eval_timeout=self.options.eval_timeout, backend=self.previous_backend,
                               grading=self.options.grading, outcome=self.outcome)
        result.sample = self.sample
        return result

    def lost(self, exit_status: str, error: str, where: dict[str, Any]) -> RolloutResult:
        """The earlier attempt's outcome stands (done); its evaluation has no verdict (runs again)."""
        lost = super().lost(exit_status, error, where)
        return lost.model_copy(update={"exit_status": self.exit_status, "done": True, "outcome": self.outcome,
                                       "evaluate_only": True,
                                       "submission": self.patch,
                                       "evaluation": infra_failed(self.task, self.patch, lost.error)})


class EvaluationWork(WorkUnit):
    """A prediction's patch evaluated in a fresh sandbox (``swe-sandbox eval``): exit status ``EVALUATED``,
    done once the evaluation has a verdict."""

    noun: ClassVar[str] = "evaluation"

    patch: str | None

    def run(self, context: WorkContext) -> RolloutResult:
        started = time.time()
        try:
            evaluation = evaluate(self.task, self.patch, self.env_config, timeout=self.options.eval_timeout,
                                  cancel=context.cancel, grading_policy=self.options.grading)
        except KeyboardInterrupt:  # the cancel cut it short: not an attempt
            return RolloutResult(instance_id=self.instance_id, exit_status=INTERRUPTED, done=False,
                                 outcome=Outcome.INTERRUPTED, error="interrupted during evaluation",
                                 backend=self.backend, started_at=started)
        return self._result(evaluation, started)

    def lost(self, exit_status: str, error: str, where: dict[str, Any]) -> RolloutResult:
        """An evaluation without a verdict (it runs again)."""
        lost = super().lost(exit_status, error, where)
        evaluation = infra_failed(self.task, self.patch, f"{exit_status}: {error}")
        return self._result(evaluation, lost.started_at or time.time()).model_copy(
            update={"node": lost.node, "ray_node": lost.ray_node})

    def _result(self, evaluation: Any, started: float) -> RolloutResult:
        return RolloutResult(instance_id=self.instance_id, exit_status=EVALUATED, done=not evaluation.infra_failure,
                             outcome=evaluation.outcome, evaluate_only=True, submission=self.patch or "", evaluation=evaluation,
                             error=evaluation.error, backend=self.backend, started_at=started,
                             duration_s=evaluation.duration_s)


class Results:
    """The futures of one unit's results, by label: each settled once (emitted early, or returned)."""

    def __init__(self, unit: WorkUnit) -> None:
        self._lock = threading.Lock()
        self._by_label: dict[str, cf.Future[RolloutResult]] = {label: cf.Future() for label in unit.labels()}

    def futures(self) -> list[cf.Future[RolloutResult]]:
        return list(self._by_label.values())

    def settle(self, result: RolloutResult) -> None:
        """Resolve ``result``'s future (a second result of the same label is ignored)."""
        with self._lock:
            future = self._by_label.get(result.label)
            if future is not None and not future.done():
                future.set_result(result)

    def fail(self, exc: BaseException) -> None:
        """Fail every future still open (a unit that raised: a bug, not an instance's failure)."""
        with self._lock:
            for future in self._by_label.values():
                if not future.done():
                    future.set_exception(exc)

    def run(self, unit: WorkUnit, context: WorkContext) -> None:
        try:
            for result in unit.run_all(context):
                self.settle(result)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the futures
            self.fail(exc)
            return
        self.fail(RuntimeError(f"unit {unit.key} gave no result for some of {unit.labels()}"))
