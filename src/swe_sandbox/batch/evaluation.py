"""Evaluation: a prediction's patch applied and tested in a FRESH sandbox (DESIGN.md §7 and §9).

The sandbox is built from trusted inputs only: the task's image, a copy of its workspace, its
``setup_command``, and the patch as text; never the agent's sandbox (a command there may have
changed what later commands run). It has no network unless the task says so (``eval_network``).
The patch is hostile: a policy trained on the reward may have written it to game the grader.

Two grading policies (``GRADING_POLICIES``; the task's ``grading`` field, else the run's):

``strict`` (the default), each step a defence (README, "Rewards that hold"):

1. the patch is parsed on the host before anything is applied
   (``integrity.patch_policy.check_patch``): ``.git/``, absolute, outside and symlinked paths,
   symlinks, binary hunks and compiled files are refused (status ``patch_refused``, reward 0);
2. it is applied with SWE-bench's chain (``GIT_APPLY_CMDS``); what it changed beyond the paths it
   names, or in ``.git``, refuses it;
3. protected paths it touched (``protected.protected_paths``: the files ``test_patch`` touches,
   test directories, ``conftest.py``, test-runner configuration and shadows of the runner; the
   task's ``protected_paths``) are reset to HEAD, or (``on_protected: refuse``) refuse it; the
   verdict lists each dropped path and why;
4. ``test_patch`` is applied, then ``eval_command`` runs with the grader's pytest plugin loaded
   first (``integrity.outcomes``): outcomes are read from its authenticated records, never from
   the log, and a FAIL_TO_PASS test must PASS (an XFAIL or skip the code called for is not one).

A task with an ``eval_script`` (SWE-bench 5's shape, ``swe_sandbox.batch.swebench_instances``)
keeps steps 1 to 3 under ``strict``; then its script runs as the harness runs it (it checks the
test files out and applies ``test_patch`` itself: never a second time), and the ``swebench``
package grades the log (``get_eval_report``), as for any task whose ``log_parser`` is in its
registry.

``swebench``: SWE-bench's harness exactly (``run_evaluation.py``; documented as forgeable): the
chain, the files ``test_patch`` modifies checked out from HEAD, ``test_patch``, the log parsed.

Under both, a sandbox that dies while the patched code runs (out of memory, its runner killed
from inside) is the patch's outcome (``unresolved``, ``sandbox_died``), never an infrastructure
failure; and every verdict records the sha256 of the patch it graded. The log
(``test_output.txt``) uses SWE-bench's markers, so its tools read it too.
"""

from __future__ import annotations

import hashlib
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from swe_sandbox.batch import grading
from swe_sandbox.batch.integrity import outcomes, patch_policy, protected
from swe_sandbox.batch.integrity import sandbox_steps as steps
from swe_sandbox.batch.integrity.sandbox_steps import PATCH_DIR, sh, write_file
from swe_sandbox.batch.swebench_instances import PYTEST_LOG_PARSERS
from swe_sandbox.config import ALLOWLIST
from swe_sandbox.errors import (
    BackendUnavailable,
    ConnectionLost,
    EvaluationStepFailed,
    Outcome,
    SandboxDied,
    SandboxError,
    outcome_of,
)
from swe_sandbox.files import atomic_write_text, to_json

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from swe_sandbox.batch.control import Cancellation
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.base import Environment

#: SWE-bench's apply commands, in order (``swebench.harness.run_evaluation.GIT_APPLY_CMDS``).
GIT_APPLY_CMDS = ("git apply --verbose", "git apply --verbose --3way", "git apply --verbose --reject",
                  "patch --batch --forward --fuzz=5 -p1 -i")
RESET_CMD = "git checkout -- . ; git clean -fd"
GRADER_DIR = f"{PATCH_DIR}/grader"
#: Seconds ``eval_command`` may run by default (SWE-bench's harness: 1800).
DEFAULT_EVAL_TIMEOUT_S = 1800.0
STRICT, SWEBENCH = "strict", "swebench"
#: ``log_parser`` values whose tests run under pytest (ours, and swebench's pytest parsers): the
#: strict policy's plugin records them.
PYTEST_PARSERS = (grading.PYTEST_PARSER, *PYTEST_LOG_PARSERS)
GRADING_POLICIES = (STRICT, SWEBENCH)



class EvalStatus(StrEnum):
    """How an evaluation ended (strings: ``==`` and JSON as their values)."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    EMPTY_PATCH = "empty_patch"
    PATCH_FAILED = "patch_failed"
    PATCH_REFUSED = "patch_refused"
    TIMEOUT = "timeout"
    ERROR = "error"


RESOLVED, UNRESOLVED, EMPTY_PATCH = EvalStatus.RESOLVED, EvalStatus.UNRESOLVED, EvalStatus.EMPTY_PATCH
PATCH_FAILED, PATCH_REFUSED = EvalStatus.PATCH_FAILED, EvalStatus.PATCH_REFUSED
TIMEOUT, ERROR = EvalStatus.TIMEOUT, EvalStatus.ERROR
EVAL_STATUSES = tuple(EvalStatus)


#: The evaluation directory's file of the proxy's decisions per phase (``write_eval_files``).
NETWORK_FILE = "network.json"


class EvalResult(BaseModel):
    """How one prediction fared."""

    instance_id: str
    status: EvalStatus
    resolved: bool = False
    reward: float = 0.0
    """1.0 when resolved, else 0.0."""
    infra_failure: bool = False
    """The sandbox failed for a reason outside it (did not start, engine down, node lost): no
    verdict; run it again."""
    outcome: Outcome | None = None
    """Without a verdict, why (``errors.outcome_of`` of what stopped it: ``backend`` when this host
    cannot run the backend, ``sandbox``); None otherwise."""
    error: str = ""
    apply_command: str = ""
    """The command that applied the patch."""
    returncode: int | None = None
    """``eval_command``'s exit status."""
    duration_s: float = 0.0
    report: dict[str, Any] = {}
    """SWE-bench's per-instance report (``report.json``), with our ``grading`` entry."""
    log: str = ""
    """SWE-bench-style ``test_output.txt``."""
    patch: str | None = None
    grading: str = STRICT
    """The policy that graded it (``GRADING_POLICIES``)."""
    patch_sha256: str = ""
    """sha256 of the patch's UTF-8 bytes (empty: no patch)."""
    refused: list[str] = []
    """Why the policy refused the patch (status ``patch_refused``)."""
    dropped: list[dict[str, str]] = []
    """Protected paths the patch touched and the policy reset: ``{"path", "why"}``."""
    sandbox_died: bool = False
    """The sandbox died while the patched code ran: the patch's outcome (unresolved)."""
    network: dict[str, Any] = {}
    """What the allow-list proxy decided in each phase of the evaluation sandbox
    (``phases.PhaseLog.summary``: ``{"setup": {...}, "eval": {...}}``); empty: no sandbox."""


def patch_sha256(patch: str | None) -> str:
    """sha256 (hex) of ``patch``'s UTF-8 bytes; empty for None."""
    return "" if patch is None else hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()


def evaluate(task: Task, patch: str | None, env_config: dict[str, Any], *,
             timeout: float = DEFAULT_EVAL_TIMEOUT_S, cancel: Cancellation | None = None,
             grading_policy: str = STRICT) -> EvalResult:
    """Apply ``patch`` in a fresh sandbox of ``task``, run its tests and grade them.

    Args:
        task: the task (image, workspace, cwd, setup_command, test_patch, eval_command, tests).
        patch: the prediction's diff; None or blank: an empty patch (no sandbox is started).
        env_config: the environment config (a dict with ``backend``); its network is turned off
            unless the task's ``eval_network`` is ``on``.
        timeout: seconds for ``eval_command`` (a timeout is status ``timeout``, unresolved), unless
            the task sets its own ``eval_timeout``.
        cancel: closes the sandbox at once when cancelled.
        grading_policy: ``strict`` (default) or ``swebench`` (the module docstring); the task's
            ``grading`` field wins.

    Returns:
        EvalResult: never raises for a sandbox failure (``infra_failure``) or a failed setup.

    Raises:
        KeyboardInterrupt: ``cancel`` was cancelled.
    """
    started = time.monotonic()
    policy = task.grading or grading_policy
    result = _evaluate(task, patch, env_config, task.eval_timeout or timeout, cancel, policy)
    result.grading, result.patch_sha256 = policy, patch_sha256(patch)
    for entry in result.report.values():
        entry["grading"] = {"policy": policy, "patch_sha256": result.patch_sha256, "refused": result.refused,
                            "dropped": result.dropped, "sandbox_died": result.sandbox_died}
    result.duration_s = time.monotonic() - started
    return result


def _evaluate(task: Task, patch: str | None, env_config: dict[str, Any], timeout: float,
              cancel: Cancellation | None, policy: str) -> EvalResult:
    from swe_sandbox.batch.phases import EVAL, PhaseLog, sandbox_plan
    from swe_sandbox.batch.sandbox import SetupFailed, task_sandbox

    if patch is None or not patch.strip():
        report = grading.instance_report(task.instance_id, patch, applied=False, resolved=False)
        return EvalResult(instance_id=task.instance_id, status=EMPTY_PATCH, report=report, patch=patch)
    check = patch_policy.check_patch(patch, allow_binary=task.allow_binary, allow_compiled=task.allow_binary)
    if policy == STRICT and not check.allowed:
        return _refused(task, patch, check.refused)
    try:
        log = PhaseLog(sandbox_plan(task, env_config, EVAL))
        with task_sandbox(task, env_config, network_log=log) as environment:
            log.enter(environment)
            if cancel is None:
                return _logged(_run(environment, task, patch, timeout, policy, check), log)
            with cancel.closing(environment):
                result = _run(environment, task, patch, timeout, policy, check)
            if cancel.cancelled:  # its sandbox may have been closed under it: what it saw is no verdict
                raise KeyboardInterrupt("batch cancelled")
            return _logged(result, log)
    except SetupFailed as exc:
        return _failed(task, patch, ERROR, str(exc))
    except (SandboxError, BackendUnavailable) as exc:
        if cancel is not None and cancel.cancelled:
            raise KeyboardInterrupt("batch cancelled") from None
        failed = infra_failed(task, patch, f"{type(exc).__name__}: {exc}")
        failed.outcome = outcome_of(exc)
        return failed


def _logged(result: EvalResult, log: Any) -> EvalResult:
    """``result`` with ``log``'s summary (``phases.PhaseLog``) as its ``network``."""
    result.network = log.summary()
    return result


def infra_failed(task: Task, patch: str | None, error: str) -> EvalResult:
    """The result of an evaluation that had no verdict for an infrastructure reason (``error``):
    its sandbox did not start or the engine failed, or (Ray) its node was lost. It runs again."""
    result = _failed(task, patch, ERROR, error)
    result.infra_failure = True
    return result


def _failed(task: Task, patch: str | None, status: EvalStatus, error: str, log: str = "") -> EvalResult:
    report = grading.instance_report(task.instance_id, patch, applied=False, resolved=False)
    return EvalResult(instance_id=task.instance_id, status=status, error=error, report=report, log=log, patch=patch)


def _refused(task: Task, patch: str, refused: list[str], log: str = "") -> EvalResult:
    """The policy refused the patch: the patch's verdict (reward 0), not an error to retry."""
    result = _failed(task, patch, PATCH_REFUSED, "the grading policy refused the patch: " + "; ".join(refused[:5]),
                     log + f"{grading.APPLY_PATCH_FAIL} (refused by the grading policy)\n" +
                     "".join(f"refused: {r}\n" for r in refused))
    result.refused = refused
    return result


def _run(environment: Environment, task: Task, patch: str, timeout: float, policy: str,
         check: patch_policy.PatchCheck) -> EvalResult:
    """Grade ``patch`` in ``environment``. Once the patch is in the sandbox, a failed step or a
    death of the sandbox is the patch's outcome, unless the link or the engine failed."""
    log: list[str] = []
    try:
        return _grade_in(environment, task, patch, timeout, policy == STRICT, check, log)
    except EvaluationStepFailed as exc:
        return _failed(task, patch, PATCH_FAILED, str(exc), "\n".join(log[1:]) + "\n")
    except SandboxDied as exc:
        if not log or died_outside(exc, type(environment)):
            raise  # before the patch, the link or the engine: no verdict
        return _died(task, patch, exc, "\n".join(log[1:]))


def died_outside(exc: SandboxDied, backend: type[Environment]) -> bool:
    """Whether a sandbox's death is the infrastructure's (DESIGN.md §9): only the link was lost
    (``ConnectionLost``), or its backend no longer answers (``unavailable_reason``); any other
    death is what ran in it (out of memory, its runner killed from inside). The one rule for the
    evaluation's verdict and the agent's outcome (``rollouts.died_outcome``)."""
    return isinstance(exc, ConnectionLost) or backend.unavailable_reason() is not None


def _grade_in(environment: Environment, task: Task, patch: str, timeout: float, strict: bool,
              check: patch_policy.PatchCheck, log: list[str]) -> EvalResult:
    """``_run``'s steps; ``log`` gets a first entry once the patch is in the sandbox."""
    before = steps.tree_state(environment) if strict else None
    refused = steps.through_symlinks(environment, check.paths) if strict else []
    if refused:
        return _refused(task, patch, refused)
    log.append("the patch is in the sandbox")
    applied = _apply_model_patch(environment, patch, log)
    if applied is None:
        log.append(grading.APPLY_PATCH_FAIL)
        return _failed(task, patch, PATCH_FAILED, "the patch does not apply", "\n".join(log[1:]) + "\n")
    log.append(f"{grading.APPLY_PATCH_PASS} ({applied})")
    test_paths = patch_policy.check_patch(task.test_patch, allow_binary=True, allow_compiled=True).paths \
        if task.test_patch.strip() else []
    dropped: list[dict[str, str]] = []
    if before is not None:
        refused = steps.stray_changes(environment, check.paths, before)
        dropped, more = _protect(environment, task, check.paths, test_paths)
        if refused or more:
            return _refused(task, patch, refused + more, "\n".join(log[1:]) + "\n")
        log += [f"dropped {d['path']}: {d['why']}" for d in dropped]
    elif not task.eval_script:  # an eval_script checks the test files out itself
        steps.checkout_base(environment, test_paths)
    if task.eval_script:  # it applies test_patch itself: never a second time
        graded = _test_script(environment, task, patch, timeout, strict, "\n".join(log[1:]))
    else:
        graded = _test_patched(environment, task, patch, timeout, strict, log)
    graded.apply_command, graded.dropped = applied, dropped
    return graded


def _test_patched(environment: Environment, task: Task, patch: str, timeout: float, strict: bool,
                  log: list[str]) -> EvalResult:
    """Our own task format: apply ``test_patch``, then run ``eval_command`` and grade it."""
    if task.test_patch.strip():
        result = sh(environment, write_file("test.patch", task.test_patch,
                                            then=f"git apply --verbose {PATCH_DIR}/test.patch"))
        log.append(result["output"])
        if result["returncode"] != 0:
            log.append(grading.TESTS_ERROR)
            return _failed(task, patch, ERROR, "test_patch does not apply", "\n".join(log[1:]) + "\n")
    return _test(environment, task, patch, timeout, strict, "\n".join(log[1:]))


def _protect(environment: Environment, task: Task, paths: list[str],
             test_paths: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    """Reset (or refuse, ``on_protected: refuse``) the protected paths the patch touched."""
    patterns = protected.DEFAULT_PROTECTED if task.protected_paths is None else tuple(task.protected_paths)
    reasons = {p: "a protected path (test files, test-runner configuration or a shadow of the runner)"
               for p in protected.protected_paths(paths, patterns)}
    reasons.update({p: "a file test_patch touches (reset to the base before it, as SWE-bench does)"
                    for p in paths if p in set(test_paths)})
    reasons.update({p: f"a new module shadowing the standard library's {module.rsplit('/', 1)[-1]}"
                    for p, module in _new_shadows(environment, paths).items()})
    configs = [p for p in paths if p.rsplit("/", 1)[-1] in protected.RUNNER_CONFIG_FILES and p not in reasons]
    reasons.update({p: "changes the test runner's configuration" for p in steps.config_changes(environment, configs)})
    if task.on_protected == "refuse" and reasons:
        return [], [f"{p}: {why}" for p, why in sorted(reasons.items())]
    return steps.reset_protected(environment, sorted(reasons), reasons), []


def _new_shadows(environment: Environment, paths: list[str]) -> dict[str, str]:
    """``protected.stdlib_shadows`` of ``paths`` whose module the base commit does not have."""
    shadows = protected.stdlib_shadows(paths)
    roots = sorted(set(shadows.values()))
    absent = set(steps.absent_at_head(environment, roots + [f"{r}.py" for r in roots]))
    return {p: m for p, m in shadows.items() if m in absent and f"{m}.py" in absent}


def _test(environment: Environment, task: Task, patch: str, timeout: float, strict: bool,
          before: str) -> EvalResult:
    """Run ``eval_command`` (strict: under the grader's plugin) and grade it."""
    plugin = outcomes.new_plugin() if strict and task.log_parser in PYTEST_PARSERS else None
    prefix = _install_plugin(environment, plugin)
    result = steps.execute(environment, prefix + (task.eval_command or "true"), timeout)
    records = _read_records(environment, plugin)
    timed_out = bool(result["extra"].get("timed_out"))
    log = grading.test_log(result["output"], result["returncode"], timed_out, before=before)
    if task.graded_by_swebench:
        graded = _proven(grade_swebench(task, patch, log, timed_out), task, plugin, records, timed_out)
    elif plugin is not None:
        graded = grade_outcomes(task, patch, outcomes.verify(records, plugin.key), timed_out)
    else:
        graded = grade(task, patch, result["output"], result["returncode"], timed_out)
    graded.returncode, graded.log = result["returncode"], log
    return graded


def _test_script(environment: Environment, task: Task, patch: str, timeout: float, strict: bool,
                 before: str) -> EvalResult:
    """Run the task's ``eval_script`` as SWE-bench's harness does and grade its log with the
    ``swebench`` package; the exit code recorded is the test command's, as the harness records it.
    Strict, with one of swebench's pytest parsers: the script runs under the grader's plugin too,
    and a verdict of resolved also needs its records to prove it (``grade_outcomes``)."""
    from swe_sandbox.batch import swebench_instances as swe

    plugin = outcomes.new_plugin() if strict and task.log_parser in PYTEST_PARSERS else None
    result = swe.run_eval_script(environment, task, timeout, prefix=_install_plugin(environment, plugin))
    records = _read_records(environment, plugin)
    timed_out = bool(result["extra"].get("timed_out"))
    log = swe.harness_log(before, result["output"], timed_out, timeout)
    graded = _proven(grade_swebench(task, patch, log, timed_out), task, plugin, records, timed_out)
    graded.returncode, graded.log = swe.test_exit_code(log), log
    return graded


def _proven(graded: EvalResult, task: Task, plugin: outcomes.PluginFiles | None, records: str,
            timed_out: bool) -> EvalResult:
    """The swebench package's verdict on the log, kept resolved only when the grader's records
    (strict, a pytest parser: ``plugin``) prove it too; else made unresolved, saying why."""
    if plugin is None or not graded.resolved:
        return graded
    judged = task if task.eval_type != "fail_only" else task.model_copy(update={"PASS_TO_PASS": []})
    proof = grade_outcomes(judged, graded.patch or "", outcomes.verify(records, plugin.key), timed_out)
    if proof.resolved:
        return graded
    for entry in graded.report.values():
        entry["resolved"] = False
    graded.status, graded.resolved, graded.reward = UNRESOLVED, False, 0.0
    failing = [t for kind in (grading.FAIL_TO_PASS, grading.PASS_TO_PASS)
               for t in ((proof.report.get(graded.instance_id) or {}).get("tests_status") or {}).get(kind, {}).get("failure", [])]
    graded.error = proof.error or ("the grader's records show these tests not passing: " + ", ".join(failing[:10]))
    return graded


def _install_plugin(environment: Environment, plugin: outcomes.PluginFiles | None) -> str:
    """Write ``plugin`` into the sandbox; the ``export`` prefix that loads it ("" for None)."""
    if plugin is None:
        return ""
    sh(environment, write_file(f"{plugin.module}.py", plugin.source, directory=GRADER_DIR) + "\n" +
       write_file(f"{plugin.module}.key", plugin.key, directory=GRADER_DIR), check=True)
    return outcomes.plugin_env(plugin, GRADER_DIR)


def _read_records(environment: Environment, plugin: outcomes.PluginFiles | None) -> str:
    return sh(environment, outcomes.read_command(plugin, GRADER_DIR))["output"] if plugin is not None else ""


def grade_swebench(task: Task, patch: str, log: str, timed_out: bool) -> EvalResult:
    """The verdict of the ``swebench`` package on ``log`` (``get_eval_report``: the task's parser,
    ``eval_type`` and the FAIL_TO_PASS / PASS_TO_PASS rules); the report is its own. A timeout is
    status ``timeout`` (the harness writes no report for it)."""
    from swe_sandbox.batch import swebench_instances as swe

    report = swe.grade_log(task, patch, log)
    resolved = not timed_out and bool(report[task.instance_id]["resolved"])
    status = TIMEOUT if timed_out else (RESOLVED if resolved else UNRESOLVED)
    return EvalResult(instance_id=task.instance_id, status=status, resolved=resolved, reward=float(resolved),
                      report=report, patch=patch)


def _died(task: Task, patch: str, exc: SandboxDied, before: str) -> EvalResult:
    why = f"the sandbox died while the tests ran (the patch's outcome, not retried): {exc}"
    report = grading.instance_report(task.instance_id, patch, applied=True, resolved=False)
    return EvalResult(instance_id=task.instance_id, status=UNRESOLVED, error=why, report=report, patch=patch,
                      sandbox_died=True, log=grading.test_log(why, None, False, before=before))


def grade(task: Task, patch: str, output: str, returncode: int, timed_out: bool) -> EvalResult:
    """The verdict from ``eval_command``'s output and exit status, SWE-bench's way (rules:
    ``swe_sandbox.batch.grading``). A timeout is status ``timeout`` (SWE-bench writes no report for
    it: an error there)."""
    status_map = grading.LOG_PARSERS[task.log_parser](output)
    usable = not timed_out and (not task.has_tests or grading.usable_log(status_map, returncode))
    tests = None
    if usable and task.has_tests:
        tests = grading.tests_status(status_map, task.FAIL_TO_PASS, task.PASS_TO_PASS)
    return _verdict(task, patch, usable, tests, timed_out, returncode == 0)


def grade_outcomes(task: Task, patch: str, found: outcomes.Outcomes, timed_out: bool) -> EvalResult:
    """The strict verdict from the grader plugin's verified records (``integrity.outcomes``)."""
    usable = not timed_out and found.usable
    tests = None
    if usable:
        tests = grading.tests_status(found.status_map, task.FAIL_TO_PASS, task.PASS_TO_PASS,
                                     f2p_passes=outcomes.F2P_PASSES, p2p_passes=outcomes.P2P_PASSES)
    result = _verdict(task, patch, usable, tests, timed_out, found.exitstatus == 0)
    if found.problems and not timed_out:
        result.error = "the test outcomes prove nothing: " + "; ".join(found.problems)
    return result


def _verdict(task: Task, patch: str, usable: bool, tests: dict[str, Any] | None, timed_out: bool,
             succeeded: bool) -> EvalResult:
    resolved = usable and (grading.is_resolved(tests) if tests is not None else succeeded)
    status = TIMEOUT if timed_out else (RESOLVED if resolved else UNRESOLVED)
    report = grading.instance_report(task.instance_id, patch, applied=usable, resolved=resolved, status=tests)
    return EvalResult(instance_id=task.instance_id, status=status, resolved=resolved, reward=float(resolved),
                      report=report, patch=patch)


def _apply_model_patch(environment: Environment, patch: str, log: list[str]) -> str | None:
    """Apply ``patch`` with SWE-bench's chain; the command that worked, or None."""
    sh(environment, write_file("model.patch", patch), check=True)
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            sh(environment, RESET_CMD)
        result = sh(environment, f"{command} {PATCH_DIR}/model.patch")
        log.append(f"$ {command}\n{result['output'].rstrip()}")
        if result["returncode"] == 0:
            return command
    if sh(environment, f"git apply --check --reverse {PATCH_DIR}/model.patch")["returncode"] == 0:
        return "already applied"
    return None


def write_eval_files(result: EvalResult, directory: Path) -> None:
    """Write ``patch.diff``, ``test_output.txt`` and, for a graded prediction (resolved or
    unresolved), ``report.json`` into ``directory`` (created), each atomically. SWE-bench's names
    and rule: an instance without ``report.json`` (patch failed, timeout, error) is an error.
    A stale ``report.json`` of an earlier evaluation is removed. ``NETWORK_FILE``: what the
    allow-list proxy decided in each phase (``EvalResult.network``), when the sandbox had a proxy."""

    atomic_write_text(directory / "patch.diff", result.patch or "")
    atomic_write_text(directory / "test_output.txt", result.log)
    if any(phase.get("decisions") or phase.get("network") == ALLOWLIST for phase in result.network.values()):
        atomic_write_text(directory / NETWORK_FILE, to_json(result.network, indent=2) + "\n")
    report = directory / "report.json"
    if result.status in (RESOLVED, UNRESOLVED):
        atomic_write_text(report, to_json(result.report, indent=2) + "\n")
    else:
        report.unlink(missing_ok=True)
