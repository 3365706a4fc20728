"""mini-swe-agent's environment fields on our backends: the config classes of ``swe_sandbox.minisweagent``.

Each class (``LocalEnvironmentConfig``, ``BwrapEnvironmentConfig``, ``DockerEnvironmentConfig``,
``PodmanEnvironmentConfig``, ``SshEnvironmentConfig``) is the backend's own config class with, on top:

- mini's defaults where ours differ (``MINI_TIMEOUT_S``; containers ``MINI_PULL_TIMEOUT_S``
  and ``MINI_CONTAINER_CWD`` when none of ``cwd``, ``workspace``, ``mount_point`` is given);
- mini's field names, translated by the class's ``mini_fields``: mapped where they mean
  something here, refused (``ConfigError`` naming the field and saying why) where they do not;
- mini's variables naming the executable when no field does (``executable_variable``);
- ``executable``, read-only: mini's name for the engine's client (``cli``) or ``bwrap_path``;
- bwrap: a ``cwd`` that is a host directory is bound read-write at the same path (the workspace),
  as mini's ``BubblewrapEnvironment`` binds it (``host_dir_cwd``).

No mini-swe-agent import here (``swe_sandbox.minisweagent`` has the environment classes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import model_validator

from swe_sandbox import errors
from swe_sandbox.config import EnvironmentConfig
from swe_sandbox.environments import bwrap, local
from swe_sandbox.environments.container import docker, podman
from swe_sandbox.environments.ssh import environment as ssh

#: mini's default per-command timeout, seconds (all of its environments; ours is 60).
MINI_TIMEOUT_S = 30.0
#: mini's default ``pull_timeout`` of its ``DockerEnvironment``, seconds (ours is 1800).
MINI_PULL_TIMEOUT_S = 120.0
#: Where commands start in mini's ``DockerEnvironment`` by default (ours: the workspace).
MINI_CONTAINER_CWD = "/"
#: The only ``interpreter`` (a field of mini's docker class) that says what we do.
BASH_C = ["bash", "-c"]
#: An ``executable`` of a container class names its engine by its file name: ``docker``, ``podman``.
ENGINE_EXECUTABLE = re.compile(r"(docker|podman)(-remote)?(\.exe)?")

Translate = Callable[[str, Any, str], dict[str, Any]]


def engine_of(executable: str | None) -> str | None:
    """The engine (``"docker"`` or ``"podman"``) an executable's file name names, else None."""
    match = ENGINE_EXECUTABLE.fullmatch(os.path.basename(executable or ""))
    return match[1] if match else None


def refused(field: str, backend: str, why: str) -> errors.ConfigError:
    """The error for a mini-swe-agent field that has no meaning on ``backend``."""
    return errors.ConfigError(f"environment.{field}: mini-swe-agent's field has no meaning for swe-sandbox's "
                              f"{backend} backend: {why}")


def _refuse(why: str) -> Translate:
    def translate(field: str, value: Any, backend: str) -> dict[str, Any]:
        raise refused(field, backend, why)
    return translate


def _rename(ours: str) -> Translate:
    """mini's field is our field ``ours``."""
    return lambda field, value, backend: {ours: value}


def _interpreter(field: str, value: Any, backend: str) -> dict[str, Any]:
    if value == BASH_C or value == tuple(BASH_C):
        return {}
    raise refused(field, backend, f"every command runs in a fresh `bash -c` (a non-login shell: set env BASH_ENV "
                                  f"to a file to source first); only {BASH_C} is accepted, got {value!r}")


def _run_args(field: str, value: Any, backend: str) -> dict[str, Any]:
    if value in ([], ["--rm"]):  # mini's default: the container is removed, as ours always is
        return {}
    raise refused(field, backend, "containers are made through the engine's API, not `docker run`; set the named "
                                  "fields instead (network, memory, cpus, pids_limit, user, read_only, tmpfs, ...) "
                                  f"or create_args; got {value!r}")


def _container_timeout(field: str, value: Any, backend: str) -> dict[str, Any]:
    """``sleep``'s duration (``2h``, ``90m``, ``30``) becomes ``max_lifetime`` in seconds."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([smhd]?)\s*", str(value))
    if not match or float(match[1]) <= 0:
        raise errors.ConfigError(f"environment.{field}: expected a duration such as 2h, 90m or 3600 (sleep's "
                                 f"format), got {value!r}")
    return {"max_lifetime": float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]}


_NO_CONTAINER = "it runs no container (use DockerEnvironment or PodmanEnvironment for one)"
#: mini's docker fields on a container backend (``pull_timeout`` is ours too: it passes as it is).
CONTAINER_FIELDS: dict[str, Translate] = {
    "interpreter": _interpreter,
    "executable": _rename("cli"),
    "run_args": _run_args,
    "container_timeout": _container_timeout,
}
#: mini's docker fields on a backend without containers.
HOST_FIELDS: dict[str, Translate] = {
    "interpreter": _interpreter,
    **{field: _refuse(_NO_CONTAINER) for field in ("image", "executable", "run_args", "container_timeout",
                                                   "pull_timeout")},
}
#: mini's bubblewrap fields (and its docker ones) on the bwrap backend.
BWRAP_FIELDS: dict[str, Translate] = {
    **HOST_FIELDS,
    "executable": _rename("bwrap_path"),
    "wrapper_args": _refuse("the sandbox's bwrap arguments are its isolation policy, not a setting; use the fields "
                            "(ro_binds, share_net, workspace, mount_point, max_* limits, ...)"),
}


class MiniConfig(EnvironmentConfig):
    """What every config class here adds to its backend's (a later base: the backend's fields win)."""

    #: mini's field names that are not ours, and what becomes of them.
    mini_fields: ClassVar[dict[str, Translate]] = HOST_FIELDS
    #: mini's defaults where they differ from ours (a given field wins).
    mini_defaults: ClassVar[dict[str, Any]] = {"timeout": MINI_TIMEOUT_S}
    #: ``(variable, field)``: mini's environment variable naming the executable, and our field for it.
    executable_variable: ClassVar[tuple[str, str] | None] = None

    @model_validator(mode="before")
    @classmethod
    def _from_mini(cls, data: Any) -> Any:
        return cls.translate(data) if isinstance(data, Mapping) else data

    @classmethod
    def translate(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` (mini's names and ours) in our names only, on top of mini's defaults.

        Translating its own result again changes nothing (the config class's validation does).

        Raises:
            ConfigError: a mini field without a meaning here (the message names it and says why).
        """
        backend = str(data.get("backend") or cls.model_fields["backend"].default)
        out = cls.defaults(data)
        for name, value in data.items():
            if name in cls.model_fields or name not in cls.mini_fields:
                out[name] = value  # ours, or unknown: validation names it
            else:
                out.update(cls.mini_fields[name](name, value, backend))
        return out

    @classmethod
    def defaults(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """mini's defaults for ``data`` (``mini_defaults``, the executable from ``executable_variable``)."""
        out = dict(cls.mini_defaults)
        if cls.executable_variable is not None:
            variable, field = cls.executable_variable
            if os.environ.get(variable) and not {"executable", field} & data.keys():
                out[field] = os.environ[variable]
        return out


class LocalEnvironmentConfig(local.LocalConfig, MiniConfig):
    """``local`` for mini-swe-agent (fields: ``LocalConfig``)."""


class SshEnvironmentConfig(ssh.SshConfig, MiniConfig):
    """``ssh`` for mini-swe-agent (fields: ``SshConfig``)."""


class BwrapEnvironmentConfig(bwrap.BwrapConfig, MiniConfig):
    """``bwrap`` for mini-swe-agent (fields: ``BwrapConfig``); mini's ``BubblewrapEnvironmentConfig``."""

    mini_fields = BWRAP_FIELDS
    executable_variable = ("MSWEA_BUBBLEWRAP_EXECUTABLE", "bwrap_path")

    @classmethod
    def translate(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        out = super().translate(data)
        where = host_dir_cwd(data)
        if where is not None:
            out.update(cwd=where, workspace=where, mount_point=where)
        return out

    @property
    def executable(self) -> str:
        """mini's name for ``bwrap_path``."""
        return self.bwrap_path


def host_dir_cwd(data: Mapping[str, Any]) -> str | None:
    """The host directory a bwrap ``cwd`` names, to bind at the same path as mini does; None when
    ``cwd`` is a path inside the sandbox only: not a host directory, one the sandbox has anyway
    (``/``, the system's, ``/tmp``: ``bwrap.mount_point_problem``), or ``workspace`` or
    ``mount_point`` is given (``cwd`` is then where commands start in them)."""
    cwd = data.get("cwd")
    if not isinstance(cwd, str) or not cwd or {"workspace", "mount_point"} & data.keys():
        return None
    where = os.path.normpath(cwd)
    if not os.path.isdir(where) or bwrap.mount_point_problem(where) is not None:
        return None
    return where


class _MiniContainerConfig(MiniConfig):
    """The container classes' additions: mini's docker defaults, ``executable``."""

    mini_fields = CONTAINER_FIELDS
    mini_defaults = {"timeout": MINI_TIMEOUT_S, "pull_timeout": MINI_PULL_TIMEOUT_S}
    #: The engine's client when ``cli`` is empty.
    default_cli: ClassVar[str]

    @classmethod
    def defaults(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        out = super().defaults(data)
        if not {"cwd", "workspace", "mount_point"} & data.keys():
            out["cwd"] = MINI_CONTAINER_CWD
        return out

    @property
    def executable(self) -> str:
        """mini's name for the engine's client: ``cli``, else the engine's own (``docker``, ``podman``)."""
        return getattr(self, "cli", "") or self.default_cli


class DockerEnvironmentConfig(docker.DockerConfig, _MiniContainerConfig):
    """``docker`` for mini-swe-agent (fields: ``DockerConfig``); mini's ``DockerEnvironmentConfig``."""

    executable_variable = ("MSWEA_DOCKER_EXECUTABLE", "cli")
    default_cli = docker.DockerEngine.cli_name


class PodmanEnvironmentConfig(podman.PodmanConfig, _MiniContainerConfig):
    """``podman`` for mini-swe-agent (fields: ``PodmanConfig``)."""

    default_cli = podman.PodmanEngine.cli_name
