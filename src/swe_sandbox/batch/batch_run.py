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
from swe_sandbox.batch.passk import group_report, group_rewards
from swe_sandbox.batch.progress import BatchProgress
from swe_sandbox.batch.rollouts import RolloutResult
from swe_sandbox.batch.sandbox import check_environment_config
from swe_sandbox.batch.tasks import Task
from swe_sandbox.batch.work import GroupWork, ReevaluationWork, RolloutWork, WorkUnit, trajectory_path
from swe_sandbox.config import load_environment_config, validate
from swe_sandbox.errors import BackendUnavailable, ConfigError, Outcome
from swe_sandbox.files import atomic_write_text, to_json
from swe_sandbox.models import warm_up


class BatchRun:
    """One run of ``run_batch`` over an output directory: the driver's plan (see ``run_batch``).

    With ``options.rollouts`` K > 1 every instance is a group of K samples: resume, attempts and
    exactly-once count per sample (a record's ``label``, ``instance_id/sample``); the samples of an
    instance still to run go out as one ``GroupWork`` (on Ray: one per ``workers`` samples, so a
    group may spread over nodes), and the next ones once none of the instance's is under way.
    """

    def __init__(self, tasks: list[Task], output_dir: Path, run_config: dict[str, Any], env_config: dict[str, Any],
                 options: RunOptions, progress: BatchProgress):
        self.tasks = {t.instance_id: t for t in tasks}
        self.dir, self.run_config, self.env_config = output_dir, run_config, env_config
        self.options, self.progress = options, progress
        self.k = options.rollouts
        self.samples: list[int | None] = [None] if self.k == 1 else list(range(self.k))
        self.labels = [rec.sample_label(i, s) for i in self.tasks for s in self.samples]
        self.results = rec.ResultsLog(output_dir / rec.RESULTS_FILE)
        existing = self.results.read()
        check_layout(existing, self.k)
        generation = rec.redo_generation(existing, self.labels, options.max_attempts) if options.redo_existing else 0
        self.state = rec.ResumeState(existing, generation)
        kept = {r.label for r in existing if r.done} | {i for i in self.labels if self._exhausted(i)}
        self.preds = rec.PredsFile(output_dir / rec.PREDS_FILE)
        self.preds.keep_only({label.split("/")[0] for label in kept if self._is_first(label)})
        self.sample_preds = rec.SamplesFile(output_dir / rec.SAMPLES_FILE, self.k) if self.k > 1 else None
        if self.sample_preds is not None:
            self.sample_preds.keep_only(kept)
        self.final = dict(rec.ResumeState(existing).final)
        self.under_way: dict[str, set[int | None]] = {}

    def _exhausted(self, label: str) -> bool:
        return self.state.exhausted(label, self.options.max_attempts)

    def _is_first(self, label: str) -> bool:
        """Whether ``label`` is what ``preds.json`` holds: the instance's one rollout, or sample 0."""
        return "/" not in label or label.endswith("/0")

    def next_units(self, instance_id: str) -> list[WorkUnit]:
        """What ``instance_id`` needs now: rollouts (a group's missing samples), evaluations of
        kept patches, or nothing; recorded as under way."""
        units = self._units(instance_id)
        self.under_way[instance_id] = {s for unit in units for s in _samples_of(unit)}
        return units

    def _units(self, instance_id: str) -> list[WorkUnit]:
        task, env, options = self.tasks[instance_id], self.env_config, self.options
        labels = {s: rec.sample_label(instance_id, s) for s in self.samples}
        missing = [s for s, label in labels.items() if self.state.should_run(label, options.max_attempts)]
        if missing:
            if self.k == 1:
                rec.instance_directory(self.dir, instance_id)  # where its trajectory goes
                return [RolloutWork(task=task, env_config=env, options=options, run_config=self.run_config)]
            return self._group_units(task, [s for s in missing if s is not None])
        if not options.evaluate:
            return []
        return [self._reevaluation(task, s, labels[s]) for s in self.samples
                if self.state.should_evaluate(labels[s], options.max_attempts)]

    def _group_units(self, task: Task, missing: list[int]) -> list[WorkUnit]:
        for sample in missing:
            rec.instance_directory(self.dir, task.instance_id, str(sample))  # where its trajectory goes
        workers = self.options.workers
        size = workers if self.options.executor == "ray" else len(missing)  # Ray: one node's share per task
        return [GroupWork(task=task, env_config=self.env_config, options=self.options, run_config=self.run_config,
                          samples=tuple(missing[i:i + size]), concurrency=workers)
                for i in range(0, len(missing), size)]

    def _reevaluation(self, task: Task, sample: int | None, label: str) -> WorkUnit:
        previous = self.final[label]
        return ReevaluationWork(task=task, env_config=self.env_config, options=self.options, sample=sample,
                                exit_status=previous.exit_status, patch=self.kept_patch(task.instance_id, sample),
                                previous_backend=previous.backend, outcome=previous.outcome)

    def pending(self) -> list[WorkUnit]:
        return [unit for instance_id in self.tasks for unit in self.next_units(instance_id)]

    def kept_patch(self, instance_id: str, sample: int | None = None) -> str:
        """The patch ``preds.json`` (a group's sample: ``preds.samples.json``) holds, or ``""``."""
        if sample is not None and self.sample_preds is not None:
            entries = self.sample_preds.preds.get(instance_id) or []
            return ((entries[sample] if sample < len(entries) else None) or {}).get("model_patch") or ""
        return (self.preds.preds.get(instance_id) or {}).get("model_patch") or ""

    def commit(self, result: RolloutResult) -> list[WorkUnit]:
        """Write one finished attempt: ``preds.json`` (and ``preds.samples.json``) and eval files,
        then its ``results.jsonl`` line. A sample out of attempts gets an empty prediction
        (SWE-bench counts it as an empty patch, as mini-swe-agent writes one). An interrupted
        rollout is not an attempt (it runs again on resume). Returns the instance's next units,
        once none of its results is still to come.

        Raises:
            BackendUnavailable: on this host's threads, a unit found the backend unusable here
                (nothing is recorded: no attempt is spent on what no instance can do)."""
        instance_id, sample = result.instance_id, result.sample
        if result.trajectory is not None:  # from a Ray worker: written here, first (see records)
            rec.instance_directory(self.dir, instance_id, *([] if sample is None else [str(sample)]))
            atomic_write_text(trajectory_path(self.dir, instance_id, sample), result.trajectory)
        if result.outcome is Outcome.INTERRUPTED:
            self.progress.finished(None, result)
            return self._after(instance_id, sample)
        if result.outcome is Outcome.BACKEND and self.options.executor == "threads":
            # every unit of this run needs this host's backend: stop, as `run` does, and spend no attempt
            raise BackendUnavailable(result.error)
        model_name = result.model_name or str(self.run_config["model"].get("model_name") or "unknown")
        if result.done:
            self._predict(instance_id, sample, result.submission, model_name)
            if result.evaluation is not None and not result.evaluation.infra_failure:
                where = [] if sample is None else [str(sample)]
                write_eval_files(result.evaluation, rec.instance_directory(self.dir, instance_id, *where, rec.EVAL_DIR))
        record = self._record(result)
        self.results.append(record)
        self._advance(record)
        if self._exhausted(record.label):
            self._predict(instance_id, sample, "", model_name)
        if self.options.evaluate:
            self._write_report()
        self.progress.finished(record, result)
        return self._after(instance_id, sample)

    def _predict(self, instance_id: str, sample: int | None, patch: str, model_name: str) -> None:
        if sample in (None, 0):
            self.preds.put(instance_id, patch, model_name)
        if sample is not None and self.sample_preds is not None:
            self.sample_preds.put(instance_id, sample, patch, model_name)

    def _after(self, instance_id: str, sample: int | None) -> list[WorkUnit]:
        """The instance's next units once ``sample`` was its last result under way."""
        under_way = self.under_way.get(instance_id, set())
        under_way.discard(sample)
        return [] if under_way else self.next_units(instance_id)

    def _advance(self, record: rec.AttemptRecord) -> None:
        """Count ``record`` in the resume state and the final record of its label."""
        self.state.add(record)
        previous = self.final.get(record.label)
        if record.done or previous is None or not previous.done:
            self.final[record.label] = record

    def _record(self, result: RolloutResult) -> rec.AttemptRecord:
        evaluation, group = result.evaluation, result.group
        return rec.AttemptRecord(
            eval_pending=bool(evaluation and evaluation.infra_failure), eval_only=result.evaluate_only,
            generation=self.state.generation, sample=result.sample,
            instance_id=result.instance_id, attempt=self.state.next_attempt(result.label),
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
            grading=evaluation.grading if evaluation else None,
            group=group.group if group else None, group_mode=group.mode if group else None,
            prepare_s=group.prepare_s if group else None, fork_s=group.fork_s if group else None,
            reset_drift=group.reset_drift if group else [])

    def _write_report(self) -> None:
        first = {label.split("/")[0]: r for label, r in self.final.items() if self._is_first(label)}
        outcomes = {i: r.eval_status for i, r in first.items() if r.done and r.eval_status}
        report = run_report(self.tasks, self.preds.preds, outcomes)
        if self.k > 1:
            exhausted = {label for label in self.labels if self._exhausted(label)}
            rewards = group_rewards(self.tasks, self.k, self.final, exhausted)
            report.update(group_report(rewards, self.k, self.results.read()))
        atomic_write_text(self.dir / rec.REPORT_FILE, to_json(report, indent=2) + "\n")


def _samples_of(unit: WorkUnit) -> list[int | None]:
    return list(unit.samples) if isinstance(unit, GroupWork) else [unit.sample]


def check_layout(records: list[rec.AttemptRecord], k: int) -> None:
    """Refuse to mix one rollout per instance and groups in one output directory, or to shrink
    its groups (a larger ``k`` adds samples to each).

    Raises:
        ConfigError: the directory's lines were written with another ``--rollouts`` (1 against K > 1),
            or name a sample outside ``0 .. k-1``.
    """
    samples = {r.sample for r in records}
    if not samples:
        return
    if (k == 1) != (samples == {None}) or any(s is not None and s >= k for s in samples):
        found = "1" if samples == {None} else f"at least {max(s for s in samples if s is not None) + 1}"
        raise ConfigError(f"--rollouts: the output directory was run with --rollouts {found}, not {k}: "
                          "give the same --rollouts, or another directory")


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
    progress.started(total=len(run.labels), pending=sum(len(u.labels()) for u in pending),
                     finished=list(run.final.values()))
    try:
        drive(run, executor, cancel, budget)
    finally:
        progress.stopped()
    return output_dir
