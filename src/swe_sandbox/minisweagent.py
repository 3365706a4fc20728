"""swe-sandbox's backends as mini-swe-agent environment classes (DESIGN.md §8).

In a mini-swe-agent config (or with ``--environment-class``), only the class and our fields change::

    environment:
      environment_class: swe_sandbox.minisweagent.DockerEnvironment
      image: swe-sandbox/base
      cwd: /workspace
      timeout: 60

mini builds an environment as ``Class(**fields)``. The fields are the backend's config fields
(its config class documents them; they apply on top of the preset ``environments/<backend>.yaml``,
as ``get_environment`` does); mini's common names ``cwd``, ``env``, ``forward_env``, ``timeout``,
``image`` and (containers) ``pull_timeout`` mean the same here. Fields of mini's own ``DockerEnvironment`` and ``BubblewrapEnvironment`` that are
not ours are translated by the class's ``mini_fields``: mapped where they mean something here,
refused (``ConfigError`` naming the field and saying why) where they do not. Any other unknown
field is refused too: nothing is ignored.

What these classes add to the core ones, which stay as they are:

- the submission sentinel raises ``Submitted``, a subclass of mini's ``Submitted`` (and of ours)
  carrying the exit message mini's agents expect, so mini's loop ends with ``exit_status:
  Submitted``;
- ``get_template_vars()`` adds the sandbox's ``uname`` (``system``, ``node``, ``release``,
  ``version``, ``machine``; mini's templates read them), read inside the sandbox once;
- ``cleanup()``, mini's name for ``close()``, and closing on garbage collection: mini's batch
  runner never closes its environments.

Importing this module imports mini-swe-agent (``pip install 'swe-sandbox[mini]'``); nothing else of
swe_sandbox does.
"""

from __future__ import annotations

import atexit
import functools
import re
import sys
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import minisweagent.exceptions

from swe_sandbox import errors
from swe_sandbox.config import data_dir, load_yaml, validate
from swe_sandbox.environments import bwrap, local
from swe_sandbox.environments.container import docker, podman
from swe_sandbox.environments.ssh import environment as ssh

__all__ = ["Submitted", "LocalEnvironment", "BwrapEnvironment", "DockerEnvironment", "PodmanEnvironment",
           "SshEnvironment"]

#: Reads the sandbox's ``uname`` fields, one a line, in ``UNAME_FIELDS`` order (the last lines of
#: the output: a shell startup file, e.g. ``BASH_ENV``, may print before them).
UNAME_FIELDS = ("system", "node", "release", "version", "machine")
UNAME_COMMAND = "uname -s; uname -n; uname -r; uname -v; uname -m"
#: Seconds the ``uname`` command may take.
UNAME_TIMEOUT_S = 30.0
#: The only ``interpreter`` (a field of mini's docker class) that says what we do.
BASH_C = ["bash", "-c"]


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


# -- mini's field names that are not ours --------------------------------------------------------
Translate = Callable[[str, Any, str], dict[str, Any]]


def _refused(field: str, backend: str, why: str) -> errors.ConfigError:
    """The error for a mini-swe-agent field that has no meaning on ``backend``."""
    return errors.ConfigError(f"environment.{field}: mini-swe-agent's field has no meaning for swe-sandbox's "
                              f"{backend} backend: {why}")


def _refuse(why: str) -> Translate:
    def translate(field: str, value: Any, backend: str) -> dict[str, Any]:
        raise _refused(field, backend, why)
    return translate


def _rename(ours: str) -> Translate:
    """mini's field is our field ``ours``."""
    return lambda field, value, backend: {ours: value}


def _interpreter(field: str, value: Any, backend: str) -> dict[str, Any]:
    if value == BASH_C or value == tuple(BASH_C):
        return {}
    raise _refused(field, backend, f"every command runs in a fresh `bash -c` (a non-login shell: set env BASH_ENV "
                                  f"to a file to source first); only {BASH_C} is accepted, got {value!r}")


def _run_args(field: str, value: Any, backend: str) -> dict[str, Any]:
    if value in ([], ["--rm"]):  # mini's default: the container is removed, as ours always is
        return {}
    raise _refused(field, backend, "containers are made through the engine's API, not `docker run`; set the named "
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
#: mini's docker fields on a container backend.
CONTAINER_FIELDS: dict[str, Translate] = {
    "interpreter": _interpreter,
    "executable": _rename("cli"),
    "run_args": _run_args,
    "container_timeout": _container_timeout,
    # pull_timeout is ours too (seconds a pull may take): it passes as it is
}
#: mini's docker fields on a backend without containers.
HOST_FIELDS: dict[str, Translate] = {
    "interpreter": _interpreter,
    **{field: _refuse(_NO_CONTAINER) for field in ("image", "executable", "run_args", "container_timeout",
                                                   "pull_timeout")},
}
BWRAP_FIELDS: dict[str, Translate] = {
    **HOST_FIELDS,
    "executable": _rename("bwrap_path"),
    "wrapper_args": _refuse("the sandbox's bwrap arguments are its isolation policy, not a setting; use the fields "
                           "(ro_binds, share_net, workspace, mount_point, max_* limits, ...)"),
}


# -- the classes ----------------------------------------------------------------------------------
if TYPE_CHECKING:
    from swe_sandbox.environments.base import Environment as _Mixed  # what the mixin is mixed into
else:
    _Mixed = object


class _MiniEnvironment(_Mixed):
    """What every class here adds to its backend's ``Environment`` (the next base in the MRO)."""

    backend: ClassVar[str]
    mini_fields: ClassVar[dict[str, Translate]] = HOST_FIELDS
    #: The sentinel raises this module's ``Submitted`` (mini's and ours): mini's agents end their loop on it.
    submitted_error: ClassVar[type[errors.Submitted]] = Submitted

    def __init__(self, **fields: Any):
        """Build the environment as mini does: ``Class(**fields)`` (it starts on first use).

        Args:
            **fields: the backend's config fields, on top of its preset; mini's own field names
                as ``mini_fields`` translates them.

        Raises:
            ConfigError: an unknown or invalid field, or a mini field without a meaning here
                (the message names it and says why).
        """
        self._uname: dict[str, str] | None = None
        data = load_yaml(data_dir("environments") / f"{self.backend}.yaml")  # the preset, as get_environment
        for name, value in fields.items():
            if name in self.config_class.model_fields or name not in self.mini_fields:
                data[name] = value  # ours, or unknown: validation names it
            else:
                data.update(self.mini_fields[name](name, value, self.backend))
        super().__init__(validate(self.config_class, data))
        _register_exit_hook()
        _LIVE.add(self)

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


class BwrapEnvironment(_MiniEnvironment, bwrap.BwrapEnvironment):
    """Backend ``bwrap`` for mini-swe-agent: one bubblewrap sandbox per environment."""

    backend = "bwrap"
    mini_fields = BWRAP_FIELDS


class DockerEnvironment(_MiniEnvironment, docker.DockerEnvironment):
    """Backend ``docker`` for mini-swe-agent: one container per environment."""

    backend = "docker"
    mini_fields = CONTAINER_FIELDS


class PodmanEnvironment(_MiniEnvironment, podman.PodmanEnvironment):
    """Backend ``podman`` for mini-swe-agent: one container per environment."""

    backend = "podman"
    mini_fields = CONTAINER_FIELDS


class SshEnvironment(_MiniEnvironment, ssh.SshEnvironment):
    """Backend ``ssh`` for mini-swe-agent: commands on a remote host (``host`` is required)."""

    backend = "ssh"
