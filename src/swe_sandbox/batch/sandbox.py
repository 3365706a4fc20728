"""A task's sandbox: the environment config a task asks for, started with its workspace and setup.

Used alike for the agent's sandbox and for each evaluation's *fresh* one, so both start from the
same trusted inputs: the task's image, a copy of its workspace (copied in with ``upload``; the
host directory is never bound into the sandbox nor changed) and its ``setup_command``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from swe_sandbox.batch.phases import AGENT, EVAL, SANDBOXES, PhaseLog, check_allowlist, sandbox_plan
from swe_sandbox.config import validate
from swe_sandbox.environments import environment_class, get_environment
from swe_sandbox.environments.container.image_ref import built_here
from swe_sandbox.environments.container.pull_errors import pull_error
from swe_sandbox.errors import BackendUnavailable, ConfigError, SetupFailed, TaskFileError
from swe_sandbox.workspace import copy_target, scratch_cwd, upload_workspace

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.base import Environment
    from swe_sandbox.environments.container.environment import ContainerEnvironment

#: Backends whose ``image`` field a task's ``image`` sets.
IMAGE_BACKENDS = ("docker", "podman")
#: Seconds ``setup_command`` may take when the task and config say nothing.
DEFAULT_SETUP_TIMEOUT_S = 600.0


def task_env_config(task: Task, env_config: dict[str, Any]) -> dict[str, Any]:
    """``env_config`` with the task's ``image`` (docker/podman) and ``cwd`` set.

    ``workspace`` is removed from the config: a task's workspace is copied in by ``start_sandbox``.
    """
    data = {k: v for k, v in env_config.items() if k != "workspace"}
    if task.image and data.get("backend") in IMAGE_BACKENDS:
        data["image"] = task.image
    if task.cwd:
        data["cwd"] = task.cwd
    return data


def eval_env_config(task: Task, env_config: dict[str, Any]) -> dict[str, Any]:
    """``env_config`` for ``task``'s evaluation sandbox (``phases.sandbox_plan``'s ``eval`` plan):
    no network (``network: none`` on docker/podman/bwrap, without ``allow``, ``resolve`` or
    ``share_net``) unless the task's ``eval_network`` or ``setup_network`` asks for one.

    Raises:
        ConfigError: as ``phases.sandbox_plan``.
    """
    return sandbox_plan(task, env_config, EVAL).config


def check_environment_config(tasks: list[Task], env_config: dict[str, Any]) -> None:
    """Validate ``env_config`` (with each task's fields, and the network of each phase of its
    two sandboxes: ``phases``) before anything runs or is written, so a typo is an error of the
    command, not a ``ConfigError`` recorded as every instance's result.

    Raises:
        ConfigError: an unknown backend or field, or an invalid value (named, with the task when
            its fields make it invalid); a task's phases that no sandbox can have (``on`` for one
            phase only, ``allowlist`` on a backend without it).
    """
    if "backend" not in env_config:
        raise ConfigError("environment.backend: missing (e.g. backend: docker)")
    config_class = environment_class(str(env_config["backend"])).config_class
    validate(config_class, {k: v for k, v in env_config.items() if k != "workspace"})
    for task in tasks:
        try:
            validate(config_class, task_env_config(task, env_config))
        except ConfigError as exc:
            raise ConfigError(f"task {task.instance_id!r}: {exc}") from None
        for sandbox in SANDBOXES:
            plan = sandbox_plan(task, env_config, sandbox)
            try:
                config = validate(config_class, task_env_config(task, plan.config))
            except ConfigError as exc:
                raise ConfigError(f"task {task.instance_id!r}: {sandbox} sandbox: {exc}") from None
            check_allowlist(task, sandbox, config)


@contextmanager
def task_sandbox(task: Task, env_config: dict[str, Any], *, setup_timeout: float | None = None,
                 sandbox: str = AGENT, network_log: PhaseLog | None = None) -> Iterator[Environment]:
    """The task's sandbox, started, workspace copied in, ``setup_command`` run; closed on exit.

    Args:
        task: the task.
        env_config: the environment config (a dict with ``backend``), before the task's fields.
        setup_timeout: seconds for ``setup_command``; None: ``DEFAULT_SETUP_TIMEOUT_S``.
        sandbox: ``agent`` (default) or ``eval``: the plan of its phases' network
            (``phases.sandbox_plan``) it is made with.
        network_log: records the setup phase's decisions (made with the same plan); the caller
            enters the next phase with ``network_log.enter(environment)``. None: the next phase
            is entered here before the sandbox is yielded.

    Yields:
        Environment: started; in its setup phase's network when ``network_log`` is given. On
        ``local`` the workspace goes to a fresh temporary directory (its ``cwd``), removed on exit.

    Raises:
        SetupFailed: ``setup_command`` exited non-zero.
        ConfigError, BackendUnavailable, SandboxError: as ``get_environment`` and ``start`` raise
            them; as ``phases.sandbox_plan``.
    """
    plan = network_log.plan if network_log is not None else sandbox_plan(task, env_config, sandbox)
    log = network_log or PhaseLog(plan)
    data = task_env_config(task, plan.config)
    scratch = scratch_cwd(data, "swe-sandbox-task-") if task.workspace is not None and not task.cwd else None
    try:
        with get_environment(data) as environment:
            environment.start()
            log.begin(environment, plan.setup)
            if task.workspace is not None:
                _copy_workspace(environment, task)
            if task.setup_command.strip():
                _run_setup(environment, task, setup_timeout or DEFAULT_SETUP_TIMEOUT_S)
            if network_log is None:
                log.enter(environment)
            yield environment
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _run_setup(environment: Environment, task: Task, timeout: float) -> None:
    result = environment.execute({"command": task.setup_command}, timeout=timeout)
    if result["returncode"] != 0:
        tail = result["output"][-500:].strip()
        why = f": {result['exception_info']}" if result["exception_info"] else ""
        raise SetupFailed(f"setup_command exited {result['returncode']}{why}{': ' + tail if tail else ''}")


def _copy_workspace(environment: Environment, task: Task) -> None:
    """Upload the task's workspace into where commands start (``cwd``, else ``mount_point``)."""
    config = environment.config
    target = copy_target(config)
    if not target:
        raise ConfigError(f"{task.instance_id}: workspace: backend {config.backend!r} has no working "
                          "directory to copy it to; set the task's cwd or environment.cwd")
    assert task.workspace is not None  # the caller copies only a task that has one
    now = task.workspace.resolve()
    if now != task.workspace:  # resolved (and checked) when the task file was read
        raise ConfigError(f"{task.instance_id}: workspace: {task.workspace} resolves to {now} now: a symlink "
                          "took its place after the task file was read; not copied")
    upload_workspace(environment, task.workspace, target)


def check_task_images(tasks: list[Task], env_config: dict[str, Any]) -> None:
    """On docker/podman, check before anything runs that the engine answers and that every image
    that cannot be pulled is there: all of them with ``image_pull: never``, else those built here
    (``image_ref.built_here``); missing images are pulled as the batch reaches them
    (``swe-sandbox image pull`` pulls them ahead).

    Raises:
        TaskFileError: an image the engine does not have and will not pull (the message names the
            task's line and the ``image`` field).
        BackendUnavailable: the engine cannot be reached.
    """
    backend = str(env_config.get("backend", ""))
    if backend not in IMAGE_BACKENDS:
        return
    cls = cast("type[ContainerEnvironment]", environment_class(backend))  # IMAGE_BACKENDS are containers
    reason = cls.unavailable_reason(url=env_config.get("url", ""))
    if reason:
        raise BackendUnavailable(f"{backend}: {reason}")
    pulls = env_config.get("image_pull") != "never"
    engine = cls.engine_class(env_config.get("url", ""))
    present: dict[str, bool] = {}
    for task in tasks:
        image = task.image or str(env_config.get("image") or cls.config_class.model_fields["image"].default)
        if pulls and not built_here(image):  # pulled as the batch reaches it
            continue
        if image not in present:
            present[image] = engine.has_image(image)
        if not present[image]:
            field = "image" if task.image else "environment.image"
            raise TaskFileError(f"task {task.instance_id!r} (line {task.source_line}): {field}: "
                                f"{pull_error(backend, image, 'never')}")
