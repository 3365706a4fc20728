"""What ``run`` reads from its command line: the task, and the default output path.

The checks made before anything runs (output path, model and environment configs, a usable
backend) are ``swe_sandbox.preflight``.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

DEFAULT_RUNS_DIR = "swe-sandbox-runs"


def read_task(task: str | None, task_file: Path | None) -> str:
    """The task from ``-t`` or ``--task-file`` (exactly one).

    Raises:
        typer.BadParameter: neither or both given, an unreadable file, or an empty task.
    """
    if (task is None) == (task_file is None):
        raise typer.BadParameter("give the task with exactly one of -t/--task and --task-file", param_hint="'--task'")
    if task_file is not None:
        try:
            task = task_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {task_file}: {exc}", param_hint="'--task-file'") from None
    if not task or not task.strip():
        raise typer.BadParameter("the task is empty", param_hint="'--task'")
    return task.strip()


def default_output_path() -> Path:
    """``./swe-sandbox-runs/run-YYYYmmdd-HHMMSS.traj.json`` (a new name each second)."""
    return Path(DEFAULT_RUNS_DIR) / time.strftime("run-%Y%m%d-%H%M%S.traj.json")
