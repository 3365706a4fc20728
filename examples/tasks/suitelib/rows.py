"""The task files the build writes: SWE-bench-style rows (DESIGN.md §7's fields), two variants.

- ``tasks.jsonl``: for docker/podman, as SWE-bench ships instances: ``image_name`` (the task's
  image, the repository at ``/testbed``), ``cwd: /testbed``, no workspace;
- ``tasks-workspace.jsonl``: for backends without images (bwrap): ``workspace`` (the same
  repository, copied in), ``cwd: /testbed``; run it with ``--env <build>/bwrap.yaml``, which
  mounts the workspace at ``/testbed`` and shows the copied pytest read-only (``PYTHONPATH``).

Both carry SWE-bench's own fields too: ``repo``, ``version``, ``base_commit``, ``patch`` (the gold
fix, never shown to the agent, as ``test_patch``), ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (JSON
strings, as SWE-bench stores them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from suitelib.images import TESTBED, task_image
from suitelib.spec import Project, TaskSpec
from suitelib.testruns import eval_command
from suitelib.workspace import BuiltTask

IMAGE_TASKS = "tasks.jsonl"
WORKSPACE_TASKS = "tasks-workspace.jsonl"
BWRAP_ENV = "bwrap.yaml"
WORKSPACES = "workspaces"
SOLUTIONS = "solutions"
TOOLS = "tools"


def row(spec: TaskSpec, project: Project, built: BuiltTask, version: str) -> dict[str, Any]:
    """The fields both variants share."""
    return {"instance_id": spec.instance_id, "repo": project.repo, "version": version,
            "base_commit": built.commit, "problem_statement": spec.problem_statement.strip() + "\n",
            "cwd": TESTBED, "test_patch": built.test_patch, "patch": built.patch,
            "eval_command": eval_command(project.pytest_args, built.tests),
            "FAIL_TO_PASS": json.dumps(built.fail_to_pass), "PASS_TO_PASS": json.dumps(built.pass_to_pass)}


def write_task_files(out: Path, rows: list[dict[str, Any]]) -> None:
    """Write both task files into ``out``."""
    image_rows = [{**r, "image_name": task_image(r["instance_id"])} for r in rows]
    workspace_rows = [{**r, "workspace": f"{WORKSPACES}/{r['instance_id']}"} for r in rows]
    for name, items in ((IMAGE_TASKS, image_rows), (WORKSPACE_TASKS, workspace_rows)):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")


def write_bwrap_env(out: Path, tools: Path) -> None:
    """The bwrap environment of ``tasks-workspace.jsonl``: the workspace at ``/testbed``, the
    copied pytest ``tools`` (an absolute host path any user can reach) bound read-only."""
    import yaml

    env = {"backend": "bwrap", "mount_point": TESTBED, "ro_binds": [str(tools)], "env": {"PYTHONPATH": str(tools)}}
    (out / BWRAP_ENV).write_text(yaml.safe_dump(env, sort_keys=False), encoding="utf-8")
