"""Running a task's tests on the host, as the sandboxes run them, to find FAIL_TO_PASS / PASS_TO_PASS.

The host's interpreter runs with ``-I -S`` (no site-packages, no user site, no environment), so
the only packages it sees are the copied pytest (``tools``) and the repository itself: the same
two things a sandbox's ``python3 -m pytest`` sees. Outcomes are read with the evaluation's own
parser (``swe_sandbox.batch.grading.parse_pytest``), so names match what grading looks up.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from swe_sandbox.batch.grading import PASSED, parse_pytest

#: Seconds one test run may take at build time.
RUN_TIMEOUT_S = 600
BOOT = ("import sys; sys.path[:0] = [sys.argv.pop(1), '']; import pytest; "
        "raise SystemExit(pytest.main(sys.argv[1:]))")


def eval_command(pytest_args: list[str], tests: list[str]) -> str:
    """The command a sandbox runs: ``python3 -m pytest ARGS TESTS``."""
    return shlex.join(["python3", "-m", "pytest", *pytest_args, *tests])


def run_tests(repo: Path, tools: Path, pytest_args: list[str], tests: list[str]) -> dict[str, str]:
    """``{test name: status}`` of one run in ``repo`` (status as pytest's ``-rA`` lines say).

    Raises:
        RuntimeError: no test outcome at all (the files are wrong, or collection failed).
    """
    argv = [sys.executable, "-I", "-S", "-B", "-c", BOOT, str(tools), *pytest_args, *tests]
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    statuses = parse_pytest(done.stdout)
    if not statuses:
        raise RuntimeError(f"no test outcome in {repo} for {tests}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return statuses


def split_tests(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str]]:
    """``(FAIL_TO_PASS, PASS_TO_PASS)``: tests that pass without the bug and fail (or vanish)
    with it; tests that pass either way. Sorted."""
    passing = {name for name, status in before.items() if status == PASSED}
    fail_to_pass = sorted(n for n in passing if after.get(n) != PASSED)
    pass_to_pass = sorted(n for n in passing if after.get(n) == PASSED)
    return fail_to_pass, pass_to_pass
