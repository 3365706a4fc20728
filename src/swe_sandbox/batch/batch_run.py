"""``run_batch``: many rollouts on a thread pool or on Ray; the driver alone writes the output directory.

Each instance's attempt is a unit of work (``swe_sandbox.batch.work``) that an executor runs
(threads, or ``executor="ray"``: ``swe_sandbox.batch.ray``) and returns as a value; ``BatchRun``
is the run's plan for the driver loop (``swe_sandbox.batch.driver``): it commits each finished
attempt (trajectory already saved by the agent, then ``preds.json``, evaluation files, then the
``results.jsonl`` line: see ``swe_sandbox.batch.records`` for why this order is crash-safe).
Rerunning the same call resumes: done instances are skipped, others run again up to
``max_attempts`` attempts in all.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from swe_sandbox.agent.config import load_run_config
from swe_sandbox.batch import records as rec
from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.driver import drive
from swe_sandbox.batch.evaluation import write_eval_files
from swe_sandbox.batch.executors import make_executor
from swe_sandbox.batch.grading import run_report
from swe_sandbox.batch.options import RunOptions
from swe_sandbox.batch.progress import BatchProgress
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.sandbox import check_environment_config
from swe_sandbox.batch.tasks import Task
from swe_sandbox.batch.work import ReevaluationWork, RolloutWork, WorkUnit, trajectory_path
from swe_sandbox.config import load_environment_config, validate
from swe_sandbox.errors import BackendUnavailable, Outcome
from swe_sandbox.files import atomic_write_text, to_json
from swe_sandbox.models import warm_up


class BatchRun:
    """One run of ``run_batch`` over an output directory: the driver's plan (see ``run_batch``)."""

    def __init__(self, tasks: list[Task], output_dir: Path, run_config: dict[str, Any], env_config: dict[str, Any],
                 options: RunOptions, progress: BatchProgress):
        self.tasks = {t.instance_id: t for t in tasks}
        self.dir, self.run_config, self.env_config = output_dir, run_config, env_config
        self.options, self.progress = options, progress
        self.results = rec.ResultsLog(output_dir / rec.RESULTS_FILE)
        existing = self.results.read()
        generation = rec.redo_generation(existing, self.tasks, options.max_attempts) if options.redo_existing else 0
        self.state = rec.ResumeState(existing, generation)
        self.preds = rec.PredsFile(output_dir / rec.PREDS_FILE)
        self.preds.keep_only({r.instance_id for r in existing if r.done}
                             | {i for i in self.tasks if self.state.exhausted(i, options.max_attempts)})
        self.final = dict(rec.ResumeState(existing).final)

    def next_unit(self, instance_id: str) -> WorkUnit | None:
        """What ``instance_id`` needs now: a rollout, an evaluation of its kept patch, or nothing."""
        task, env, options = self.tasks[instance_id], self.env_config, self.options
        if self.state.should_run(instance_id, options.max_attempts):
            rec.instance_directory(self.dir, instance_id)  # where its trajectory goes
            return RolloutWork(task=task, env_config=env, options=options, run_config=self.run_config)
        if options.evaluate and self.state.should_evaluate(instance_id, options.max_attempts):
            previous = self.final[instance_id]
            return ReevaluationWork(task=task, env_config=env, options=options, exit_status=previous.exit_status,
                                    patch=self.kept_patch(instance_id), previous_backend=previous.backend,
                                    outcome=previous.outcome)
        return None

    def pending(self) -> list[WorkUnit]:
        return [unit for unit in map(self.next_unit, self.tasks) if unit is not None]

    def kept_patch(self, instance_id: str) -> str:
        """The patch ``preds.json`` holds for ``instance_id`` (its kept attempt's), or ``""``."""
        return (self.preds.preds.get(instance_id) or {}).get("model_patch") or ""

    def commit(self, result: RolloutResult) -> WorkUnit | None:
        """Write one finished attempt: ``preds.json`` and eval files, then its ``results.jsonl``
        line. An instance out of attempts gets an empty prediction (SWE-bench counts it as an
        empty patch, as mini-swe-agent writes one). An interrupted rollout is not an attempt
        (it runs again on resume). Returns the instance's next unit, if it needs one.

        Raises:
            BackendUnavailable: on this host's threads, a unit found the backend unusable here
                (nothing is recorded: no attempt is spent on what no instance can do)."""
        instance_id = result.instance_id
        if result.trajectory is not None:  # from a Ray worker: written here, first (see records)
            rec.instance_directory(self.dir, instance_id)
            atomic_write_text(trajectory_path(self.dir, instance_id), result.trajectory)
        if result.outcome is Outcome.INTERRUPTED:
            self.progress.finished(None, result)
            return None
        if result.outcome is Outcome.BACKEND and self.options.executor == "threads":
            # every unit of this run needs this host's backend: stop, as `run` does, and spend no attempt
            raise BackendUnavailable(result.error)
        model_name = result.model_name or str(self.run_config["model"].get("model_name") or "unknown")
        if result.done:
            self.preds.put(instance_id, result.submission, model_name)
            if result.evaluation is not None and not result.evaluation.infra_failure:
                write_eval_files(result.evaluation, rec.instance_directory(self.dir, instance_id, rec.EVAL_DIR))
        record = self._record(result)
        self.results.append(record)
        self._advance(record)
        if self.state.exhausted(instance_id, self.options.max_attempts):
            self.preds.put(instance_id, "", model_name)
        if self.options.evaluate:
            self._write_report()
        self.progress.finished(record, result)
        return self.next_unit(instance_id)

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
            exit_status=result.exit_status, done=result.done, outcome=result.outcome, error=result.error,
            cost=result.cost,
            api_calls=result.api_calls, steps=result.steps, duration_s=round(result.duration_s, 3),
            backend=result.backend, started_at=result.started_at, finished_at=time.time(),
            **({"node": result.node} if result.node else {}), ray_node=result.ray_node or None,
            patch_lines=len(result.submission.splitlines()),
            eval_status=evaluation.status if evaluation else None,
            resolved=evaluation.resolved if evaluation else None,
            reward=evaluation.reward if evaluation and not evaluation.infra_failure else None,  # no verdict: no reward
            patch_sha256=evaluation.patch_sha256 if evaluation else None,
            grading=evaluation.grading if evaluation else None)

    def _write_report(self) -> None:
        outcomes = {i: r.eval_status for i, r in self.final.items() if r.done and r.eval_status}
        report = run_report(self.tasks, self.preds.preds, outcomes)
        atomic_write_text(self.dir / rec.REPORT_FILE, to_json(report, indent=2) + "\n")


def run_batch(tasks: list[Task], output_dir: str | Path, *, run_config: dict[str, Any] | None = None,
              env_config: str | dict[str, Any] = "bwrap", options: RunOptions | None = None,
              progress: BatchProgress | None = None, cancel: Cancellation | None = None, **settings: Any) -> Path:
    """Run ``rollout`` for every task not done yet, ``options.workers`` at once; write ``output_dir``.

    Args:
        tasks: from ``load_tasks``.
        output_dir: created if missing; its ``results.jsonl`` says what is done (resume).
        run_config: ``{"agent": ..., "model": ...}`` (default: ``load_run_config()``).
        env_config: a preset name, YAML file or dict (default ``bwrap``).
        options: how the run goes (``RunOptions``: workers, attempts, evaluation, cost limit,
            grading, executor); default: ``RunOptions(**settings)``.
        progress: receives events (``swe_sandbox.batch.progress``); default: none shown.
        cancel: cancel it (from another thread) to stop the batch as Ctrl-C does.
        **settings: ``RunOptions`` fields, when ``options`` is not given (e.g. ``workers=8,
            evaluate=True``). With ``executor="ray"`` each rollout is one Ray task taking one unit
            of the ``swe_sandbox`` resource, its sandbox on the node that runs it (DESIGN.md §7).

    Returns:
        Path: ``output_dir``.

    Raises:
        ConfigError: bad arguments or config (before anything is written).
        KeyboardInterrupt: after running rollouts were stopped, their sandboxes closed and the
            attempts that had finished were written.
        BatchAborted: a second Ctrl-C, or rollouts still busy ``CANCEL_GRACE_S`` after the first.
    """
    options = options or validate(RunOptions, settings, section="run")
    run_config = run_config if run_config is not None else load_run_config()
    env = load_environment_config(env_config) if not isinstance(env_config, dict) else dict(env_config)
    if options.executor == "threads":  # on Ray the workers query the models
        warm_up((run_config.get("model") or {}).get("model_class", "litellm"))
    check_environment_config(tasks, env)
    output_dir = rec.output_directory(output_dir)
    progress, cancel = progress or BatchProgress(), cancel or Cancellation()
    run = BatchRun(tasks, output_dir, run_config, env, options, progress)
    budget = CostBudget(options.cost_limit)
    executor = make_executor(options, output_dir, cancel, budget, progress.update)
    pending = run.pending()
    progress.started(total=len(run.tasks), pending=len(pending), finished=list(run.final.values()))
    try:
        drive(run, executor, cancel, budget)
    finally:
        progress.stopped()
    return output_dir
