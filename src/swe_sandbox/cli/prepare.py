"""What ``run``, ``batch``, ``eval`` and ``image pull`` check before anything runs: the task, the
output path, the model and environment configs, a usable backend.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

DEFAULT_RUNS_DIR = "swe-sandbox-runs"
LOCAL_HINT = " (or run with --env local: NO isolation, commands run on this machine as you)"


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


def submission_path(trajectory: Path) -> Path:
    """Where the submission is saved: beside the trajectory, ``NAME.submission.txt``."""
    name = trajectory.name
    for suffix in (".traj.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trajectory.with_name(name + ".submission.txt")


def check_output_path(path: Path) -> None:
    """Raise ``ConfigError`` unless the trajectory (and the submission beside it) can be written
    at ``path``: not a directory, its directory exists or can be created, and is writable.
    Checked before anything runs, so a bad ``-o`` costs no model call."""
    from swe_sandbox.errors import ConfigError

    for target in (path, submission_path(path)):
        if target.is_dir():
            raise ConfigError(f"--output: {target} is a directory; give a file name, e.g. "
                              f"{target / 'run.traj.json'}")
    from swe_sandbox.batch.records import output_directory

    output_directory(path.parent)


def check_model_config(model: dict[str, Any]) -> None:
    """Raise ``ConfigError`` when a provider model has no name (the usual mistake: no ``-m``)."""
    from swe_sandbox.errors import ConfigError

    if model.get("model_class", "litellm") in ("litellm", "litellm_text") and not model.get("model_name"):
        raise ConfigError("model.model_name: missing; pass -m/--model (e.g. -m anthropic/claude-sonnet-4-5)")


def environment_config(env_spec: str, section: dict[str, Any]) -> dict[str, Any]:
    """The preset or file ``env_spec``, with the run config's ``environment`` fields on top."""
    from swe_sandbox.config import load_environment_config
    from swe_sandbox.trajectory import recursive_merge

    section = {k: v for k, v in section.items() if k != "backend"}
    return recursive_merge(load_environment_config(env_spec), section)


def require_usable(backend: str) -> None:
    """Raise ``BackendUnavailable`` (with a hint) when ``backend`` cannot run here."""
    from swe_sandbox.environments import environment_class
    from swe_sandbox.errors import BackendUnavailable

    reason = environment_class(backend).unavailable_reason()
    if reason:
        hint = "" if backend == "local" else LOCAL_HINT
        raise BackendUnavailable(f"{backend}: {reason}{hint}")


def prepare_run(config: dict[str, Any], env_spec: str, output: Path) -> tuple[Any, dict[str, Any]]:
    """Check a run's config before anything runs, then make its model.

    Returns:
        tuple: ``(model, environment config)``: the model made from ``config["model"]``; the
        environment config (``env_spec`` with the run config's ``environment`` on top).

    Raises:
        ConfigError: an invalid ``agent``/``model``/``environment`` section, or an unusable ``output``.
        BackendUnavailable: the backend cannot run here.
    """
    from swe_sandbox.agent.default import AgentConfig
    from swe_sandbox.config import validate
    from swe_sandbox.models import get_model

    validate(AgentConfig, {**config["agent"], "output_path": output}, section="agent")
    check_output_path(output)
    check_model_config(config["model"])
    data = environment_config(env_spec, config["environment"])
    require_usable(str(data.get("backend")))
    return get_model(config["model"]), data
