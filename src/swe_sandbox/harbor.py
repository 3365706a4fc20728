"""Our backends as Harbor environments: ``harbor run --env swe_sandbox.harbor:DockerEnvironment``.

Harbor (the Terminal-Bench harness, ``pip install 'swe-sandbox[harbor]'``, Python >= 3.12) loads an
environment class by import path and calls it with ``await``. Each class here implements Harbor's
``BaseEnvironment`` over ``swe_sandbox.get_environment``: ``start`` builds the task's
``environment/Dockerfile`` with the engine's own ``build`` (or takes its ``docker_image``) and starts
one of our sandboxes on it; ``exec``, ``upload_*``, ``download_*`` and ``stop`` are our ``execute``,
``upload``, ``download`` and ``close``, run in one worker thread per environment. A timeout, or a
Harbor timeout that cancels the awaiting call (its verifier's), kills the command's whole tree.

Supported: tasks with a Dockerfile or a ``docker_image`` (no docker-compose); the task's ``cpus``
and ``memory_mb`` as limits; ``--ek FIELD=VALUE`` for any field of the backend's config but
``network`` and ``allow``, which the task's policies decide. Network: all phases ``public``:
``bridge``; all ``no-network``: ``none``; any ``allowlist`` phase (``[environment]``, ``[agent]``,
``[verifier]``): our ``network: allowlist`` from the start, with the start policy's hosts (none for
``no-network``), switched between phases with ``set_network`` (``dynamic_network_policy``). Hosts
are names and ``*.`` wildcards (no IP or CIDR entries), reached through the proxy
(``HTTP_PROXY``) on ports 80 and 443; ``--ek resolve='{"NAME": "ADDRESS"}'`` gives the proxy its own
entries (allow-list tasks only: the others ignore it). ``public`` mixed with a restricted phase is
refused (``PUBLIC_MIXED``): a sandbox's network cannot be switched on. ``BwrapEnvironment`` refuses
every task (``UNSUPPORTED_BWRAP``). Importing this module imports harbor; ``import swe_sandbox``
does not.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.definition import should_use_prebuilt_docker_image
from harbor.models.task.config import NetworkMode
from harbor.models.task.config import NetworkPolicy as HarborNetworkPolicy

import swe_sandbox
from swe_sandbox.config import ALLOWLIST
from swe_sandbox.environments import environment_class
from swe_sandbox.network import NetworkPolicy

#: Why ``BwrapEnvironment`` takes no task: what Harbor needs that our bwrap backend does not do.
UNSUPPORTED_BWRAP = (
    "swe_sandbox.harbor: the bwrap backend cannot run Harbor tasks: a task runs in its image "
    "(environment/Dockerfile or docker_image) and writes /logs, /tests and /solution, while our bwrap "
    "sandbox runs on the host's read-only system directories with only /workspace and /tmp writable. "
    "Use swe_sandbox.harbor:DockerEnvironment or swe_sandbox.harbor:PodmanEnvironment.")
ROOT_USERS = (None, "root", 0, "0")
#: Why a task mixing ``public`` with a restricted phase is refused (``{modes}``: the modes asked for).
PUBLIC_MIXED = (
    "swe_sandbox.harbor: network_mode 'public' in one phase and a restricted mode in another ({modes}) is not "
    "supported: our sandboxes get the network at start (bridge) or never, and a bridge one cannot be restricted")
#: Why ``set_network_policy`` was refused (``{mode}``: asked; ``{network}``: the sandbox's ``network``).
CANNOT_SWITCH = "swe_sandbox.harbor: cannot switch a sandbox started with network {network!r} to network_mode {mode!r}"
#: ``--ek`` fields the task's network policies decide (with Harbor's ``--allow-*-host`` options).
TASK_NETWORK_FIELDS = ("network", "allow")
#: Our ``network`` for a Harbor mode the whole trial keeps (``allowlist`` is switched with ``set_network``).
STATIC_NETWORK = {NetworkMode.PUBLIC: "bridge", NetworkMode.NO_NETWORK: "none"}


class SweSandboxEnvironment(BaseEnvironment):
    """A Harbor environment on one of our sandboxes; subclasses choose the backend.

    Args:
        environment_dir, environment_name, session_id, trial_paths, task_env_config: Harbor's.
        **kwargs: Harbor's ``BaseEnvironment`` arguments, and any field of our backend's config
            (``--ek memory=8g``, ``--ek userns=host``): those go to ``get_environment``.

    Raises:
        ValueError: the task has a docker-compose.yaml, or asks for what the backend cannot enforce;
            ``--ek network`` or ``--ek allow`` (``TASK_NETWORK_FIELDS``).
        FileNotFoundError: the task has neither a Dockerfile nor a ``docker_image``.
    """

    backend: ClassVar[str] = "docker"
    _build_locks: ClassVar[dict[str, asyncio.Lock]] = {}

    def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any,
                 task_env_config: Any, **kwargs: Any):
        fields = environment_class(self.backend).config_class.model_fields
        self._fields = {k: kwargs.pop(k) for k in list(kwargs) if k in fields and k != "backend"}
        if given := [k for k in TASK_NETWORK_FIELDS if k in self._fields]:
            raise ValueError(f"swe_sandbox.harbor: --ek {given[0]}: the task's network_mode and allowed_hosts "
                             "decide it (add hosts with Harbor's --allow-environment-host, --allow-agent-host)")
        self._env: Any = None
        self._workdir = "/"
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"harbor-{session_id}")
        super().__init__(environment_dir, environment_name, session_id, trial_paths, task_env_config, **kwargs)

    @staticmethod
    def type() -> str:
        """Harbor's name of the environment type (its results and messages show it)."""
        return "swe-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        """``no-network`` and host-name allow-lists (exact and ``*.`` names, no IP or CIDR entries),
        switched between phases; nothing is mounted."""
        return EnvironmentCapabilities(disable_internet=True, network_allowlist=True,
                                       network_allowlist_hostnames=True, network_allowlist_wildcard_hostnames=True,
                                       dynamic_network_policy=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        """``cpus`` and ``memory_mb`` are hard limits (the container's)."""
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    @classmethod
    def preflight(cls) -> None:
        """Stop ``harbor run`` before it queues trials when the engine is not usable here."""
        reason = environment_class(cls.backend).unavailable_reason()
        if reason:
            raise SystemExit(f"swe_sandbox.harbor: {cls.backend}: {reason}")

    def _validate_definition(self) -> None:
        if (self.environment_dir / "docker-compose.yaml").exists() or self.extra_docker_compose_paths:
            raise ValueError(f"swe_sandbox.harbor: docker-compose tasks are not supported ({self.environment_dir})")
        if not self.task_env_config.docker_image and not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(f"{self.environment_dir / 'Dockerfile'} not found and no docker_image set")

    async def _call(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in this environment's worker thread. Cancelled while queued, it never runs;
        while running, its command (if any) is cancelled, its whole tree killed, and awaited."""
        work = self._worker.submit(fn, *args)
        future = asyncio.wrap_future(work)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not work.cancel() and self._env is not None:
                self._env.cancel()  # the running call returns at once
                await asyncio.wait([future])
            raise

    async def _build(self) -> str:
        """The image of the task's Dockerfile, built by the engine (content-addressed tag, cached)."""
        name = re.sub(r"[^a-z0-9]+", "-", self.environment_name.lower()).strip("-") or "task"
        tag = f"swe-sandbox-harbor/{name}:{self.environment_id[:12]}"
        async with self._build_locks.setdefault(tag, asyncio.Lock()):
            argv = [self._fields.get("cli") or self.backend, "build", "-q", "-t", tag, str(self.environment_dir)]
            proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                        stderr=subprocess.STDOUT)
            try:
                out, _ = await proc.communicate()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            if proc.returncode != 0:
                raise RuntimeError(f"{shlex.join(argv)} failed ({proc.returncode}): {out.decode(errors='replace')}")
        return tag

    async def start(self, force_build: bool) -> None:
        """Build (or take) the image, start the sandbox on it, make Harbor's output directories, then upload
        ``environment/`` when Harbor says so (a ``docker_image`` task without a Dockerfile)."""
        config = self.task_env_config
        prebuilt = should_use_prebuilt_docker_image(self.environment_dir, docker_image=config.docker_image,
                                                    force_build=force_build)
        network = self._start_network()
        extra = {k: v for k, v in self._fields.items() if k != "resolve" or network["network"] == ALLOWLIST}
        fields: dict[str, Any] = {"image": config.docker_image if prebuilt else await self._build(),
                                  "image_pull": "missing" if prebuilt else "never", "timeout": None, **network,
                                  "labels": {"org.swe-sandbox.harbor-session": self.session_id}}
        if self._effective_cpus is not None:
            fields["cpus"] = float(self._effective_cpus)
        if self._effective_memory_mb is not None:
            fields["memory"] = f"{self._effective_memory_mb}m"
        self._env = swe_sandbox.get_environment(self.backend, **{**fields, **extra})
        await self._call(self._env.start)
        self._workdir = config.workdir or await self._call(self._image_workdir)
        await self.ensure_dirs(self._mount_targets(writable_only=True))  # /logs/agent, /logs/verifier, ...
        await self._upload_environment_dir_after_start()

    def _start_network(self) -> dict[str, Any]:
        """Our ``network`` (and ``allow``) for the start policy and every phase Harbor may switch to.

        Raises:
            ValueError: ``public`` mixed with a restricted phase (``PUBLIC_MIXED``).
        """
        modes = {policy.network_mode for policy in [self._network_policy, *self._phase_network_policies]}
        if NetworkMode.ALLOWLIST not in modes and len(modes) == 1:
            return {"network": STATIC_NETWORK[modes.pop()]}
        if NetworkMode.PUBLIC in modes:
            raise ValueError(PUBLIC_MIXED.format(modes=", ".join(sorted(mode.value for mode in modes))))
        return {"network": ALLOWLIST, "allow": list(self._network_policy.allowed_hosts)}

    async def _apply_network_policy(self, network_policy: HarborNetworkPolicy) -> None:
        """Harbor's phase change: ``allowlist`` -> ``set_network`` with its hosts (and ``--ek
        resolve``), ``no-network`` -> ``set_network(None)``; a static sandbox only keeps its own mode.

        Raises:
            ValueError: the sandbox cannot take ``network_policy`` (``CANNOT_SWITCH``): ``public`` on a
                restricted sandbox, a restriction on a bridge one, ``allowlist`` on one started ``none``.
        """
        mode, network = network_policy.network_mode, self._env.config.network
        if network == STATIC_NETWORK.get(mode):
            return
        if network != ALLOWLIST or mode == NetworkMode.PUBLIC:
            raise ValueError(CANNOT_SWITCH.format(network=network, mode=mode.value))
        policy = None
        if mode == NetworkMode.ALLOWLIST:
            policy = NetworkPolicy(allow=network_policy.allowed_hosts, resolve=self._env.config.resolve)
        await self._call(self._env.set_network, policy)

    def _image_workdir(self) -> str:
        """The image's ``WORKDIR`` ("/" when it sets none): where Harbor's commands start."""
        argv = [self._fields.get("cli") or self.backend, "image", "inspect", "--format", "{{.Config.WorkingDir}}",
                self._env.config.image]
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        return done.stdout.strip() or "/"

    async def stop(self, delete: bool) -> None:
        """Remove the sandbox and everything it started (``delete`` or not: nothing of it is kept)."""
        if self._env is not None:
            await self._call(self._env.close)
        self._worker.shutdown(wait=False)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        """Run ``command`` in a fresh ``bash -c``; stdout and stderr merged in ``stdout``, as Harbor's docker does.

        Raises:
            RuntimeError: ``Command timed out after N seconds`` (Harbor's docker's message), the
                command's whole tree killed first.
        """
        merged = self._merge_env(env) or {}
        script = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in merged.items()) + command
        user = self._resolve_user(user)
        if user in ROOT_USERS:
            pass  # the image's user: root in ours
        elif str(user).isdigit():
            script = f"exec setpriv --reuid={user} --regid={user} --clear-groups bash -c {shlex.quote(script)}"
        else:
            script = f"exec runuser -u {shlex.quote(str(user))} -- bash -c {shlex.quote(script)}"
        result = await self._call(self._execute, script, cwd or self._workdir, timeout_sec)
        if result["extra"].get("timed_out"):
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(stdout=result["output"] or None, stderr=None, return_code=result["returncode"])

    def _execute(self, script: str, cwd: str, timeout: float | None) -> dict[str, Any]:
        try:
            return self._env.execute({"command": script}, cwd=cwd, timeout=timeout)
        except swe_sandbox.Submitted as exc:  # our agents' sentinel means nothing to Harbor
            return exc.result

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Copy a host file to ``target_path`` (into it, when that is a directory)."""
        await self._call(self._env.upload, source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copy the contents of a host directory into ``target_dir`` (created, or merged into)."""
        await self._call(self._env.upload, source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Copy a sandbox file to the host path ``target_path``."""
        await self._call(self._env.download, source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy the contents of a sandbox directory into the host's ``target_dir`` (overwriting files)."""
        await self._call(self._env.download, source_dir, target_dir)


class DockerEnvironment(SweSandboxEnvironment):
    """Harbor tasks in our ``docker`` sandboxes (user namespace, capabilities dropped, limits)."""

    backend = "docker"


class PodmanEnvironment(SweSandboxEnvironment):
    """Harbor tasks in our ``podman`` sandboxes."""

    backend = "podman"


class BwrapEnvironment(SweSandboxEnvironment):
    """Declared unsupported: every task is refused with ``UNSUPPORTED_BWRAP``."""

    backend = "bwrap"

    @classmethod
    def preflight(cls) -> None:
        """``harbor run`` stops here, before any trial, with ``UNSUPPORTED_BWRAP``."""
        raise SystemExit(UNSUPPORTED_BWRAP)

    def _validate_definition(self) -> None:
        raise RuntimeError(UNSUPPORTED_BWRAP)
