"""``run_eval``: evaluate a predictions file against its tasks, ``workers`` at once (``swe-sandbox eval``).

Each prediction is evaluated in a fresh sandbox (``swe_sandbox.batch.evaluation``). The output
directory mirrors a batch's: ``<instance_id>/eval/`` (``patch.diff``, ``test_output.txt``,
``report.json``), ``report.json`` with SWE-bench's run-report keys, and ``results.jsonl`` (one
line per evaluation, exit status ``Evaluated``), which makes a rerun resume: evaluated instances
are skipped, infrastructure failures are evaluated again (up to ``max_attempts``).
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swe_sandbox.batch import records as rec
from swe_sandbox.batch.evaluation import DEFAULT_EVAL_TIMEOUT_S, EvalResult, evaluate, write_eval_files
from swe_sandbox.batch.tasks import TaskFileError

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.tasks import Task

EVALUATED = "Evaluated"


def match_predictions(predictions: list[dict[str, Any]], tasks: list["Task"]) -> dict[str, dict[str, Any]]:
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


def run_eval(predictions: list[dict[str, Any]], tasks: list["Task"], output_dir: str | Path, *,
             env_config: str | dict[str, Any] = "bwrap", workers: int = 1, max_attempts: int = 3,
             redo_existing: bool = False, eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S) -> dict[str, Any]:
    """Evaluate ``predictions`` (from ``load_predictions``) of ``tasks``; write ``output_dir``.

    Returns:
        dict: the run report (``report.json``'s content).

    Raises:
        TaskFileError: a prediction for an unknown instance (nothing is written).
        KeyboardInterrupt: after the evaluations under way were awaited (their sandboxes end with them).
    """
    from swe_sandbox.agent.trajectory import atomic_write_text, to_json
    from swe_sandbox.batch.grading import run_report
    from swe_sandbox.config import load_environment_config

    preds = match_predictions(predictions, tasks)
    env = load_environment_config(env_config) if not isinstance(env_config, dict) else dict(env_config)
    by_id = {t.instance_id: t for t in tasks if t.instance_id in preds}
    directory = Path(output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    log = rec.ResultsLog(directory / rec.RESULTS_FILE)
    existing = log.read()
    generation = rec.redo_generation(existing, by_id, max_attempts) if redo_existing else 0
    state = rec.ResumeState(existing, generation)
    todo = [i for i in by_id if state.should_run(i, max_attempts)]
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swe-sandbox-eval") as pool:
        futures = {pool.submit(_one, by_id[i], preds[i]["model_patch"], env, eval_timeout): i for i in todo}
        for future in cf.as_completed(futures):
            result, started = future.result()
            if not result.infra_failure:
                write_eval_files(result, directory / result.instance_id / rec.EVAL_DIR)
            record = _record(result, state.next_attempt(result.instance_id), started, str(env.get("backend", "")))
            record.generation = generation
            log.append(record)
            state.add(record)
    outcomes = {i: r.eval_status for i, r in state.final.items() if r.done and r.eval_status}
    report = run_report([t.instance_id for t in tasks], preds, outcomes)
    atomic_write_text(directory / rec.REPORT_FILE, to_json(report, indent=2) + "\n")
    return report


def _one(task: "Task", patch: str | None, env: dict[str, Any], timeout: float) -> tuple[EvalResult, float]:
    started = time.time()
    return evaluate(task, patch, env, timeout=timeout), started


def _record(result: EvalResult, attempt: int, started: float, backend: str) -> rec.AttemptRecord:
    return rec.AttemptRecord(
        instance_id=result.instance_id, attempt=attempt, exit_status=EVALUATED, done=not result.infra_failure,
        error=result.error, duration_s=round(result.duration_s, 3), backend=backend, started_at=started,
        finished_at=time.time(), patch_lines=len((result.patch or "").splitlines()),
        eval_status=result.status, resolved=result.resolved, reward=result.reward)
