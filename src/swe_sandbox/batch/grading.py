"""Grading: test outcomes read from an eval log, resolution, and SWE-bench's report shapes.

The rules are SWE-bench's (``swebench.harness.grading`` and ``swebench.harness.reporting``,
swebench 5.x), re-implemented here because that package pulls in docker, datasets and modal at
import; ``tests/batch/test_grading_swebench.py`` checks that both compute the same reports from the
same logs:

- pytest ``-rA`` lines: a line starting with ``PASSED``, ``FAILED``, ``SKIPPED``, ``ERROR`` or
  ``XFAIL`` names a test (``FAILED name - message``: the name is the second word); ``SKIPPED [N]
  file:line`` summaries are not tests.
- FAIL_TO_PASS test: passes when ``PASSED`` or ``XFAIL``; PASS_TO_PASS test: also when
  ``SKIPPED``. A test absent from the log fails. A truncated parametrized name (more ``[`` than
  ``]``) matches the test names it starts, when they agree on pass or fail.
- The log is not usable (the instance is unresolved) when no test outcome was found, or when the
  command exited non-zero although no test failed (the log does not describe the run).
- Resolved: every FAIL_TO_PASS and every PASS_TO_PASS test passes (SWE-bench's ``RESOLVED_FULL``).

With ``log_parser: exit_status`` (and no test lists), resolved means the command exited 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

PYTEST_PARSER = "pytest"
EXIT_STATUS_PARSER = "exit_status"


class TestStatus(StrEnum):
    """A test's status in a log (SWE-bench's ``TestStatus``; strings: ``==`` and JSON as their values)."""

    __test__ = False  # not a pytest test class

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


PASSED, FAILED, SKIPPED = TestStatus.PASSED, TestStatus.FAILED, TestStatus.SKIPPED
ERROR, XFAIL = TestStatus.ERROR, TestStatus.XFAIL
STATUSES = tuple(TestStatus)
FAIL_TO_PASS, PASS_TO_PASS = "FAIL_TO_PASS", "PASS_TO_PASS"

# SWE-bench's log markers (swebench.harness.constants), so its tools read our eval logs.
APPLY_PATCH_PASS = ">>>>> Applied Patch"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
TESTS_ERROR = ">>>>> Tests Errored"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"


def test_log(output: str, returncode: int | None, timed_out: bool, before: str = "") -> str:
    """SWE-bench's ``test_output.txt`` layout: ``before`` (the patch steps), the test output
    between the start and end markers, the exit code line, and the timeout marker if it timed out."""
    lines = [before.rstrip("\n")] if before else []
    lines += [START_TEST_OUTPUT, output.rstrip("\n"), END_TEST_OUTPUT, f"{TEST_EXIT_CODE}: {returncode}"]
    if timed_out:
        lines.append(TESTS_TIMEOUT)
    return "\n".join(lines) + "\n"


def parse_pytest(log: str) -> dict[str, str]:
    """``{test name: status}`` from pytest ``-rA`` summary lines (SWE-bench's ``parse_log_pytest``)."""
    status_map: dict[str, str] = {}
    for line in log.split("\n"):
        if not line.startswith(STATUSES):
            continue
        if line.startswith(FAILED):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) <= 1:
            continue
        if words[0] == SKIPPED and words[1].startswith("[") and words[1].endswith("]") and words[1][1:-1].isdigit():
            continue  # "SKIPPED [2] tests/x.py:10: reason": a summary, not a test
        status_map[words[1]] = words[0]
    return status_map


def parse_exit_status(log: str) -> dict[str, str]:
    """No test names: resolution is the command's exit status."""
    return {}


LOG_PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    PYTEST_PARSER: parse_pytest,
    EXIT_STATUS_PARSER: parse_exit_status,
}


def _resolve_case(case: str, status_map: dict[str, str]) -> str | None:
    if case in status_map:
        return case
    if case.count("[") > case.count("]"):  # a truncated parametrized id (SWE-bench issue #290)
        matches = [k for k in status_map if k.startswith(case)]
        if matches and len({status_map[k] in (PASSED, XFAIL) for k in matches}) == 1:
            return matches[0]
    return None


#: Statuses that pass a FAIL_TO_PASS / a PASS_TO_PASS test (SWE-bench's ``test_passed``, ``test_failed``).
F2P_PASSES = frozenset({PASSED, XFAIL})
P2P_PASSES = frozenset({PASSED, XFAIL, SKIPPED})


def test_passed(case: str, status_map: dict[str, str], *, skipped_ok: bool = False,
                passes: frozenset[str] | None = None) -> bool:
    """Whether ``case`` passed: its status is one of ``passes`` (default: ``P2P_PASSES`` with
    ``skipped_ok``, as for PASS_TO_PASS, else ``F2P_PASSES``)."""
    key = _resolve_case(case, status_map)
    allowed = passes if passes is not None else (P2P_PASSES if skipped_ok else F2P_PASSES)
    return key is not None and status_map[key] in allowed


def usable_log(status_map: dict[str, str], returncode: int | None) -> bool:
    """SWE-bench's checks that a parsed log describes a real run (see the module docstring)."""
    if not status_map:
        return False
    failed = any(status in (FAILED, ERROR) for status in status_map.values())
    return returncode in (None, 0) or failed


def tests_status(status_map: dict[str, str], fail_to_pass: Iterable[str], pass_to_pass: Iterable[str], *,
                 f2p_passes: frozenset[str] = F2P_PASSES,
                 p2p_passes: frozenset[str] = P2P_PASSES) -> dict[str, dict[str, list[str]]]:
    """SWE-bench's ``tests_status``: success and failure lists of both kinds (and the empty
    FAIL_TO_FAIL / PASS_TO_FAIL it always reports). ``f2p_passes`` / ``p2p_passes``: the statuses
    that count as a pass (SWE-bench's by default; the strict policy's are narrower)."""
    report: dict[str, dict[str, list[str]]] = {}
    for kind, tests, passes in ((FAIL_TO_PASS, fail_to_pass, f2p_passes), (PASS_TO_PASS, pass_to_pass, p2p_passes)):
        success = [t for t in tests if test_passed(t, status_map, passes=passes)]
        report[kind] = {"success": success, "failure": [t for t in tests if t not in success]}
    report["FAIL_TO_FAIL"] = {"success": [], "failure": []}
    report["PASS_TO_FAIL"] = {"success": [], "failure": []}
    return report


def is_resolved(report: dict[str, dict[str, list[str]]]) -> bool:
    """Every FAIL_TO_PASS and PASS_TO_PASS test succeeded (SWE-bench's ``RESOLVED_FULL``)."""
    return not report[FAIL_TO_PASS]["failure"] and not report[PASS_TO_PASS]["failure"]


def instance_report(instance_id: str, patch: str | None, *, applied: bool, resolved: bool,
                    status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The per-instance ``report.json`` (``swebench.harness.grading.get_eval_report``'s shape)."""
    entry: dict[str, Any] = {"patch_is_None": patch is None, "patch_exists": patch is not None,
                             "patch_successfully_applied": applied, "resolved": resolved, "infra_failure": False}
    if status is not None:
        entry["tests_status"] = status
    return {instance_id: entry}


def run_report(instance_ids: Iterable[str], predictions: dict[str, dict[str, Any]],
               outcomes: dict[str, str]) -> dict[str, Any]:
    """``report.json`` of a run with SWE-bench's keys (``make_run_report``, schema 2), plus ours.

    Args:
        instance_ids: every instance of the task file.
        predictions: ``{instance_id: prediction}`` of those that have one.
        outcomes: ``{instance_id: eval_status}`` of evaluated ones (``resolved``, ``unresolved``,
            ``timeout``, ``patch_failed``, ``patch_refused``, ``error``; ``empty_patch`` ones need not be listed).

    SWE-bench's buckets: no prediction = incomplete; empty patch; graded (a per-instance report)
    = completed, and resolved or unresolved; anything else (the patch did not apply, the tests
    timed out, the evaluation failed or has not run) = error. Ours on top, subsets of
    ``error_ids``: ``patch_failed_ids``, ``patch_refused_ids`` (the grading policy refused the
    patch) and ``eval_timeout_ids``.
    """
    ids = list(instance_ids)
    empty = {i for i in ids if i in predictions and predictions[i].get("model_patch") in ("", None)}
    evaluated = {i for i in ids if i in predictions and i not in empty}
    resolved = {i for i in evaluated if outcomes.get(i) == "resolved"}
    unresolved = {i for i in evaluated if outcomes.get(i) == "unresolved"}
    error = evaluated - resolved - unresolved
    buckets = {"completed": resolved | unresolved, "resolved": resolved, "unresolved": unresolved,
               "empty_patch": empty, "error": error, "incomplete": set(ids) - set(predictions)}
    report: dict[str, Any] = {"total_instances": len(ids), "submitted_instances": len(predictions)}
    report.update({f"{name}_instances": len(buckets[name]) for name in
                   ("completed", "resolved", "unresolved", "empty_patch", "error")})
    report.update({f"{name}_ids": sorted(buckets[name]) for name in
                   ("completed", "incomplete", "empty_patch")})
    report["submitted_ids"] = sorted(predictions)
    report.update({f"{name}_ids": sorted(buckets[name]) for name in ("resolved", "unresolved", "error")})
    report["patch_failed_ids"] = sorted(i for i in error if outcomes.get(i) == "patch_failed")
    report["patch_refused_ids"] = sorted(i for i in error if outcomes.get(i) == "patch_refused")
    report["eval_timeout_ids"] = sorted(i for i in error if outcomes.get(i) == "timeout")
    report["schema_version"] = 2
    return report
