"""What ``run``, ``batch``, ``eval`` and ``image pull`` check before anything runs: the output path,
the model and environment configs, a usable backend. So a mistake costs no model call and no sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swe_sandbox.agent.default import AgentConfig
from swe_sandbox.batch.records import output_directory
from swe_sandbox.config import load_environment_config, validate
from swe_sandbox.environments import environment_class
from swe_sandbox.errors import BackendUnavailable, ConfigError
from swe_sandbox.models import get_model
from swe_sandbox.trajectory import recursive_merge

#: Added to a backend's unavailable reason (every backend but ``local`` itself).
LOCAL_HINT = " (or run with --env local: NO isolation, commands run on this machine as you)"
#: Model classes that call a provider, and so need ``model_name``.
PROVIDER_MODEL_CLASSES = ("litellm", "litellm_text")


def submission_path(trajectory: Path) -> Path:
    """Where a run's submission is saved: beside the trajectory, ``NAME.submission.txt``.

    Args:
        trajectory: the trajectory's path (``NAME.traj.json`` or ``NAME.json``).

    Returns:
        Path: ``NAME.submission.txt`` in the trajectory's directory.
    """
    name = trajectory.name
    for suffix in (".traj.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trajectory.with_name(name + ".submission.txt")


def check_output_path(path: Path) -> None:
    """Check that the trajectory (and the submission beside it) can be written at ``path``.

    Args:
        path: the trajectory's path.

    Raises:
        ConfigError: ``path`` or the submission's path is a directory, or its directory can be
            neither created nor written (``records.output_directory``).
    """
    for target in (path, submission_path(path)):
        if target.is_dir():
            raise ConfigError(f"--output: {target} is a directory; give a file name, e.g. "
                              f"{target / 'run.traj.json'}")
    output_directory(path.parent)


def check_model_config(model: dict[str, Any]) -> None:
    """Check that a provider model has a name (the usual mistake: no ``-m``).

    Args:
        model: the run config's ``model`` section.

    Raises:
        ConfigError: a provider model class (default ``litellm``) without ``model_name``.
    """
    if model.get("model_class", "litellm") in PROVIDER_MODEL_CLASSES and not model.get("model_name"):
        raise ConfigError("model.model_name: missing; pass -m/--model (e.g. -m anthropic/claude-sonnet-4-5)")


def environment_config(env_spec: str, section: dict[str, Any]) -> dict[str, Any]:
    """The preset or file ``env_spec``, with the run config's ``environment`` fields on top.

    Args:
        env_spec: a preset name or a YAML file (``config.load_environment_config``).
        section: the run config's ``environment`` section (its ``backend`` is ignored).

    Returns:
        dict[str, Any]: the merged environment config.

    Raises:
        ConfigError: unknown preset or unreadable file.
    """
    section = {k: v for k, v in section.items() if k != "backend"}
    return recursive_merge(load_environment_config(env_spec), section)


def require_usable(backend: str) -> None:
    """Check that ``backend`` can run on this host.

    Args:
        backend: a backend name.

    Raises:
        ConfigError: no such backend.
        BackendUnavailable: it cannot run here (the reason, and for all but ``local`` a hint).
    """
    reason = environment_class(backend).unavailable_reason()
    if reason:
        hint = "" if backend == "local" else LOCAL_HINT
        raise BackendUnavailable(f"{backend}: {reason}{hint}")


def prepare_run(config: dict[str, Any], env_spec: str, output: Path) -> tuple[Any, dict[str, Any]]:
    """Check a run's config before anything runs, then make its model.

    Args:
        config: the run config (``agent``, ``model``, ``environment`` sections).
        env_spec: the ``--env`` preset or file.
        output: the trajectory's path.

    Returns:
        tuple: ``(model, environment config)``: the model made from ``config["model"]``; the
        environment config (``env_spec`` with the run config's ``environment`` on top).

    Raises:
        ConfigError: an invalid ``agent``/``model``/``environment`` section, or an unusable ``output``.
        BackendUnavailable: the backend cannot run here.
    """
    validate(AgentConfig, {**config["agent"], "output_path": output}, section="agent")
    check_output_path(output)
    check_model_config(config["model"])
    data = environment_config(env_spec, config["environment"])
    require_usable(str(data.get("backend")))
    return get_model(config["model"]), data
