"""swe-sandbox's backends as mini-swe-agent environment classes (DESIGN.md §8).

In a mini-swe-agent config (or with ``--environment-class``), only the class and our fields change::

    environment:
      environment_class: swe_sandbox.minisweagent.DockerEnvironment
      image: swe-sandbox/base
      cwd: /workspace
      timeout: 60

mini builds an environment as ``Class(**fields)``. The fields are the backend's config fields
(its config class documents them; they apply on top of the preset ``environments/<backend>.yaml``,
as ``get_environment`` does), read by this module's config classes (``swe_sandbox.mini_fields``,
one per class: ``DockerEnvironmentConfig``, ...): mini's defaults where ours differ (``timeout``
30 s; containers ``pull_timeout`` 120 s and ``cwd`` ``/``), mini's common names (``cwd``,
``env``, ``forward_env``, ``timeout``, ``image``, ``pull_timeout``) with the same meaning, and
mini's other fields mapped where they mean something here, refused (``ConfigError`` naming the
field and saying why) where they do not. Any other unknown field is refused too: nothing is ignored.

What these classes add to the core ones, which stay as they are:

- the submission sentinel raises ``Submitted``, a subclass of mini's ``Submitted`` (and of ours)
  carrying the exit message mini's agents expect, so mini's loop ends with ``exit_status:
  Submitted``;
- a timed-out result carries ``extra["exception_type"]`` ``"TimeoutExpired"`` and
  ``extra["exception"]``, as mini's own environments' results do;
- ``get_template_vars()`` adds the sandbox's ``uname`` (``system``, ``node``, ``release``,
  ``version``, ``machine``; mini's templates read them), read inside the sandbox once;
- ``DockerEnvironment`` and ``PodmanEnvironment`` start their container when built, as mini's
  ``DockerEnvironment`` does (``container_id`` is set then), and an ``executable`` (or
  ``MSWEA_DOCKER_EXECUTABLE``) naming the other engine builds the other class;
- ``BwrapEnvironment.working_dir``: the host directory commands start in, as mini's;
- ``cleanup()``, mini's name for ``close()``, and closing on garbage collection: mini's batch
  runner never closes its environments.

Importing this module imports mini-swe-agent (``pip install 'swe-sandbox[mini]'``); nothing else of
swe_sandbox does.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import minisweagent.exceptions

from swe_sandbox import errors, mini_fields
from swe_sandbox.config import data_dir, load_yaml, validate
from swe_sandbox.environments import bwrap, local
from swe_sandbox.environments.container import docker, podman
from swe_sandbox.environments.ssh import environment as ssh
from swe_sandbox.mini_fields import (
    BwrapEnvironmentConfig,
    DockerEnvironmentConfig,
    LocalEnvironmentConfig,
    PodmanEnvironmentConfig,
    SshEnvironmentConfig,
)

__all__ = ["Submitted", "LocalEnvironment", "BwrapEnvironment", "DockerEnvironment", "PodmanEnvironment",
           "SshEnvironment", "LocalEnvironmentConfig", "BwrapEnvironmentConfig", "DockerEnvironmentConfig",
           "PodmanEnvironmentConfig", "SshEnvironmentConfig"]

#: Reads the sandbox's ``uname`` fields, one a line, in ``UNAME_FIELDS`` order (the last lines of
#: the output: a shell startup file, e.g. ``BASH_ENV``, may print before them).
UNAME_FIELDS = ("system", "node", "release", "version", "machine")
UNAME_COMMAND = "uname -s; uname -n; uname -r; uname -v; uname -m"
#: Seconds the ``uname`` command may take.
UNAME_TIMEOUT_S = 30.0
#: ``extra["exception_type"]`` of a timed-out result: what mini's environments put there (the
#: name of ``subprocess.TimeoutExpired``, which their ``subprocess.run`` raised).
TIMEOUT_EXCEPTION_TYPE = "TimeoutExpired"


class Submitted(minisweagent.exceptions.Submitted, errors.Submitted):
    """The submission sentinel: mini's ``Submitted`` (its agents end their loop on it) and ours.

    Args:
        submission: everything after the sentinel line, byte for byte.
        result: the result dict of the command that submitted.

    Attributes:
        messages (list[dict]): one exit message, as mini's own environments raise it:
            ``{"role": "exit", "content": submission, "extra": {"exit_status": "Submitted",
            "submission": submission}}``.
        submission (str): as above.
        result (dict): as above.
    """

    # mini's base infers a tuple from its *messages, ours holds a list: both are read as sequences
    messages: list[dict[str, Any]]  # type: ignore[assignment]

    def __init__(self, submission: str, result: dict[str, Any] | None = None):
        Exception.__init__(self, submission)  # both bases' __init__ take other arguments
        self.submission = submission
        self.result = result or {}
        self.messages = [{"role": "exit", "content": submission,
                          "extra": {"exit_status": "Submitted", "submission": submission}}]

    def __reduce__(self):
        return type(self), (self.submission, self.result)


# -- the classes ----------------------------------------------------------------------------------
if TYPE_CHECKING:
    from swe_sandbox.environments.base import Environment as _Mixed  # what the mixin is mixed into
else:
    _Mixed = object


class _MiniEnvironment(_Mixed):
    """What every class here adds to its backend's ``Environment`` (the next base in the MRO)."""

    backend: ClassVar[str]
    config_class: ClassVar[type[mini_fields.MiniConfig]]
    #: The sentinel raises this module's ``Submitted`` (mini's and ours): mini's agents end their loop on it.
    submitted_error: ClassVar[type[errors.Submitted]] = Submitted

    def __init__(self, **fields: Any):
        """Build the environment as mini does: ``Class(**fields)`` (it starts on first use, or
        now where mini's class does: ``DockerEnvironment``, ``PodmanEnvironment``).

        Args:
            **fields: the backend's config fields, on top of its preset; mini's own field names
                as ``config_class`` translates them.

        Raises:
            ConfigError: an unknown or invalid field, or a mini field without a meaning here
                (the message names it and says why).
            SandboxStartError, BackendUnavailable: a container class could not start its container.
        """
        self._uname: dict[str, str] | None = None
        super().__init__(self.mini_config(**fields))
        _register_exit_hook()
        _LIVE.add(self)

    @classmethod
    def mini_config(cls, **fields: Any) -> mini_fields.MiniConfig:
        """The config ``Class(**fields)`` runs with, without building the environment: the backend's
        preset (``environments/<backend>.yaml``, as ``get_environment`` reads it), then ``fields``.

        Raises:
            ConfigError: as ``__init__``.
        """
        data = load_yaml(data_dir("environments") / f"{cls.backend}.yaml")
        # translated first, so a refusal is raised as it is (validation translates again: a no-op)
        return validate(cls.config_class, cls.config_class.translate({**data, **fields}))

    def _check_result(self, result: dict[str, Any]) -> None:
        """A timed-out result also says what mini's say: ``exception_type``, ``exception``."""
        super()._check_result(result)
        if result["extra"].get("timed_out"):
            result["extra"].setdefault("exception_type", TIMEOUT_EXCEPTION_TYPE)
            result["extra"].setdefault("exception", result["exception_info"])

    def uname(self) -> dict[str, str]:
        """The sandbox's ``uname`` fields (``UNAME_FIELDS``), read inside it once (starts it).

        Raises:
            SandboxError: the command failed or printed fewer lines.
        """
        if self._uname is None:
            result = self.execute({"command": UNAME_COMMAND}, "/", timeout=UNAME_TIMEOUT_S)
            lines = result["output"].splitlines()[-len(UNAME_FIELDS):]
            if result["returncode"] != 0 or len(lines) != len(UNAME_FIELDS):
                why = result["exception_info"] or f"returncode {result['returncode']}"
                raise errors.SandboxError(f"cannot read the sandbox's uname ({why}): {result['output'][-500:]!r}")
            self._uname = dict(zip(UNAME_FIELDS, lines, strict=True))
        return dict(self._uname)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The backend's template variables plus the sandbox's ``uname`` (``UNAME_FIELDS``)."""
        return super().get_template_vars(**{**self.uname(), **kwargs})

    def cleanup(self) -> None:
        """mini-swe-agent's name for ``close()``: end the sandbox's processes and remove it."""
        self.close()

    def __del__(self) -> None:
        """Garbage collection closes an environment nobody closed (mini's batch runner never does).

        Not while the interpreter finalizes: no thread can start then (an ssh close may reconnect
        and would wait forever); the exit hook (``_register_exit_hook``) closed it already.
        """
        if not sys.is_finalizing():
            _close_quietly(self)


#: Environments of this module not garbage-collected yet: closed at interpreter exit (mini's CLI
#: keeps its environment until then and never closes it).
_LIVE: weakref.WeakSet[_MiniEnvironment] = weakref.WeakSet()


def _close_quietly(env: _MiniEnvironment) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - half-built, or an engine already gone: nothing left to do
        pass


@functools.cache
def _register_exit_hook() -> None:
    """Close every live environment at exit; registered with the first one, not at import."""
    def close_all() -> None:
        for env in list(_LIVE):
            _close_quietly(env)

    atexit.register(close_all)


class LocalEnvironment(_MiniEnvironment, local.LocalEnvironment):
    """Backend ``local`` for mini-swe-agent: NO isolation, commands run on the host as you."""

    backend = "local"
    config_class = LocalEnvironmentConfig


class BwrapEnvironment(_MiniEnvironment, bwrap.BwrapEnvironment):
    """Backend ``bwrap`` for mini-swe-agent: one bubblewrap sandbox per environment (mini's
    ``BubblewrapEnvironment``). A ``cwd`` that is a host directory is bound there read-write, at the
    same path, as mini's binds it (``mini_fields.host_dir_cwd``)."""

    backend = "bwrap"
    config_class = BwrapEnvironmentConfig

    def __init__(self, **fields: Any):
        """As ``_MiniEnvironment``'s; a host directory ``cwd`` the sandbox cannot use is refused
        naming ``cwd`` (e.g. one only root may write: the sandbox never runs as host root)."""
        try:
            super().__init__(**fields)
        except errors.ConfigError as exc:
            where = mini_fields.host_dir_cwd(fields)
            if where is None or not str(exc).startswith("environment.workspace: "):
                raise
            raise errors.ConfigError(f"environment.cwd: {where} is a host directory, which is bound read-write at the "
                                     f"same path (as the workspace), as mini-swe-agent binds it; it cannot be: {exc}"
                                     ) from None

    @property
    def working_dir(self) -> Path:
        """mini's name: the host directory commands start in (the workspace; a fresh one, removed
        at close, when none is given)."""
        return self.workspace


class _MiniContainer(_MiniEnvironment):
    """The container classes' additions: the executable picks the engine, the container starts now."""

    def __new__(cls, **fields: Any):
        """``executable`` (else, for ``DockerEnvironment``, ``MSWEA_DOCKER_EXECUTABLE``) naming the
        other engine (``mini_fields.engine_of``: its file name is ``podman`` or ``docker``) builds
        that engine's class, as mini's ``DockerEnvironment(executable="podman")`` runs podman."""
        variable = cls.config_class.executable_variable
        executable = fields.get("executable") or fields.get("cli") or (variable and os.environ.get(variable[0]))
        engine = mini_fields.engine_of(executable)
        if engine is not None and engine != cls.backend:
            return CONTAINER_CLASSES[engine](**fields)
        return super().__new__(cls)

    def __init__(self, **fields: Any):
        """As ``_MiniEnvironment``'s, then the container starts (mini's does in its constructor)."""
        super().__init__(**fields)
        self.start()


class DockerEnvironment(_MiniContainer, docker.DockerEnvironment):
    """Backend ``docker`` for mini-swe-agent: one container per environment."""

    backend = "docker"
    config_class = DockerEnvironmentConfig


class PodmanEnvironment(_MiniContainer, podman.PodmanEnvironment):
    """Backend ``podman`` for mini-swe-agent: one container per environment."""

    backend = "podman"
    config_class = PodmanEnvironmentConfig


#: The container class of each engine (``_MiniContainer.__new__``).
CONTAINER_CLASSES: dict[str, type[_MiniContainer]] = {"docker": DockerEnvironment, "podman": PodmanEnvironment}


class SshEnvironment(_MiniEnvironment, ssh.SshEnvironment):
    """Backend ``ssh`` for mini-swe-agent: commands on a remote host (``host`` is required)."""

    backend = "ssh"
    config_class = SshEnvironmentConfig
