"""``run_eval``: evaluate a predictions file against its tasks, ``workers`` at once (``swe-sandbox eval``).

Each prediction is evaluated in a fresh sandbox (``swe_sandbox.batch.evaluation``). The output
directory mirrors a batch's: ``<instance_id>/eval/`` (``patch.diff``, ``test_output.txt``,
``report.json``), ``report.json`` with SWE-bench's run-report keys, and ``results.jsonl`` (one
line per evaluation, exit status ``Evaluated``), which makes a rerun resume: evaluated instances
are skipped, infrastructure failures are evaluated again (up to ``max_attempts`` in all, within
the run and across reruns); an instance whose verdict graded another patch than its prediction's
now, or under another grading policy, is evaluated again. Each evaluation is a unit of work
(``EvaluationWork``) that the driver loop (``swe_sandbox.batch.driver``) runs on threads or, with
``executor="ray"``, as one Ray task each; this process alone writes the directory.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from swe_sandbox.batch import records as rec
from swe_sandbox.batch.control import Cancellation, CostBudget
from swe_sandbox.batch.driver import drive
from swe_sandbox.batch.evaluation import patch_sha256, write_eval_files
from swe_sandbox.batch.executors import make_executor
from swe_sandbox.batch.grading import run_report
from swe_sandbox.batch.options import RunOptions
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.sandbox import check_environment_config
from swe_sandbox.batch.tasks import Task, TaskFileError
from swe_sandbox.batch.work import EVALUATED, EvaluationWork, WorkUnit
from swe_sandbox.config import load_environment_config, validate
from swe_sandbox.errors import BackendUnavailable, Outcome
from swe_sandbox.files import atomic_write_text, to_json

__all__ = ["EVALUATED", "match_predictions", "run_eval"]


def match_predictions(predictions: list[dict[str, Any]], tasks: list[Task]) -> dict[str, dict[str, Any]]:
    """``{instance_id: prediction}``, checked against the tasks.

    Raises:
        TaskFileError: a prediction names an instance the task file does not have.
    """
    ids = {t.instance_id for t in tasks}
    unknown = [p["instance_id"] for p in predictions if p["instance_id"] not in ids]
    if unknown:
        shown = ", ".join(map(repr, unknown[:5])) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise TaskFileError(f"predictions for instances the task file does not have: {shown}")
    return {p["instance_id"]: p for p in predictions}


class EvalRun:
    """One run of ``run_eval`` over an output directory: the driver's plan (see ``run_eval``)."""

    def __init__(self, preds: dict[str, dict[str, Any]], tasks: dict[str, Task], directory: Path,
                 env_config: dict[str, Any], options: RunOptions):
        self.preds, self.tasks, self.dir, self.env_config, self.options = preds, tasks, directory, env_config, options
        self.log = rec.ResultsLog(directory / rec.RESULTS_FILE)
        existing = self.log.read()
        self.generation = rec.redo_generation(existing, tasks, options.max_attempts) if options.redo_existing else 0
        stale = _stale(existing, self.generation, preds, tasks, options.grading)  # their records only number
        self.state = rec.ResumeState(existing, self.generation, counts=lambda record: record.instance_id not in stale)
        stale.clear()  # what this run adds counts

    def unit(self, instance_id: str) -> WorkUnit | None:
        """The evaluation ``instance_id`` needs now, or None."""
        if not self.state.should_run(instance_id, self.options.max_attempts):
            return None
        return EvaluationWork(task=self.tasks[instance_id], patch=self.preds[instance_id]["model_patch"],
                              env_config=self.env_config, options=self.options)

    def pending(self) -> list[WorkUnit]:
        return [unit for unit in map(self.unit, self.tasks) if unit is not None]

    def commit(self, result: RolloutResult) -> list[WorkUnit]:
        """Write one finished evaluation: its eval files (with a verdict), then its ``results.jsonl``
        line; an interrupted one is not an attempt. Returns the evaluation to run again, if any."""
        evaluation = result.evaluation
        if result.outcome is Outcome.INTERRUPTED or evaluation is None:
            return []
        if result.outcome is Outcome.BACKEND and self.options.executor == "threads":
            # every evaluation of this run needs this host's backend: stop, and spend no attempt
            raise BackendUnavailable(evaluation.error)
        if not evaluation.infra_failure:
            write_eval_files(evaluation, rec.instance_directory(self.dir, result.instance_id, rec.EVAL_DIR))
        record = rec.AttemptRecord(
            instance_id=result.instance_id, attempt=self.state.next_attempt(result.instance_id),
            exit_status=EVALUATED, done=result.done, error=evaluation.error,
            duration_s=round(evaluation.duration_s, 3), backend=str(self.env_config.get("backend", "")),
            started_at=result.started_at, finished_at=time.time(), patch_lines=len(result.submission.splitlines()),
            eval_status=evaluation.status, resolved=evaluation.resolved,
            reward=None if evaluation.infra_failure else evaluation.reward,  # no verdict: no reward
            patch_sha256=evaluation.patch_sha256, grading=evaluation.grading, generation=self.generation)
        if result.ray_node:
            record.node, record.ray_node = result.node or record.node, result.ray_node
        self.log.append(record)
        self.state.add(record)
        again = self.unit(result.instance_id)
        return [again] if again is not None else []


def run_eval(predictions: list[dict[str, Any]], tasks: list[Task], output_dir: str | Path, *,
             env_config: str | dict[str, Any] = "bwrap", options: RunOptions | None = None,
             cancel: Cancellation | None = None, **settings: Any) -> dict[str, Any]:
    """Evaluate ``predictions`` (from ``load_predictions``) of ``tasks``; write ``output_dir``.

    ``options.workers`` at once on this machine, or (``executor="ray"``) one Ray task per
    evaluation on a cluster (``ray_address``: ``auto``, an address, or ``local``; see
    ``RunOptions``). Ctrl-C (or ``cancel``, from another thread) closes the running evaluations'
    sandboxes at once and stops the image pulls under way; what they were doing is not recorded
    (it runs again on resume). The grading policy is ``options.grading`` (a task's ``grading``
    field wins).

    Args:
        predictions: ``[{"instance_id", "model_patch", ...}]``.
        tasks: from ``load_tasks``; only those with a prediction are evaluated.
        output_dir: created if missing; its ``results.jsonl`` says what is done (resume).
        env_config: a preset name, YAML file or dict (default ``bwrap``).
        options: the run's settings; default ``RunOptions(**settings)`` (e.g. ``workers=4``).
        cancel: cancel it (from another thread) to stop as Ctrl-C does.

    Returns:
        dict: the run report (``report.json``'s content).

    Raises:
        TaskFileError: a prediction for an unknown instance (nothing is written).
        ConfigError: a bad setting or config.
        KeyboardInterrupt: Ctrl-C or ``cancel``: the evaluations under way were stopped (their
            sandboxes closed); the finished ones are written.
        BatchAborted: a second Ctrl-C, or evaluations still busy ``CANCEL_GRACE_S`` after the first.
    """
    options = options or validate(RunOptions, settings, section="run")
    preds = match_predictions(predictions, tasks)
    env = load_environment_config(env_config) if not isinstance(env_config, dict) else dict(env_config)
    by_id = {t.instance_id: t for t in tasks if t.instance_id in preds}
    check_environment_config(list(by_id.values()), env)
    directory = rec.output_directory(output_dir)
    run = EvalRun(preds, by_id, directory, env, options)
    cancel, budget = cancel or Cancellation(), CostBudget()
    drive(run, make_executor(options, directory, cancel, budget, _no_progress), cancel, budget)
    if cancel.cancelled:
        raise KeyboardInterrupt("evaluation cancelled")
    outcomes = {i: r.eval_status for i, r in run.state.final.items() if r.done and r.eval_status}
    report = run_report([t.instance_id for t in tasks], preds, outcomes)
    atomic_write_text(directory / rec.REPORT_FILE, to_json(report, indent=2) + "\n")
    return report


def _no_progress(instance_id: str, **fields: Any) -> None:
    """An evaluation run shows no progress."""


def _stale(records: list[rec.AttemptRecord], generation: int, preds: dict[str, dict[str, Any]],
           tasks: dict[str, Task], grading: str) -> set[str]:
    """Instances whose latest verdict graded another patch than their prediction's now, or under
    another policy than they would be graded by now: evaluated again (a verdict is tied to the
    patch it graded; an older verdict of the same patch does not stand in for the latest one)."""
    latest = {r.instance_id: r for r in records if r.done and r.generation >= generation}
    stale = set()
    for instance_id, record in latest.items():
        prediction, task = preds.get(instance_id), tasks.get(instance_id)
        if prediction is None or task is None:
            continue
        same_patch = record.patch_sha256 == patch_sha256(prediction.get("model_patch"))
        if not same_patch or record.grading != (task.grading or grading):
            stale.add(instance_id)
    return stale
