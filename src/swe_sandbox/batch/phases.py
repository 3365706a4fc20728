"""The network of each phase of a task's two sandboxes, and what the proxy decided in each.

A task's agent sandbox has two phases, ``setup`` (its ``setup_command``) then ``agent``; its
evaluation sandbox has ``setup`` then ``eval``. Each phase has a network (``none``, ``allowlist``
with its own allow-list, ``on``):

- agent: the environment config's own (``none``, ``allowlist``, or ``on`` for any network that
  reaches out: bwrap's ``on``, docker's ``bridge``, ``host``, a named network);
- setup: the task's ``setup_network`` (``setup_allow``), else the sandbox's other phase's
  network (the agent's; in the evaluation sandbox, the evaluation's, as before);
- eval: the task's ``eval_network`` (``eval_allow``); ``on`` is the environment config's own.

A sandbox's network cannot change between none/allowlist and on after start, so a sandbox
where a phase is ``allowlist`` is made with ``network: allowlist`` (the policy of its first
phase) and switched with ``set_network`` at the phase change; ``on`` must be both phases'
network. Backends without ``network`` (local, ssh) keep their own network whatever a phase
asks, except ``allowlist``, refused (``check_phases``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swe_sandbox import capabilities
from swe_sandbox.config import ALLOWLIST, NetworkedConfig
from swe_sandbox.environments import environment_class
from swe_sandbox.errors import ConfigError
from swe_sandbox.network.policy import NetworkPolicy

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.base import Environment

SETUP, AGENT, EVAL = "setup", "agent", "eval"
#: The two kinds of sandbox of a task: the agent's, the evaluation's.
SANDBOXES = (AGENT, EVAL)
NONE, ON = "none", "on"
#: Decisions kept per phase in a record; the rest are counted (``more``).
MAX_PHASE_DECISIONS = 200
#: Config keys of the network that a sandbox without network drops.
NETWORK_KEYS = ("allow", "resolve", "share_net")


@dataclass(frozen=True)
class PhaseNetwork:
    """The network of one phase.

    Attributes:
        phase (str): ``setup``, ``agent`` or ``eval``.
        network (str): ``none``, ``allowlist`` or ``on``; ``""`` on a backend without ``network``.
        allow (tuple[str, ...]): with ``allowlist``, the names it may reach (else empty).
    """

    phase: str
    network: str
    allow: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        """``{"network", "allow"}`` (``allow`` with ``allowlist`` only)."""
        return {"network": self.network or "backend's own", **({"allow": list(self.allow)} if self.network == ALLOWLIST else {})}


@dataclass(frozen=True)
class SandboxPlan:
    """How one sandbox of a task is made and switched.

    Attributes:
        config (dict[str, Any]): the environment config to make it with (before the task's fields).
        setup (PhaseNetwork): its first phase.
        work (PhaseNetwork): its second phase (``agent`` or ``eval``).
        resolve (dict[str, str]): the environment config's ``resolve`` (every allow-list phase's).
    """

    config: dict[str, Any]
    setup: PhaseNetwork
    work: PhaseNetwork
    resolve: dict[str, str]

    @property
    def switched(self) -> bool:
        """Whether ``set_network`` runs between the phases (made ``allowlist``, policies differ)."""
        return self.config.get("network") == ALLOWLIST and self._allow(self.setup) != self._allow(self.work)

    @staticmethod
    def _allow(phase: PhaseNetwork) -> tuple[str, ...] | None:
        return phase.allow if phase.network == ALLOWLIST else None

    def policy(self, phase: PhaseNetwork) -> NetworkPolicy | None:
        """``phase``'s policy for ``set_network`` (None: every connection refused)."""
        return NetworkPolicy(allow=list(phase.allow), resolve=self.resolve) if phase.network == ALLOWLIST else None


def own_network(env_config: dict[str, Any]) -> str:
    """The environment config's network as a phase's: ``none``, ``allowlist``, ``on``; ``""`` for a
    backend without ``network``.

    Raises:
        ConfigError: an unknown backend.
    """
    config_class = environment_class(str(env_config.get("backend", ""))).config_class
    if not issubclass(config_class, NetworkedConfig) or "network" not in config_class.model_fields:
        return ""
    network = env_config.get("network", config_class.model_fields["network"].default)
    if env_config.get("share_net") and "network" not in env_config:
        network = ON
    return network if network in (NONE, ALLOWLIST) else ON


def _phase(phase: str, asked: str | None, allow: list[str], fallback: PhaseNetwork,
           env_config: dict[str, Any]) -> PhaseNetwork:
    """The network a phase's field asks for; None: ``fallback``'s."""
    if asked is None:
        return PhaseNetwork(phase, fallback.network, fallback.allow)
    if asked == ALLOWLIST:
        return PhaseNetwork(phase, ALLOWLIST, tuple(allow or env_config.get("allow") or ()))
    return PhaseNetwork(phase, asked)


def sandbox_plan(task: Task, env_config: dict[str, Any], sandbox: str = AGENT) -> SandboxPlan:
    """The plan of ``task``'s agent or evaluation sandbox (the module docstring's rules).

    Args:
        task: the task.
        env_config: the environment config (with ``backend``).
        sandbox: ``agent`` (default) or ``eval``.

    Returns:
        SandboxPlan: its config and phases.

    Raises:
        ConfigError: ``on`` asked for one phase only, or ``allowlist`` on a backend without
            ``network`` (the message names the task, its line and the field).
    """
    own = PhaseNetwork(AGENT, own_network(env_config), tuple(env_config.get("allow") or ()))
    if sandbox == AGENT:
        work = own
    else:
        work = _phase(EVAL, None if task.eval_network == ON else task.eval_network, task.eval_allow, own, env_config)
    setup = _phase(SETUP, task.setup_network, task.setup_allow, work, env_config)
    where = f"task {task.instance_id!r} (line {task.source_line})"
    field = "setup_network" if task.setup_network is not None else "eval_network"
    if not own.network:
        return SandboxPlan(dict(env_config), *_unenforced(setup, work, f"{where}: {field}", env_config), resolve={})
    networks = {setup.network, work.network}
    if ON in networks and networks != {ON}:
        raise ConfigError(f"{where}: {field}: setup has network {setup.network!r} but {work.phase} has "
                          f"{work.network!r}: a sandbox's network cannot change to or from 'on' after it starts "
                          f"(use allowlist for the phase that needs the network)")
    return SandboxPlan(_made_with(env_config, setup, networks), setup, work, dict(env_config.get("resolve") or {}))


def _unenforced(setup: PhaseNetwork, work: PhaseNetwork, where: str,
                env_config: dict[str, Any]) -> tuple[PhaseNetwork, PhaseNetwork]:
    """The phases on a backend without ``network``: its own network (``""``); ``allowlist``
    refused (``where``: the task and the field that asked, for the message)."""
    for phase in (setup, work):
        if phase.network == ALLOWLIST:
            raise ConfigError(f"{where}: allowlist is not available on backend "
                              f"{env_config.get('backend')!r} (it has no network setting; bwrap, docker and podman have)")
    return PhaseNetwork(setup.phase, ""), PhaseNetwork(work.phase, "")


def _made_with(env_config: dict[str, Any], first: PhaseNetwork, networks: set[str]) -> dict[str, Any]:
    """The config a sandbox with phases of ``networks`` is made with (``first``: its first phase)."""
    if networks == {ON}:
        return dict(env_config)
    data = {k: v for k, v in env_config.items() if k not in NETWORK_KEYS}
    if ALLOWLIST not in networks:
        return {**data, "network": NONE}
    data.update(network=ALLOWLIST, allow=list(first.allow) if first.network == ALLOWLIST else [])
    if env_config.get("resolve"):
        data["resolve"] = dict(env_config["resolve"])
    return data


def check_allowlist(task: Task, sandbox: str, config: Any) -> None:
    """Refuse a plan's ``network: allowlist`` where the backend lacks it with this config (the
    exec fallback, a remote engine), before anything runs.

    Args:
        task: the task (named in the message).
        sandbox: ``agent`` or ``eval``.
        config: the sandbox's validated config (with the task's fields).

    Raises:
        ConfigError: naming the task, its line and why.
    """
    if getattr(config, "network", None) != ALLOWLIST:
        return
    cls = environment_class(config.backend)
    lacking = capabilities.missing_capabilities(cls, config).get(capabilities.NETWORK_ALLOWLIST)
    if lacking:
        raise ConfigError(f"task {task.instance_id!r} (line {task.source_line}): the {sandbox} sandbox needs "
                          f"network: allowlist, not available on this {config.backend} sandbox: {lacking}")


class PhaseLog:
    """What the proxy decided in each phase of one sandbox (``begin`` then ``enter`` the next).

    Args:
        plan: the sandbox's plan.
    """

    def __init__(self, plan: SandboxPlan) -> None:
        self.plan = plan
        self.phases: dict[str, dict[str, Any]] = {}
        self._environment: Environment | None = None
        self._current: PhaseNetwork | None = None
        self._start = 0

    def begin(self, environment: Environment, phase: PhaseNetwork) -> None:
        """Record ``environment``'s decisions from now on as ``phase``'s."""
        self._environment, self._current = environment, phase
        self._start = len(environment.network_decisions())

    def enter(self, environment: Environment) -> None:
        """The plan's second phase starts: the first one's record closed, ``set_network`` to the
        second's policy where the plan switches (also for a sandbox forked from a snapshot of the
        first phase, which ``begin`` never saw).

        Raises:
            SandboxError, ConfigError: as ``set_network``.
        """
        if self.plan.switched:  # first: what the stopped proxy logs as it ends is the first phase's
            environment.set_network(self.plan.policy(self.plan.work))
        if self._current is not None and self._environment is environment:
            self.phases[self._current.phase] = self._slice()
        self.begin(environment, self.plan.work)

    def _slice(self) -> dict[str, Any]:
        assert self._environment is not None and self._current is not None
        decisions = self._environment.network_decisions()[self._start:]
        kept = decisions[:MAX_PHASE_DECISIONS]
        return {**self._current.describe(), "decisions": kept, "more": len(decisions) - len(kept)}

    def summary(self) -> dict[str, Any]:
        """``{phase: {"network", "allow", "decisions" (at most MAX_PHASE_DECISIONS), "more"}}`` of
        every phase seen so far (the current one up to now)."""
        out = dict(self.phases)
        if self._current is not None:
            out[self._current.phase] = self._slice()
        return out
