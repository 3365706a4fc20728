"""Evaluation: a prediction's patch applied and tested in a FRESH sandbox (DESIGN.md §7, README "Security").

The sandbox is built from trusted inputs only: the task's image, a copy of its workspace, its
``setup_command``, and the patch as text; never the agent's sandbox (a command there may have
changed what later commands run). Steps, after SWE-bench's harness (``run_evaluation.py``):

1. the patch is written to ``/tmp`` and applied with ``git apply --verbose``, then ``--3way``,
   then ``--reject``, then ``patch --batch --forward --fuzz=5 -p1`` (the tree reset between tries);
   if none succeeds but ``git apply --check --reverse`` does, it was applied after all;
2. ``test_patch`` is applied (``git apply --verbose``);
3. ``eval_command`` runs (``timeout`` seconds), its output is graded (``swe_sandbox.batch.grading``).

The log (``test_output.txt``) uses SWE-bench's markers, so its tools read it too.
"""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from swe_sandbox.batch import grading

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from swe_sandbox.batch.control import Cancellation
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.base import Environment

#: SWE-bench's apply commands, in order (``swebench.harness.run_evaluation.GIT_APPLY_CMDS``).
GIT_APPLY_CMDS = ("git apply --verbose", "git apply --verbose --3way", "git apply --verbose --reject",
                  "patch --batch --forward --fuzz=5 -p1 -i")
RESET_CMD = "git checkout -- . ; git clean -fd"
PATCH_DIR = "/tmp/swe-sandbox-eval"
#: Seconds ``eval_command`` may run by default (SWE-bench's harness: 1800).
DEFAULT_EVAL_TIMEOUT_S = 1800.0
STEP_TIMEOUT_S = 300.0

RESOLVED, UNRESOLVED, EMPTY_PATCH = "resolved", "unresolved", "empty_patch"
PATCH_FAILED, TIMEOUT, ERROR = "patch_failed", "timeout", "error"
EVAL_STATUSES = (RESOLVED, UNRESOLVED, EMPTY_PATCH, PATCH_FAILED, TIMEOUT, ERROR)


class EvalResult(BaseModel):
    """How one prediction fared."""

    instance_id: str
    status: str
    """One of ``EVAL_STATUSES``."""
    resolved: bool = False
    reward: float = 0.0
    """1.0 when resolved, else 0.0."""
    infra_failure: bool = False
    """The sandbox failed (did not start, died): no verdict; run it again."""
    error: str = ""
    apply_command: str = ""
    """The command that applied the patch."""
    returncode: int | None = None
    """``eval_command``'s exit status."""
    duration_s: float = 0.0
    report: dict[str, Any] = {}
    """SWE-bench's per-instance report (``report.json``)."""
    log: str = ""
    """SWE-bench-style ``test_output.txt``."""
    patch: str | None = None


def evaluate(task: Task, patch: str | None, env_config: dict[str, Any], *,
             timeout: float = DEFAULT_EVAL_TIMEOUT_S, cancel: Cancellation | None = None) -> EvalResult:
    """Apply ``patch`` in a fresh sandbox of ``task``, run its tests and grade them.

    Args:
        task: the task (image, workspace, cwd, setup_command, test_patch, eval_command, tests).
        patch: the prediction's diff; None or blank: an empty patch (no sandbox is started).
        env_config: the environment config (a dict with ``backend``).
        timeout: seconds for ``eval_command`` (a timeout is status ``timeout``, unresolved), unless
            the task sets its own ``eval_timeout``.
        cancel: closes the sandbox at once when cancelled.

    Returns:
        EvalResult: never raises for a sandbox failure (``infra_failure``) or a failed setup.

    Raises:
        KeyboardInterrupt: ``cancel`` was cancelled.
    """
    from swe_sandbox.batch.sandbox import SetupFailed, task_sandbox
    from swe_sandbox.errors import BackendUnavailable, SandboxError

    started = time.monotonic()
    timeout = task.eval_timeout or timeout
    if patch is None or not patch.strip():
        report = grading.instance_report(task.instance_id, patch, applied=False, resolved=False)
        return EvalResult(instance_id=task.instance_id, status=EMPTY_PATCH, report=report, patch=patch)
    try:
        with task_sandbox(task, env_config) as environment:
            if cancel is None:
                result = _run(environment, task, patch, timeout)
            else:
                with cancel.closing(environment):
                    result = _run(environment, task, patch, timeout)
    except SetupFailed as exc:
        result = _failed(task, patch, ERROR, str(exc))
    except (SandboxError, BackendUnavailable) as exc:
        if cancel is not None and cancel.cancelled:
            raise KeyboardInterrupt("batch cancelled") from None
        result = infra_failed(task, patch, f"{type(exc).__name__}: {exc}")
    result.duration_s = time.monotonic() - started
    return result


def infra_failed(task: Task, patch: str | None, error: str) -> EvalResult:
    """The result of an evaluation that had no verdict for an infrastructure reason (``error``):
    its sandbox did not start or died, or (Ray) its node was lost. It runs again."""
    result = _failed(task, patch, ERROR, error)
    result.infra_failure = True
    return result


def _failed(task: Task, patch: str | None, status: str, error: str, log: str = "") -> EvalResult:
    report = grading.instance_report(task.instance_id, patch, applied=False, resolved=False)
    return EvalResult(instance_id=task.instance_id, status=status, error=error, report=report, log=log, patch=patch)


def _run(environment: Environment, task: Task, patch: str, timeout: float) -> EvalResult:
    log: list[str] = []
    applied = _apply_model_patch(environment, patch, log)
    if applied is None:
        log.append(grading.APPLY_PATCH_FAIL)
        return _failed(task, patch, PATCH_FAILED, "the patch does not apply", "\n".join(log) + "\n")
    log.append(f"{grading.APPLY_PATCH_PASS} ({applied})")
    if task.test_patch.strip():
        result = _sh(environment, _write_file("test.patch", task.test_patch,
                                              then=f"git apply --verbose {PATCH_DIR}/test.patch"))
        log.append(result["output"])
        if result["returncode"] != 0:
            log.append(grading.TESTS_ERROR)
            return _failed(task, patch, ERROR, "test_patch does not apply", "\n".join(log) + "\n")
    result = _execute(environment, task.eval_command or "true", timeout)
    timed_out = bool(result["extra"].get("timed_out"))
    graded = grade(task, patch, result["output"], result["returncode"], timed_out)
    graded.apply_command, graded.returncode = applied, result["returncode"]
    graded.log = grading.test_log(result["output"], result["returncode"], timed_out, before="\n".join(log))
    return graded


def grade(task: Task, patch: str, output: str, returncode: int, timed_out: bool) -> EvalResult:
    """The verdict from ``eval_command``'s output and exit status (rules: ``swe_sandbox.batch.grading``).

    A timeout is status ``timeout`` (SWE-bench writes no report for it: an error there).
    """
    status_map = grading.LOG_PARSERS[task.log_parser](output)
    usable = not timed_out and (not task.has_tests or grading.usable_log(status_map, returncode))
    tests = None
    if usable and task.has_tests:
        tests = grading.tests_status(status_map, task.FAIL_TO_PASS, task.PASS_TO_PASS)
    resolved = usable and (grading.is_resolved(tests) if tests is not None else returncode == 0)
    status = TIMEOUT if timed_out else (RESOLVED if resolved else UNRESOLVED)
    report = grading.instance_report(task.instance_id, patch, applied=usable, resolved=resolved, status=tests)
    return EvalResult(instance_id=task.instance_id, status=status, resolved=resolved, reward=float(resolved),
                      report=report, patch=patch)


def _apply_model_patch(environment: Environment, patch: str, log: list[str]) -> str | None:
    """Apply ``patch`` with SWE-bench's chain; the command that worked, or None."""
    _sh(environment, _write_file("model.patch", patch), check=True)
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            _sh(environment, RESET_CMD)
        result = _sh(environment, f"{command} {PATCH_DIR}/model.patch")
        log.append(f"$ {command}\n{result['output'].rstrip()}")
        if result["returncode"] == 0:
            return command
    if _sh(environment, f"git apply --check --reverse {PATCH_DIR}/model.patch")["returncode"] == 0:
        return "already applied"
    return None


def _write_file(name: str, text: str, then: str = "") -> str:
    """A command writing ``text`` to ``PATCH_DIR/name`` exactly (base64 in a heredoc: any bytes,
    and a base64 line can never be the terminator), then running ``then`` if that worked."""
    encoded = base64.encodebytes(text.encode("utf-8", "surrogateescape")).decode("ascii")
    after = f" && {then}" if then else ""
    return f"mkdir -p {PATCH_DIR} && base64 -d > {PATCH_DIR}/{name} <<'EOF'{after}\n{encoded}EOF"


def _execute(environment: Environment, command: str, timeout: float) -> dict[str, Any]:
    """``execute``, where output that starts with the submission sentinel is just output."""
    from swe_sandbox.errors import Submitted

    try:
        return environment.execute({"command": command}, timeout=timeout)
    except Submitted as exc:
        return exc.result


def _sh(environment: Environment, command: str, *, check: bool = False) -> dict[str, Any]:
    result = _execute(environment, command, STEP_TIMEOUT_S)
    if check and result["returncode"] != 0:
        from swe_sandbox.errors import SandboxError

        raise SandboxError(f"evaluation step failed ({result['returncode']}): {result['output'][-300:]}")
    return result


def write_eval_files(result: EvalResult, directory: Path) -> None:
    """Write ``patch.diff``, ``test_output.txt`` and, for a graded prediction (resolved or
    unresolved), ``report.json`` into ``directory`` (created), each atomically. SWE-bench's names
    and rule: an instance without ``report.json`` (patch failed, timeout, error) is an error.
    A stale ``report.json`` of an earlier evaluation is removed."""
    from swe_sandbox.trajectory import atomic_write_text, to_json

    atomic_write_text(directory / "patch.diff", result.patch or "")
    atomic_write_text(directory / "test_output.txt", result.log)
    report = directory / "report.json"
    if result.status in (RESOLVED, UNRESOLVED):
        atomic_write_text(report, to_json(result.report, indent=2) + "\n")
    else:
        report.unlink(missing_ok=True)
