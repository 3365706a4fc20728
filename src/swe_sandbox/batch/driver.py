"""``run_batch``: many rollouts on a thread pool or on Ray; the driver alone writes the output directory.

Rollouts run in worker threads (or, ``executor="ray"``, as Ray tasks: ``swe_sandbox.batch.ray_executor``)
and return values; this thread commits each finished attempt
(trajectory already saved by the agent, then ``preds.json``, evaluation files, then the
``results.jsonl`` line: see ``swe_sandbox.batch.records`` for why this order is crash-safe).
Rerunning the same call resumes: done instances are skipped, others run again up to
``max_attempts`` attempts in all.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from swe_sandbox.batch import records as rec
from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.evaluation import DEFAULT_EVAL_TIMEOUT_S, STRICT
from swe_sandbox.batch.rollouts import INTERRUPTED, RolloutResult, rollout
from swe_sandbox.environments.container.pulling import stop_all as stop_pulls
from swe_sandbox.errors import BatchAborted

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.progress import BatchProgress
    from swe_sandbox.batch.ray_settings import RayOptions
    from swe_sandbox.batch.tasks import Task

DEFAULT_MAX_ATTEMPTS = 3
#: Seconds the first Ctrl-C waits for running rollouts to stop after their sandboxes were closed
#: and their models interrupted; one still busy then (a provider request in flight, bounded only
#: by its own timeout) is abandoned: nothing is recorded for it and it runs again on resume.
CANCEL_GRACE_S = 15.0


class Job(NamedTuple):
    """One unit of work of the pool: a rollout, or (``evaluate_only``) an evaluation of the patch
    an earlier attempt left, whose evaluation failed for an infrastructure reason."""

    instance_id: str
    evaluate_only: bool


def instance_dir(output_dir: Path, instance_id: str) -> Path:
    return output_dir / instance_id


def trajectory_path(output_dir: Path, instance_id: str) -> Path:
    """``DIR/<instance_id>/<instance_id>.traj.json``."""
    return instance_dir(output_dir, instance_id) / f"{instance_id}{rec.TRAJECTORY_SUFFIX}"


class BatchRun:
    """One run of ``run_batch`` over an output directory (see ``run_batch`` for the arguments)."""

    def __init__(self, tasks: list[Task], output_dir: Path, run_config: dict[str, Any],
                 env_config: dict[str, Any], *, workers: int, evaluate: bool, max_attempts: int,
                 redo_existing: bool, budget: CostBudget, cancel: Cancellation,
                 progress: BatchProgress, eval_timeout: float, ray: RayOptions | None = None,
                 grading: str = STRICT):
        self.ray = ray
        self.tasks = {t.instance_id: t for t in tasks}
        self.dir, self.run_config, self.env_config = output_dir, run_config, env_config
        self.workers, self.evaluate, self.max_attempts = workers, evaluate, max_attempts
        self.budget, self.cancel, self.progress, self.eval_timeout = budget, cancel, progress, eval_timeout
        self.grading = grading
        self.results = rec.ResultsLog(output_dir / rec.RESULTS_FILE)
        existing = self.results.read()
        generation = rec.redo_generation(existing, self.tasks, max_attempts) if redo_existing else 0
        self.state = rec.ResumeState(existing, generation)
        self.preds = rec.PredsFile(output_dir / rec.PREDS_FILE)
        self.preds.keep_only({r.instance_id for r in existing if r.done}
                             | {i for i in self.tasks if self.state.exhausted(i, max_attempts)})
        self.final = dict(rec.ResumeState(existing).final)

    def next_job(self, instance_id: str) -> Job | None:
        """What ``instance_id`` needs now: a rollout, an evaluation of its kept patch, or nothing."""
        if self.state.should_run(instance_id, self.max_attempts):
            return Job(instance_id, evaluate_only=False)
        if self.evaluate and self.state.should_evaluate(instance_id, self.max_attempts):
            return Job(instance_id, evaluate_only=True)
        return None

    def pending(self) -> list[Job]:
        return [job for job in map(self.next_job, self.tasks) if job is not None]

    def run(self) -> None:
        """Run every pending instance; commit each attempt as it finishes.

        Raises:
            KeyboardInterrupt: the first Ctrl-C: running rollouts were cancelled (sandboxes closed)
                and awaited, finished attempts written.
            BatchAborted: a second Ctrl-C while that happened, or rollouts still busy after
                ``CANCEL_GRACE_S``: nothing more is awaited (the caller should exit at once, e.g.
                ``os._exit``; sandboxes end with the process).
        """
        queue = deque(self.pending())
        pool = self._executor()
        self.progress.started(total=len(self.tasks), pending=len(queue), finished=list(self.final.values()))
        running: dict[cf.Future, Job] = {}
        wait = True
        try:
            with self.cancel.calling(stop_pulls):  # a caller's cancel stops the image pulls under way too
                self._loop(pool, queue, running)
        except KeyboardInterrupt:
            try:
                self.cancel.cancel()  # running rollouts stop at once; their sandboxes are closed
                stop_pulls()  # (unregistered by now)
                for future in cf.as_completed(running, timeout=CANCEL_GRACE_S):
                    self._commit(future.result())
            except KeyboardInterrupt:
                wait = False
                raise BatchAborted("interrupted twice") from None
            except cf.TimeoutError:
                wait = False
                raise BatchAborted(f"rollouts still busy {CANCEL_GRACE_S:g} s after the interrupt") from None
            raise
        finally:
            pool.shutdown(wait=wait, cancel_futures=True)
            self.progress.stopped()

    def _loop(self, pool: cf.ThreadPoolExecutor, queue: deque, running: dict[cf.Future, Job]) -> None:
        while queue or running:
            while queue and len(running) < self._slots(pool) and self._may_start():
                job = queue.popleft()
                running[self._start(pool, job)] = job
            if not running:
                return
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                instance_id = running.pop(future).instance_id
                job = self.next_job(instance_id) if self._commit(future.result()) else None
                if job is not None and not self.cancel.cancelled:
                    queue.append(job)

    def _executor(self) -> Any:
        """The thread pool, or (``ray``) a ``RayExecutor``: both ``submit`` and ``shutdown``."""
        if self.ray is None:
            return cf.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="swe-sandbox-rollout")
        from swe_sandbox.batch.ray_executor import RayExecutor

        return RayExecutor(self.ray, self.budget, self.cancel, self.progress)

    def _slots(self, pool: Any) -> int:
        """Rollouts at once: ``workers``, or on Ray the slots the cluster offers now."""
        return self.workers if self.ray is None else pool.slots()

    def _start(self, pool: Any, job: Job) -> cf.Future:
        if self.ray is not None:
            from swe_sandbox.batch.ray_calls import lost_result, remote_call

            return pool.submit(remote_call(self, job), partial(lost_result, self, job))
        work = self._reevaluate if job.evaluate_only else self._rollout
        return pool.submit(work, job.instance_id)

    def kept_patch(self, instance_id: str) -> str:
        """The patch ``preds.json`` holds for ``instance_id`` (its kept attempt's), or ``""``."""
        return (self.preds.preds.get(instance_id) or {}).get("model_patch") or ""

    def _may_start(self) -> bool:
        return not self.cancel.cancelled and not self.budget.exhausted()

    def _rollout(self, instance_id: str) -> RolloutResult:
        result = rollout(self.tasks[instance_id], self.run_config, self.env_config, self.evaluate,
                         trajectory_path=trajectory_path(self.dir, instance_id), cancel=self.cancel,
                         budget=self.budget, progress=self.progress.update, eval_timeout=self.eval_timeout,
                         grading=self.grading)
        result.messages = []  # not kept in memory: the trajectory file has them
        return result

    def _reevaluate(self, instance_id: str) -> RolloutResult:
        """Evaluate the patch of ``instance_id``'s kept attempt again (its agent is not run)."""
        from swe_sandbox.batch.rollouts import evaluate_kept

        previous = self.final[instance_id]
        patch = self.kept_patch(instance_id)
        self.progress.update(instance_id, phase="evaluating")
        return evaluate_kept(self.tasks[instance_id], previous.exit_status, patch, self.env_config, outcome=previous.outcome,
                             cancel=self.cancel, eval_timeout=self.eval_timeout, backend=previous.backend,
                             grading=self.grading)

    def _commit(self, result: RolloutResult) -> bool:
        """Write one finished attempt: ``preds.json`` and eval files, then its ``results.jsonl``
        line. An instance out of attempts gets an empty prediction (SWE-bench counts it as an
        empty patch, as mini-swe-agent writes one). Returns False for an interrupted rollout
        (not an attempt: it runs again on resume)."""
        instance_id = result.instance_id
        if result.trajectory is not None:  # from a Ray worker: written here, first (see records)
            from swe_sandbox.trajectory import atomic_write_text

            atomic_write_text(trajectory_path(self.dir, instance_id), result.trajectory)
        if result.exit_status == INTERRUPTED:
            self.progress.finished(None, result)
            return False
        model_name = result.model_name or str(self.run_config["model"].get("model_name") or "unknown")
        if result.done:
            self.preds.put(instance_id, result.submission, model_name)
            if result.evaluation is not None and not result.evaluation.infra_failure:
                from swe_sandbox.batch.evaluation import write_eval_files

                write_eval_files(result.evaluation, instance_dir(self.dir, instance_id) / rec.EVAL_DIR)
        record = self._record(result)
        self.results.append(record)
        self._advance(record)
        if self.state.exhausted(instance_id, self.max_attempts):
            self.preds.put(instance_id, "", model_name)
        if self.evaluate:
            self._write_report()
        self.progress.finished(record, result)
        return True

    def _advance(self, record: rec.AttemptRecord) -> None:
        """Count ``record`` in the resume state and the final record of its instance."""
        self.state.add(record)
        previous = self.final.get(record.instance_id)
        if record.done or previous is None or not previous.done:
            self.final[record.instance_id] = record

    def _record(self, result: RolloutResult) -> rec.AttemptRecord:
        evaluation = result.evaluation
        return rec.AttemptRecord(
            eval_pending=bool(evaluation and evaluation.infra_failure), eval_only=result.evaluate_only,
            generation=self.state.generation,
            instance_id=result.instance_id, attempt=self.state.next_attempt(result.instance_id),
            exit_status=result.exit_status, done=result.done, outcome=result.outcome, error=result.error, cost=result.cost,
            api_calls=result.api_calls, steps=result.steps, duration_s=round(result.duration_s, 3),
            backend=result.backend, started_at=result.started_at, finished_at=time.time(),
            **({"node": result.node} if result.node else {}), ray_node=result.ray_node or None,
            patch_lines=len(result.submission.splitlines()),
            eval_status=evaluation.status if evaluation else None,
            resolved=evaluation.resolved if evaluation else None,
            reward=evaluation.reward if evaluation else None,
            patch_sha256=evaluation.patch_sha256 if evaluation else None,
            grading=evaluation.grading if evaluation else None)

    def _write_report(self) -> None:
        from swe_sandbox.batch.grading import run_report
        from swe_sandbox.trajectory import atomic_write_text, to_json

        outcomes = {i: r.eval_status for i, r in self.final.items() if r.done and r.eval_status}
        report = run_report(self.tasks, self.preds.preds, outcomes)
        atomic_write_text(self.dir / rec.REPORT_FILE, to_json(report, indent=2) + "\n")


def run_batch(tasks: list[Task], output_dir: str | Path, *, run_config: dict[str, Any] | None = None,
              env_config: str | dict[str, Any] = "bwrap", workers: int = 1, evaluate: bool = False,
              max_attempts: int = DEFAULT_MAX_ATTEMPTS, redo_existing: bool = False, cost_limit: float = 0.0,
              eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S, progress: BatchProgress | None = None,
              cancel: Cancellation | None = None, executor: Literal["threads", "ray"] = "threads",
              ray_address: str = "local", grading: str = STRICT) -> Path:
    """Run ``rollout`` for every task not done yet, ``workers`` at once; write ``output_dir``.

    Args:
        tasks: from ``load_tasks``.
        output_dir: created if missing; its ``results.jsonl`` says what is done (resume).
        run_config: ``{"agent": ..., "model": ...}`` (default: ``load_run_config()``).
        env_config: a preset name, YAML file or dict (default ``bwrap``).
        workers: rollouts at once (>= 1).
        evaluate: evaluate each patch in a fresh sandbox; writes ``<id>/eval/`` and ``report.json``.
        max_attempts: attempts per instance in all, infrastructure failures included (>= 1);
            likewise evaluations without a verdict (the agent's result is kept, the evaluation
            runs again). An instance out of attempts gets an empty ``preds.json`` entry.
        redo_existing: run every instance again once, done or not (earlier lines stay in the
            file); rerun after an interruption, it resumes that redo: what it finished is kept.
        cost_limit: total USD for the run (0: none): once reached, running agents stop with
            ``LimitsExceeded`` and no new instance starts.
        eval_timeout: seconds for each ``eval_command``.
        progress: receives events (``swe_sandbox.batch.progress``); default: none shown.
        cancel: cancel it (from another thread) to stop the batch as Ctrl-C does.
        executor: ``threads`` (this machine), or ``ray``: one Ray task per rollout, each taking one
            unit of the ``swe_sandbox`` resource, its sandbox on the node that runs it; as many
            at once as the cluster's nodes offer (DESIGN.md §7). Needs the ``[ray]`` extra.
        ray_address: with ``ray``: ``auto`` or an address of a running cluster, or ``local``
            (default): a local Ray started for this run with ``workers`` slots.
        grading: the grading policy of the evaluations, ``strict`` (default) or ``swebench``
            (``swe_sandbox.batch.evaluation``; a task's ``grading`` field wins).

    Returns:
        Path: ``output_dir``.

    Raises:
        ConfigError: bad arguments or config (before anything is written).
        KeyboardInterrupt: after running rollouts were stopped, their sandboxes closed and the
            attempts that had finished were written.
    """
    from swe_sandbox.batch.progress import BatchProgress
    from swe_sandbox.batch.sandbox import check_environment_config
    from swe_sandbox.config import load_environment_config
    from swe_sandbox.errors import ConfigError
    from swe_sandbox.models import warm_up

    if workers < 1 or max_attempts < 1:
        raise ConfigError("workers and max_attempts must be >= 1")
    from swe_sandbox.batch.ray_settings import ray_options

    ray = ray_options(executor, ray_address, workers)
    if run_config is None:
        from swe_sandbox.agent.config import load_run_config

        run_config = load_run_config()
    env = load_environment_config(env_config) if not isinstance(env_config, dict) else dict(env_config)
    if ray is None:  # on Ray the workers query the models
        warm_up((run_config.get("model") or {}).get("model_class", "litellm"))
    check_environment_config(tasks, env)
    output_dir = rec.output_directory(output_dir)
    BatchRun(tasks, output_dir, run_config, env, workers=workers, evaluate=evaluate, max_attempts=max_attempts,
             redo_existing=redo_existing, budget=CostBudget(cost_limit), cancel=cancel or Cancellation(),
             progress=progress or BatchProgress(), eval_timeout=eval_timeout, ray=ray, grading=grading).run()
    return output_dir
