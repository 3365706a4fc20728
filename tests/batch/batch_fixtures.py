"""Shared fixtures of the batch tests: a tiny git project with a bug, task files, run configs.

The project (``calc.py``: ``add`` subtracts) is made once per session; tasks copy it into their
sandboxes with ``upload``, so the host directory is shared read-only by every test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.variants import require_backend

FIX = "sed -i 's/a - b/a + b/' calc.py"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
MARKER = "sleep 1.7531"  # a command no other process runs (found with pgrep after a kill)
#: A hidden test (``test_patch``) printing pytest ``-rA``-style lines; exits 1 when add is wrong.
CHECK = """from calc import add
import sys
ok = add(2, 3) == 5
print(("PASSED" if ok else "FAILED") + " check.py::test_add")
print(("PASSED" if add(0, 0) == 0 else "FAILED") + " check.py::test_zero")
sys.exit(0 if ok else 1)
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def new_file_patch(name: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("calc") / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return repo


@pytest.fixture(scope="session")
def fix_patch(calc_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The diff that fixes ``calc_repo`` (as the agent submits it)."""
    work = tmp_path_factory.mktemp("fix") / "calc"
    subprocess.run(["cp", "-a", str(calc_repo), str(work)], check=True)
    (work / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    return git(work, "diff")


def calc_task(instance_id: str, workspace: Path, **fields: Any) -> dict[str, Any]:
    """A task over ``workspace`` graded by its hidden ``check.py`` (FAIL_TO_PASS test_add, PASS_TO_PASS test_zero).

    ``check.py`` is not pytest (the sandboxes here have none): it prints pytest-style lines, which
    only SWE-bench's rules read (``grading: swebench``); the strict policy, which trusts no log
    line, is tested with real pytest in ``test_reward_hacking.py``."""
    return {"instance_id": instance_id, "problem_statement": "add() subtracts; make it add.", "grading": "swebench",
            "workspace": str(workspace), "test_patch": new_file_patch("check.py", CHECK), "eval_command": "python3 check.py",
            "FAIL_TO_PASS": ["check.py::test_add"], "PASS_TO_PASS": json.dumps(["check.py::test_zero"]), **fields}


def write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    """Write ``tasks`` to ``path`` as a user lays a task file out: a ``workspace`` outside the
    file's directory (a session fixture's repo) is copied beside it first and named relatively,
    since a workspace must lie under the task file's directory (``tasks.load_tasks``)."""
    tasks = [_beside(path.parent, t) for t in tasks]
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def _beside(directory: Path, task: dict[str, Any]) -> dict[str, Any]:
    workspace = task.get("workspace")
    if not workspace or not Path(workspace).is_absolute() or Path(workspace).resolve().is_relative_to(
            directory.resolve()):
        return task
    copy = directory / "workspaces" / str(task["instance_id"])
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(workspace), str(copy)], check=True)
    return {**task, "workspace": str(copy.relative_to(directory))}


def run_config(outputs: list[Any], **agent: Any) -> dict[str, Any]:
    from swe_sandbox.agent.config import load_run_config

    config = load_run_config()
    config["model"] = {"model_class": "deterministic", "outputs": outputs}
    config["agent"].update(agent)
    return config


@pytest.fixture
def bwrap_ok() -> None:
    require_backend("bwrap")


@pytest.fixture
def docker_ok() -> None:
    require_backend("docker")


def batch_argv(tasks: Path, out: Path, *extra: str) -> list[str]:
    outputs = json.dumps([FIX, MARKER, SUBMIT])
    return [sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "-o", str(out), "--env", "bwrap", "-w", "2",
            "-c", "model.model_class=deterministic", "-c", f"model.outputs={outputs}", *extra]


def run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def wait_for(predicate, within: float, every: float = 0.05) -> bool:
    """Whether ``predicate()`` became true within ``within`` seconds (polled every ``every``)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False
