"""What a backend can guarantee, by name: the vocabulary backends and the conformance kit share.

A ground-floor module: it imports nothing of swe_sandbox, so every backend may import it.

A backend declares what it LACKS, each with a reason, through a classmethod of its Environment
class (the default, when it has none, is to lack nothing)::

    @classmethod
    def missing_capabilities(cls, config) -> dict[str, str]:
        return {capabilities.LONG_LIVED_RUNNER: "one process per command, nothing lives between them"}

The answer may depend on the config (``runner: exec``) and on the host (running as root). A kit
test that needs a capability says so with ``@requires(...)`` (``swe_sandbox.testing.kit``); where
the backend lacks it, the test becomes ``xfail(strict=True, reason=<the backend's reason>)``: it
must fail there, and passing is an error (the declaration is then stale).

Facts (``HOST_ISOLATION``, ``HOST_VISIBLE_PROCESSES``) are capabilities tests branch on rather
than require: without them an attack is replaced by a harmless probe, or a host-side check is left
out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LONG_LIVED_RUNNER = "long_lived_runner"
PRIVATE_RUNNER_CHANNEL = "private_runner_channel"
UNREACHABLE_RUNNER_CHANNEL = "unreachable_runner_channel"
DIRECT_RUNNER_CHANNEL = "direct_runner_channel"
PRIVATE_COMMAND_OUTPUT = "private_command_output"
TAMPERPROOF_TIMEOUT = "tamperproof_timeout"
ORPHAN_SWEEP = "orphan_sweep"
NOT_HOST_ROOT = "not_host_root"
SETID_FREE_WORKSPACE = "setid_free_workspace"
FILES_OUTSIDE_WORKSPACE = "files_outside_workspace"
COMMAND_STDIN = "command_stdin"
SEPARATE_STDERR = "separate_stderr"
RUN_AS_USER = "run_as_user"
SNAPSHOT = "snapshot"
RESET_IN_PLACE = "reset_in_place"
SNAPSHOT_METADATA = "snapshot_metadata"
NETWORK_ALLOWLIST = "network_allowlist"
HOST_ISOLATION = "host_isolation"
HOST_VISIBLE_PROCESSES = "host_visible_processes"

#: Every capability, with what having it means.
CAPABILITIES: dict[str, str] = {
    LONG_LIVED_RUNNER: "one runner process lives across commands: it is every command's parent and sees "
                       "the sandbox vanish between commands",
    PRIVATE_RUNNER_CHANNEL: "a command cannot write into the channel that carries its own result",
    UNREACHABLE_RUNNER_CHANNEL: "no process in the sandbox can open the runner channel's ends (through /proc)",
    DIRECT_RUNNER_CHANNEL: "no engine or daemon relays the runner's frames: the host reads the runner's own pipes, "
                           "or a socket bound into the sandbox (``environments.direct``)",
    PRIVATE_COMMAND_OUTPUT: "a background job cannot write into a later command's output",
    TAMPERPROOF_TIMEOUT: "nothing a command starts through the sandbox's own helpers (its lifetime guard, "
                         "the binaries a timeout uses) outlives the command's timeout",
    ORPHAN_SWEEP: "a timeout ends the command's orphans even when they clear their token and trace fds",
    NOT_HOST_ROOT: "commands do not run as the host's root (nor may write its kernel settings)",
    SETID_FREE_WORKSPACE: "no setuid/setgid file made by a command reaches a host workspace",
    FILES_OUTSIDE_WORKSPACE: "upload/download reach any absolute path of the sandbox, not only the workspace",
    COMMAND_STDIN: "a command can be given bytes on its stdin (``execute(..., stdin=...)``) instead of /dev/null",
    SEPARATE_STDERR: "a command's stdout and stderr can be kept apart (``execute(..., separate_stderr=True)``)",
    RUN_AS_USER: "a command can run as another user of the sandbox (``execute(..., user=...)``)",
    SNAPSHOT: "the sandbox's filesystem state can be captured (``env.snapshot()``) and new sandboxes started "
              "from it (``snap.fork(n)``), each isolated from the others",
    RESET_IN_PLACE: "``env.reset(snap)`` kills every process but the runner, restores the snapshot's files in "
                    "place and proves it (else ``ResetFailed``)",
    SNAPSHOT_METADATA: "a snapshot keeps FIFOs, owners and its trees' own modes, and a reset puts back or catches "
                       "a change to them",
    NETWORK_ALLOWLIST: "``network: allowlist``: commands reach only the allowed names, through a proxy on the "
                       "host that the sandbox reaches by a socket bound in, with no route out of its own",
    HOST_ISOLATION: "commands run in a sandbox, not directly on a host (attacks on the host are tried "
                    "for real, not replaced by harmless probes)",
    HOST_VISIBLE_PROCESSES: "the sandbox's processes show in this host's /proc (same kernel)",
}


def missing_capabilities(environment_class: type, config: Any) -> dict[str, str]:
    """What ``environment_class`` lacks with ``config``: ``{capability: reason}``.

    Args:
        environment_class: an Environment subclass (its ``missing_capabilities`` classmethod, if any).
        config: the validated config the environment is made with.

    Returns:
        dict[str, str]: capability name -> why the backend lacks it; empty when it lacks nothing.

    Raises:
        ValueError: the backend names a capability that does not exist (a typo would hide a test),
            or its answer is not ``{capability: non-empty reason}``.
    """
    declare = getattr(environment_class, "missing_capabilities", None)
    gaps: Mapping[str, str] = declare(config) if declare is not None else {}
    if not isinstance(gaps, Mapping) or not all(isinstance(why, str) and why.strip() for why in gaps.values()):
        raise ValueError(f"{environment_class.__name__}.missing_capabilities(config) must return "
                         f"{{capability: reason}} with a non-empty reason each, got {gaps!r}")
    unknown = sorted(set(gaps) - set(CAPABILITIES))
    if unknown:
        raise ValueError(f"{environment_class.__name__} declares unknown capabilities {unknown} "
                         f"(known: {', '.join(CAPABILITIES)})")
    return dict(gaps)


def has_capability(environment: Any, capability: str) -> bool:
    """Whether ``environment`` (an Environment) has ``capability``: its backend does not declare it
    missing for the config it was made with (``missing_capabilities``)."""
    return capability not in missing_capabilities(type(environment), environment.config)
