"""A group of K rollouts of one task (RL: GRPO and its kin), prepared once (DESIGN.md §10).

    group = rollout_group(task, 3, run_config, {"backend": "docker"})
    group.rewards                                  # [1.0, 0.0, 1.0]: the GRPO shape
    [r.submission for r in group.results]          # one RolloutResult per sample

The task's sandbox is prepared once (started, workspace copied in, ``setup_command`` run), then
snapshotted (``env.snapshot()``). The samples then get their sandboxes from the snapshot:

- ``fork`` (the default): the prepared sandbox is closed, the first ``workers`` samples' sandboxes
  are forked at once (``snap.fork(n)``), each later one when a sample ends (``snap.environment()``);
  at most ``workers`` samples run at once;
- ``reuse`` (``reuse=True``): the samples run one after another in the prepared sandbox, reset
  to the snapshot before each one but the first (``env.reset(snap)``, which verifies itself). A
  reset that finds drift it cannot revert (``ResetFailed``) closed that sandbox: the sample runs
  in a new one from the snapshot, and its ``group.reset_drift`` says why;
- ``fresh``: a backend that cannot snapshot (it lacks ``capabilities.SNAPSHOT``) gives each sample
  a sandbox of its own, prepared as ``rollout`` prepares one. ``reuse`` where the backend cannot
  reset in place (it lacks ``RESET_IN_PLACE``) forks instead.

Each sample is one ``rollouts.run_in``: its own agent, trajectory, patch, evaluation (in a FRESH
sandbox, as for every rollout) and ``RolloutResult`` (``sample``, ``group``: the group's
preparation time, this sample's fork or reset time). The snapshot is removed at the end, whatever
happens. ``rollout_group`` never raises for an agent, model or sandbox failure: a failed preparation
is every sample's result (a failed ``setup_command`` is done; a sandbox or snapshot that could not
be made is infrastructure, run again).

Seeds: ``rollouts.model_config_for``: ``{sample}`` in the model config's strings
becomes the sample's number and an integer ``model_kwargs.seed`` becomes ``seed + sample``.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from swe_sandbox import capabilities
from swe_sandbox.batch.evaluation import DEFAULT_EVAL_TIMEOUT_S, STRICT
from swe_sandbox.batch.records import sample_label, trajectory_file
from swe_sandbox.batch.rollouts import (
    INTERRUPTED,
    Controls,
    GroupInfo,
    Progress,
    RolloutResult,
    ending_of,
    evaluate_into,
    run_in,
)
from swe_sandbox.batch.sandbox import task_env_config, task_sandbox
from swe_sandbox.config import validate
from swe_sandbox.environments import environment_class
from swe_sandbox.errors import ConfigError, Outcome, ResetFailed, SandboxError

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.control import Cancellation, CostBudget
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.base import Environment
    from swe_sandbox.environments.snapshot import Snapshot

FORK, REUSE, FRESH = "fork", "reuse", "fresh"

#: Called with each sample's result as soon as it is final (from the sample's thread).
OnSample = Callable[[RolloutResult], None]


class GroupResult(BaseModel):
    """What ``rollout_group`` returns: one result per sample asked for, in sample order."""

    instance_id: str
    k: int
    """Samples of the group (0 .. k-1); ``results`` holds those asked for (all, by default)."""
    results: list[RolloutResult]
    mode: str
    """``fork``, ``reuse`` or ``fresh`` (see the module docstring)."""
    prepare_s: float = 0.0
    """Seconds the preparation took (start, workspace, ``setup_command``, snapshot)."""

    @property
    def rewards(self) -> list[float | None]:
        """Each sample's reward (None: not evaluated, or no verdict)."""
        return [r.reward for r in self.results]

    @property
    def resolved(self) -> list[bool | None]:
        return [r.resolved for r in self.results]


def rollout_group(task: Task, k: int, run_config: dict[str, Any], env_config: dict[str, Any],
                  evaluate: bool = True, *, samples: list[int] | None = None, reuse: bool = False,
                  workers: int | None = None, trajectory_dir: str | Path | None = None,
                  cancel: Cancellation | None = None, budget: CostBudget | None = None,
                  progress: Progress | None = None, eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S,
                  grading: str = STRICT, model_wrapper: Callable[[Any], Any] | None = None,
                  on_sample: OnSample | None = None) -> GroupResult:
    """Run ``k`` rollouts of ``task`` from one prepared sandbox (see the module docstring).

    Args:
        task: the task.
        k: samples in the group (>= 1).
        run_config: as for ``rollout`` (each sample's model config: ``model_config_for``).
        env_config: as for ``rollout``.
        evaluate: evaluate each sample's patch, each in a fresh sandbox.
        samples: the sample numbers to run (default all, ``0 .. k-1``; a resumed group: the missing ones).
        reuse: run the samples one after another in the prepared sandbox, reset between them.
        workers: samples at once (fork and fresh modes); default: all of them.
        trajectory_dir: each sample saves its trajectory to ``trajectory_dir/<id>/<sample>/<id>.traj.json``
            (a batch's layout; None: not saved).
        cancel, budget, eval_timeout, grading, model_wrapper: as for ``rollout``.
        progress: as for ``rollout``, keyed ``instance_id/sample`` (``RolloutResult.label``).
        on_sample: called with each sample's result as soon as it is final.

    Returns:
        GroupResult: never raises for an agent, model or sandbox failure.

    Raises:
        ValueError: ``k`` < 1, or a sample number outside ``0 .. k-1`` or given twice.
    """
    wanted = group_samples(k, samples)
    controls = Controls(cancel=cancel, budget=budget, progress=progress, eval_timeout=eval_timeout, grading=grading,
                        model_wrapper=model_wrapper)
    try:
        mode = group_mode(task, env_config, reuse)
    except ConfigError:  # a bad config: the preparation fails with it, every sample's result
        mode = FORK
    group = _Group(task, run_config, env_config, evaluate, controls, mode,
                   Path(trajectory_dir) if trajectory_dir is not None else None, on_sample)
    results = group.run(wanted, max(1, workers or len(wanted)))
    return GroupResult(instance_id=task.instance_id, k=k, results=sorted(results, key=lambda r: r.sample or 0),
                       mode=mode, prepare_s=round(group.prepare_s, 3))


def group_samples(k: int, samples: list[int] | None) -> list[int]:
    """The sample numbers asked for, sorted (default ``0 .. k-1``).

    Raises:
        ValueError: ``k`` < 1, or a sample outside ``0 .. k-1`` or given twice.
    """
    if k < 1:
        raise ValueError(f"k: a group has at least 1 sample, got {k}")
    wanted = list(range(k)) if samples is None else sorted(samples)
    if len(set(wanted)) != len(wanted) or any(not 0 <= s < k for s in wanted):
        raise ValueError(f"samples: {samples!r} are not distinct numbers in 0 .. {k - 1}")
    return wanted


def group_mode(task: Task, env_config: dict[str, Any], reuse: bool) -> str:
    """``fork``, ``reuse`` or ``fresh``: what the backend, with the task's config, can do (``reuse``
    asked for: ``reuse`` where it resets in place, else ``fork``; no snapshot at all: ``fresh``).

    Raises:
        ConfigError: an unknown backend, or an invalid config.
    """
    cls = environment_class(str(env_config.get("backend", "")))
    config = validate(cls.config_class, task_env_config(task, env_config))
    lacking = capabilities.missing_capabilities(cls, config)
    if capabilities.SNAPSHOT in lacking:
        return FRESH
    return REUSE if reuse and capabilities.RESET_IN_PLACE not in lacking else FORK


@contextlib.contextmanager
def _owned(environment: Environment) -> Iterator[Environment]:
    """``environment`` for one sample, closed when it ends."""
    try:
        yield environment
    finally:
        environment.close()


@contextlib.contextmanager
def _lent(environment: Environment) -> Iterator[Environment]:
    """``environment`` for one sample, left open (``reuse``: the next sample resets it)."""
    yield environment


class _Group:
    """One ``rollout_group`` call's state: the preparation, the snapshot, the samples' sandboxes."""

    def __init__(self, task: Task, run_config: dict[str, Any], env_config: dict[str, Any], evaluate: bool,
                 controls: Controls, mode: str, trajectory_dir: Path | None, on_sample: OnSample | None) -> None:
        self.task, self.run_config, self.env_config, self.evaluate = task, run_config, env_config, evaluate
        self.controls, self.mode, self.trajectory_dir, self.on_sample = controls, mode, trajectory_dir, on_sample
        self.id = uuid.uuid4().hex[:12]
        self.prepare_s = 0.0
        self.snap: Snapshot | None = None

    @property
    def snapshot(self) -> Snapshot:
        """The group's snapshot (``_prepare`` took it)."""
        assert self.snap is not None, "the group was not prepared"
        return self.snap

    def run(self, wanted: list[int], workers: int) -> list[RolloutResult]:
        if self.mode == FRESH:
            return self._concurrently(wanted, workers, lambda s: self._sample(s, lambda: task_sandbox(
                self.task, self.env_config), 0.0))
        with contextlib.ExitStack() as stack:
            started = time.monotonic()
            for sample in wanted:
                self.controls.report(sample_label(self.task.instance_id, sample), phase="preparing")
            try:
                prepared = self._prepare(stack)
            except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - every sample's result
                self.prepare_s = time.monotonic() - started
                return [self._failed(s, exc) for s in wanted]
            self.prepare_s = time.monotonic() - started
            if self.mode == REUSE:
                return self._reused(wanted, prepared, stack)
            prepared.close()  # the forks do not need it
            return self._forked(wanted, workers)

    def _prepare(self, stack: contextlib.ExitStack) -> Environment:
        """Start and set up the task's sandbox, snapshot it; the snapshot is removed with ``stack``."""
        environment = stack.enter_context(task_sandbox(self.task, self.env_config))
        with self._closing(environment):
            self.snap = environment.snapshot()
        stack.callback(self.snap.remove)
        return environment

    def _closing(self, environment: Environment) -> contextlib.AbstractContextManager[Any]:
        cancel = self.controls.cancel
        return cancel.closing(environment) if cancel is not None else contextlib.nullcontext()

    def _concurrently(self, wanted: list[int], workers: int,
                      one: Callable[[int], RolloutResult]) -> list[RolloutResult]:
        if workers == 1 or len(wanted) == 1:
            return [one(s) for s in wanted]
        with cf.ThreadPoolExecutor(max_workers=min(workers, len(wanted)),
                                   thread_name_prefix=f"group-{self.task.instance_id}") as pool:
            return list(pool.map(one, wanted))

    def _forked(self, wanted: list[int], workers: int) -> list[RolloutResult]:
        first = min(workers, len(wanted))
        started = time.monotonic()
        try:
            forks = deque(self.snapshot.fork(first))
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - every sample's result
            return [self._failed(s, exc) for s in wanted]
        wave_s, lock = time.monotonic() - started, threading.Lock()

        def one(sample: int) -> RolloutResult:
            stop = self._stopping()
            if stop:
                return self._failed(sample, KeyboardInterrupt(stop))
            with lock:
                ready = forks.popleft() if forks else None
            if ready is not None:
                return self._sample(sample, lambda: _owned(ready), wave_s)
            begun = time.monotonic()
            try:
                fresh = self.snapshot.environment()
            except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - this sample's result
                return self._failed(sample, exc)
            return self._sample(sample, lambda: _owned(fresh), time.monotonic() - begun)

        try:
            return self._concurrently(wanted, workers, one)
        finally:
            for left in forks:  # a fork no sample took (a cancel): closed
                left.close()

    def _reused(self, wanted: list[int], environment: Environment,
                stack: contextlib.ExitStack) -> list[RolloutResult]:
        results: list[RolloutResult] = []
        current: Environment | None = environment
        for i, sample in enumerate(wanted):
            stop = self._stopping()
            if stop:
                results.append(self._failed(sample, KeyboardInterrupt(stop)))
                continue
            began, drift = time.monotonic(), list[str]()
            try:
                if i > 0 or current is None:
                    current, drift = self._reset(current, stack)
            except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - no sandbox: this sample's result
                current = None
                results.append(self._failed(sample, exc))
                continue
            results.append(self._sample(sample, functools.partial(_lent, current), time.monotonic() - began, drift))
        return results

    def _stopping(self) -> str:
        """Why a sample not started yet must not start (``""``: it may): the run was cancelled, or
        its cost limit reached (as for single rollouts, no new one starts; it runs on resume)."""
        cancel, budget = self.controls.cancel, self.controls.budget
        if cancel is not None and cancel.cancelled:
            return "not started: the batch was cancelled"
        if budget is not None and budget.exhausted():
            return "not started: the batch's total cost limit was reached"
        return ""

    def _reset(self, environment: Environment | None, stack: contextlib.ExitStack) -> tuple[Environment, list[str]]:
        """``environment`` reset to the snapshot, or (``ResetFailed``, a dead sandbox, none) a new one
        from it, closed with ``stack``; with the drift that made it new.

        Raises:
            SnapshotError, SandboxError: no sandbox could be made from the snapshot.
        """
        if environment is not None:
            try:
                environment.reset(self.snapshot)
                return environment, []
            except ResetFailed as exc:  # the sandbox is closed: never silently reused
                drift = list(exc.drift) or [str(exc)]
            except SandboxError as exc:  # it died under the last sample, or could not be reset
                environment.close()
                drift = [f"{type(exc).__name__}: {exc}"]
        else:
            drift = ["no sandbox left from the previous sample"]
        fresh = self.snapshot.environment()
        stack.callback(fresh.close)
        return fresh, drift

    def _sample(self, sample: int, sandbox: Callable[[], Any], fork_s: float,
                drift: list[str] | None = None) -> RolloutResult:
        path = trajectory_file(self.trajectory_dir, self.task.instance_id, sample) if self.trajectory_dir else None
        result = run_in(self.task, self.run_config, self.env_config, sandbox, self.evaluate, self.controls, path,
                        sample)
        return self._done(result, fork_s, drift or [])

    def _failed(self, sample: int, exc: BaseException) -> RolloutResult:
        """Sample ``sample``'s result when its sandbox could not be had (``exc``), evaluated as a
        rollout whose sandbox failed is (an empty patch)."""
        status: str
        if isinstance(exc, KeyboardInterrupt) or (self.controls.cancel is not None and self.controls.cancel.cancelled):
            status, outcome = INTERRUPTED, Outcome.INTERRUPTED
        else:
            assert isinstance(exc, Exception)
            status, outcome = ending_of(exc, self.env_config)
        error = str(exc) if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        result = RolloutResult(instance_id=self.task.instance_id, exit_status=status, done=outcome.done,
                               outcome=outcome, error=error, sample=sample,
                               backend=str(self.env_config.get("backend", "")), started_at=time.time())
        if self.evaluate and result.done:
            evaluate_into(self.task, result, self.env_config, self.controls)
        return self._done(result, 0.0, [])

    def _done(self, result: RolloutResult, fork_s: float, drift: list[str]) -> RolloutResult:
        result.group = GroupInfo(group=self.id, mode=self.mode, prepare_s=round(self.prepare_s, 3),
                                 fork_s=round(fork_s, 3), reset_drift=drift)
        if self.on_sample is not None:
            self.on_sample(result)
        return result
