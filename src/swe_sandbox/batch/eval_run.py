"""``run_eval``: evaluate a predictions file against its tasks, ``workers`` at once (``swe-sandbox eval``).

Each prediction is evaluated in a fresh sandbox (``swe_sandbox.batch.evaluation``). The output
directory mirrors a batch's: ``<instance_id>/eval/`` (``patch.diff``, ``test_output.txt``,
``report.json``), ``report.json`` with SWE-bench's run-report keys, and ``results.jsonl`` (one
line per evaluation, exit status ``Evaluated``), which makes a rerun resume: evaluated instances
are skipped, infrastructure failures are evaluated again (up to ``max_attempts`` in all, within
the run and across reruns); an instance whose verdict graded another patch than its prediction's
now, or under another grading policy, is evaluated again. With ``executor="ray"`` each evaluation is one Ray task
(``swe_sandbox.batch.ray_executor``); this process alone writes the directory.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from swe_sandbox.batch import records as rec
from swe_sandbox.batch.control import Cancellation
from swe_sandbox.batch.evaluation import (
    DEFAULT_EVAL_TIMEOUT_S,
    STRICT,
    EvalResult,
    evaluate,
    infra_failed,
    patch_sha256,
    write_eval_files,
)
from swe_sandbox.batch.tasks import TaskFileError
from swe_sandbox.environments.container.pulling import stop_all as stop_pulls

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.tasks import Task

EVALUATED = "Evaluated"


class EvalAttempt(NamedTuple):
    """One finished evaluation: its result, when it started (Unix time, s) and where it ran (Ray)."""

    result: EvalResult
    started: float
    node: str = ""
    ray_node: str = ""


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


def run_eval(predictions: list[dict[str, Any]], tasks: list[Task], output_dir: str | Path, *,
             env_config: str | dict[str, Any] = "bwrap", workers: int = 1, max_attempts: int = 3,
             redo_existing: bool = False, eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S,
             executor: Literal["threads", "ray"] = "threads", ray_address: str = "local",
             cancel: Cancellation | None = None, grading: str = STRICT) -> dict[str, Any]:
    """Evaluate ``predictions`` (from ``load_predictions``) of ``tasks``; write ``output_dir``.

    ``workers`` at once on this machine, or (``executor="ray"``) one Ray task per evaluation on a
    cluster (``ray_address``: ``auto``, an address, or ``local``; see ``run_batch``). Ctrl-C (or
    ``cancel``, from another thread) closes the running evaluations' sandboxes at once and stops
    the image pulls under way; what they were doing is not recorded (it runs again on resume).

    ``grading``: the policy, ``strict`` (default) or ``swebench`` (``swe_sandbox.batch.evaluation``;
    a task's ``grading`` field wins).

    Returns:
        dict: the run report (``report.json``'s content).

    Raises:
        TaskFileError: a prediction for an unknown instance (nothing is written).
        KeyboardInterrupt: Ctrl-C or ``cancel``: the evaluations under way were stopped (their
            sandboxes closed), not awaited; the finished ones are written.
    """
    from swe_sandbox.batch.grading import run_report
    from swe_sandbox.batch.ray_settings import ray_options
    from swe_sandbox.batch.sandbox import check_environment_config
    from swe_sandbox.config import load_environment_config
    from swe_sandbox.files import atomic_write_text, to_json

    ray = ray_options(executor, ray_address, workers)
    preds = match_predictions(predictions, tasks)
    env = load_environment_config(env_config) if not isinstance(env_config, dict) else dict(env_config)
    by_id = {t.instance_id: t for t in tasks if t.instance_id in preds}
    check_environment_config([by_id[i] for i in by_id], env)
    directory = rec.output_directory(output_dir)
    log = rec.ResultsLog(directory / rec.RESULTS_FILE)
    existing = log.read()
    generation = rec.redo_generation(existing, by_id, max_attempts) if redo_existing else 0
    stale = _stale(existing, generation, preds, by_id, grading)  # their records count only for numbering
    state = rec.ResumeState(existing, generation, counts=lambda record: record.instance_id not in stale)
    stale.clear()  # what this run adds counts
    todo = [i for i in by_id if state.should_run(i, max_attempts)]
    cancel = cancel or Cancellation()
    pool = _pool(ray, workers, cancel)
    start = partial(_start, pool, ray is not None, env, eval_timeout, grading, cancel)
    wait = True
    try:
        running = {start(by_id[i], preds[i]["model_patch"]): i for i in todo}
        while running and not cancel.cancelled:
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                instance_id = running.pop(future)
                attempt = future.result()
                if cancel.cancelled or attempt is None:
                    break  # an evaluation the cancel cut short: not an attempt
                _commit(attempt, directory, log, state, generation, str(env.get("backend", "")))
                if state.should_run(instance_id, max_attempts):  # an infrastructure failure: again
                    running[start(by_id[instance_id], preds[instance_id]["model_patch"])] = instance_id
        if cancel.cancelled:
            raise KeyboardInterrupt("evaluation cancelled")
    except KeyboardInterrupt:
        wait = False  # the cancelled evaluations end on their own, unrecorded
        cancel.cancel()
        stop_pulls()
        raise
    finally:
        pool.shutdown(wait=wait, cancel_futures=True)
    outcomes = {i: r.eval_status for i, r in state.final.items() if r.done and r.eval_status}
    report = run_report([t.instance_id for t in tasks], preds, outcomes)
    atomic_write_text(directory / rec.REPORT_FILE, to_json(report, indent=2) + "\n")
    return report


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


def _pool(ray: Any, workers: int, cancel: Cancellation) -> Any:
    if ray is None:
        return cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swe-sandbox-eval")
    from swe_sandbox.batch.control import CostBudget
    from swe_sandbox.batch.progress import BatchProgress
    from swe_sandbox.batch.ray_executor import RayExecutor

    return RayExecutor(ray, CostBudget(), cancel, BatchProgress())


def _start(pool: Any, on_ray: bool, env: dict[str, Any], timeout: float, grading: str, cancel: Cancellation,
           task: Task, patch: str | None) -> cf.Future:
    if not on_ray:
        return pool.submit(_evaluate_cancellable, task, patch, env, timeout, grading, cancel)
    from swe_sandbox.batch.ray_settings import RemoteCall

    call = RemoteCall(kind="evaluate", task=task, patch=patch, env_config=env, eval_timeout=timeout, grading=grading)
    return pool.submit(call, partial(_lost, task, patch))


def _lost(task: Task, patch: str | None, exit_status: str, error: str, where: dict[str, str]) -> EvalAttempt:
    """The attempt of an evaluation whose Ray task was lost with its worker or node (runs again)."""
    result = infra_failed(task, patch, f"{exit_status}: {error}")
    return EvalAttempt(result, time.time(), where.get("node", ""), where.get("ray_node", ""))


def evaluate_one(task: Task, patch: str | None, env: dict[str, Any], timeout: float,
                 cancel: Cancellation | None = None, grading: str = STRICT) -> EvalAttempt:
    """``evaluate`` with when it started: one unit of work of ``run_eval``.

    Raises:
        KeyboardInterrupt: ``cancel`` was cancelled.
    """
    started = time.time()
    return EvalAttempt(evaluate(task, patch, env, timeout=timeout, cancel=cancel, grading_policy=grading), started)


def _evaluate_cancellable(task: Task, patch: str | None, env: dict[str, Any], timeout: float, grading: str,
                          cancel: Cancellation) -> EvalAttempt | None:
    """``evaluate_one`` in a pool thread: None when the cancel cut it short (a KeyboardInterrupt
    raised in a worker thread would only be re-raised by ``future.result()``)."""
    try:
        return evaluate_one(task, patch, env, timeout, cancel, grading)
    except KeyboardInterrupt:
        return None


def _commit(attempt: EvalAttempt, directory: Path, log: rec.ResultsLog, state: rec.ResumeState,
            generation: int, backend: str) -> rec.AttemptRecord:
    """Write one finished evaluation: its eval files (with a verdict), then its ``results.jsonl`` line."""
    result = attempt.result
    if not result.infra_failure:
        write_eval_files(result, directory / result.instance_id / rec.EVAL_DIR)
    record = _record(result, state.next_attempt(result.instance_id), attempt.started, backend)
    record.generation = generation
    if attempt.ray_node:
        record.node, record.ray_node = attempt.node or record.node, attempt.ray_node
    log.append(record)
    state.add(record)
    return record


def _record(result: EvalResult, attempt: int, started: float, backend: str) -> rec.AttemptRecord:
    return rec.AttemptRecord(
        instance_id=result.instance_id, attempt=attempt, exit_status=EVALUATED, done=not result.infra_failure,
        error=result.error, duration_s=round(result.duration_s, 3), backend=backend, started_at=started,
        finished_at=time.time(), patch_lines=len((result.patch or "").splitlines()),
        eval_status=result.status, resolved=result.resolved, reward=result.reward,
        patch_sha256=result.patch_sha256, grading=result.grading)
