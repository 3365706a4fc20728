"""SWE-bench instances as they are published, graded by the ``swebench`` package itself.

A SWE-bench 5 instance carries its own ``eval_script`` (it checks out the test files, applies
``test_patch`` and prints the markers), a ``log_parser`` named in swebench's ``PARSER_REGISTRY``
and an ``eval_type``. The evaluation runs the script as the official harness does (the
``TestSpec``'s ``eval_script``, which records the test command's exit code after the end
marker), and the verdict is ``swebench.harness.grading.get_eval_report`` on our
``test_output.txt``: the field's own code, not a copy of it.

An older export (swebench 4.x shape: ``repo`` and ``version``, no ``eval_script``) is refused at
load time, naming the missing fields: swebench 5 (the version this project supports) no longer
ships the per-repo specs that built such scripts, and running nothing would grade every
instance unresolved in silence.

``swebench`` is an optional extra (``pip install 'swe-sandbox[swebench]'``): its import takes
about a second and pulls docker, datasets and modal, so it is imported here only, and only when
a task names one of its parsers or has to be graded by it.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from swe_sandbox.batch.swebench_registry import import_swebench as _import

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.tasks import Task

#: swebench's parsers of pytest logs (``PARSER_REGISTRY`` names): their tests run under pytest, so
#: the strict policy also loads its plugin into the eval script's pytest.
PYTEST_LOG_PARSERS = ("parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2")
#: swebench's ``EvalType`` values (``swebench.harness.constants.EvalType``).
EVAL_TYPES = ("pass_and_fail", "fail_only")
#: The harness's line after a timeout (``run_evaluation.run_instance``).
TIMEOUT_LINE = "\n\nTimeout error: {timeout} seconds exceeded."


def instance_dict(task: Task) -> dict[str, Any]:
    """The task as the SWE-bench instance dict ``make_test_spec`` reads (its extra fields kept)."""
    extra = dict(task.model_extra or {})
    return {**extra, "instance_id": task.instance_id, "image": task.image or "", "repo": extra.get("repo", ""),
            "version": str(extra.get("version", "")), "FAIL_TO_PASS": list(task.FAIL_TO_PASS),
            "PASS_TO_PASS": list(task.PASS_TO_PASS), "log_parser": task.log_parser,
            "eval_type": task.eval_type or EVAL_TYPES[0], "eval_script": task.eval_script,
            "test_patch": task.test_patch, "problem_statement": task.problem_statement}


def test_spec(task: Task) -> Any:
    """swebench's ``TestSpec`` of ``task`` (``swebench.harness.utils.make_test_spec``)."""
    utils = _import("swebench.harness.utils", f"task {task.instance_id!r}")
    return utils.make_test_spec(instance_dict(task))


def harness_eval_script(task: Task) -> str:
    """The script the harness runs for ``task`` (``TestSpec.eval_script``: the instance's own,
    with the test command's exit code recorded after the end marker)."""
    return str(test_spec(task).eval_script)


def grade_log(task: Task, patch: str | None, log: str) -> dict[str, Any]:
    """``get_eval_report(test_spec, prediction, log, include_tests_status=True)`` on ``log``.

    Returns:
        dict: ``{instance_id: entry}``, the package's per-instance report exactly.
    """
    grading = _import("swebench.harness.grading", f"task {task.instance_id!r}")
    prediction = {"instance_id": task.instance_id, "model_name_or_path": "swe-sandbox", "model_patch": patch}
    handle, path = tempfile.mkstemp(prefix="swe-sandbox-test-output-", suffix=".txt")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="surrogateescape") as file:
            file.write(log)
        return dict(grading.get_eval_report(test_spec(task), prediction, path, include_tests_status=True))
    finally:
        os.unlink(path)


def test_exit_code(log: str) -> int | None:
    """The test command's exit code the eval script recorded (``parse_test_exit_code``)."""
    grading = _import("swebench.harness.grading", "reading a test exit code")
    code = grading.parse_test_exit_code(log)
    return None if code is None else int(code)


#: Where the eval script is written in the sandbox (the harness's ``/eval.sh``; ours is not at
#: the root, which the sandbox's user may not write).
EVAL_SCRIPT_NAME = "eval.sh"


def run_eval_script(environment: Any, task: Task, timeout: float, prefix: str = "") -> dict[str, Any]:
    """Write the harness's eval script into the sandbox and run it (``/bin/bash`` on the file,
    as the harness runs ``/eval.sh``) for at most ``timeout`` seconds, after ``prefix`` (shell
    ``export`` lines: the strict policy's plugin).

    Returns:
        dict: ``execute``'s result (``output``, ``returncode``: the script's, ``extra``).
    """
    from swe_sandbox.batch.integrity.sandbox_steps import PATCH_DIR, execute, sh, write_file

    sh(environment, write_file(EVAL_SCRIPT_NAME, harness_eval_script(task)), check=True)
    return execute(environment, f"{prefix}/bin/bash {PATCH_DIR}/{EVAL_SCRIPT_NAME}", timeout)


def harness_log(before: str, output: str, timed_out: bool, timeout: float) -> str:
    """``test_output.txt`` as the harness writes it: the eval script's output as it came (its
    markers and the exit code line are the script's own), after ``before`` (the patch steps);
    after a timeout, the harness's timeout line and SWE-bench's timeout marker."""
    from swe_sandbox.batch.grading import TESTS_TIMEOUT

    head = before.rstrip("\n") + "\n" if before.strip() else ""
    tail = TIMEOUT_LINE.format(timeout=int(timeout)) + f"\n{TESTS_TIMEOUT}\n" if timed_out else ""
    return head + output + tail
