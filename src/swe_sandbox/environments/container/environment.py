"""What the ``docker`` and ``podman`` backends share: one container per environment.

Lifecycle (through the engine's Python SDK): on first use the container is created with labels
(owner pid and start time, host, run id), the runner is attached, and the ``workspace`` is copied
in through the archive API. ``close()`` force-removes the container at once (no stop timeout) and
is idempotent; ``gc()`` (each backend's classmethod) removes containers whose owner process is gone.

The channel: ONE attach with stdin open for the life of the environment. The container's main
process is ``LAUNCHER``, which execs ``python3 -c BOOTSTRAP``: the runner is PID 1, so no init or
shell holds its pipes and no command can signal it; a single ``docker start --attach --interactive`` /
``podman --url ... start --attach --interactive`` CLI process carries the runner protocol, started
with ``spawn_runner`` (so every command is one round trip, ~0.7 ms of transport on top of the
runner's own work). Why this and not the alternatives, measured on this host:

- versus a ``docker exec -i`` into a ``sleep`` container: the same transport cost per command, but
  the exec costs ~60-70 ms more at start (runc exec), which puts sandbox start at 1.1-1.3x a bare
  ``docker run``; attached, start is ~0.85-1.0x. And the attach ties the container to its owner:
  when the owner dies (even ``kill -9``) stdin reaches end of file, the runner exits, and the
  container ends and is auto-removed, before ``gc`` is needed;
- versus the SDK's hijacked socket: transport cost measured equal (0.6-0.9 ms per round trip), and
  the CLI has none of the SDK's exec traps: it demultiplexes the 8-byte stream headers itself,
  half-closes stdin properly (end of file reaches the runner), has no client-side socket timeout
  (docker-py: 60 s by default), and it is the same on both engines, while podman-py's
  ``exec_run`` cannot stream stdin at all (it ignores ``socket=``; a string command is
  shlex-split). Lifecycle calls still go through the SDKs, with ``api_timeout``.

The lifetime guard ends a container after ``max_lifetime`` whatever its owner does: a thread of
the runner (PID 1: it exits, and the container with it), out of every command's reach; in the
exec fallback, a shell of the launcher sleeping until ``max_lifetime``, rounded up to whole
seconds, has passed on ``/proc/uptime`` (a root command can replace what it runs: see the README's
known limits). Logging is off (``none``): the runner protocol is not written to the engine's
container logs.

Images without python3 get the exec fallback (``swe_sandbox.environments.fallback``): the launcher
answers ``{"op": "nopython"}`` instead of the runner's ready frame and keeps the container (and
the attach, as the owner tether) alive; each command is one exec, the timeout enforced inside the
container, stdout and stderr merged inside it.

Safe defaults (DESIGN.md §5), each a config field: root inside is an unprivileged host uid
(``userns: remap``, a user namespace; a sandbox the engine cannot remap is refused, see
``_launcher``); network ``none``; all capabilities dropped but ``DEFAULT_CAP_ADD``;
``no-new-privileges``; pids, memory and CPU limits; an init process (exec fallback); optional
non-root ``user`` and ``read_only`` root (writable workspace and /tmp); only ``env`` and
``forward_env`` (plus ``DEFAULT_ENV``) enter the container.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shlex
import socket
import struct
import tarfile
import time
import uuid
import weakref
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from swe_sandbox import capabilities as cap
from swe_sandbox.config import ALLOWLIST, SANDBOX_PATH, NetworkedConfig
from swe_sandbox.environments import fallback
from swe_sandbox.environments.base import Channel, Environment, Session, spawn_runner
from swe_sandbox.environments.container.archive import (
    extract_chunks,
    place_symlink,
    tar_directory,
    tar_empty_dir,
    tar_path,
)
from swe_sandbox.environments.container.engine import (
    ENGINE_FILES,
    LABEL_BACKEND,
    LABEL_CREATED,
    LABEL_MANAGED,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    LABEL_RUN_ID,
    ContainerSpec,
    Engine,
    error_line,
    process_start_id,
)
from swe_sandbox.environments.container.engine import gc as engine_gc
from swe_sandbox.environments.container.image_ref import built_here, check_reference, is_loopback, parse_image
from swe_sandbox.environments.container.pull_errors import pull_error
from swe_sandbox.environments.container.pulling import PullRequest, pull
from swe_sandbox.environments.direct import CIDFILE_NAME, ChannelSocket, DirectChannel
from swe_sandbox.environments.fallback import ExecFallbackChannel, popen_exec
from swe_sandbox.errors import (
    BackendUnavailable,
    ConfigError,
    ProtocolError,
    SandboxDied,
    SandboxError,
    SandboxStartError,
)
from swe_sandbox.network.policy import SANDBOX_NET_DIR
from swe_sandbox.runner import BOOTSTRAP

if TYPE_CHECKING:  # imported where used: a start (a one-shot exec) needs no snapshot code
    from swe_sandbox.environments.container.snapshot import ContainerSnapshot

#: Capabilities kept by default (everything else is dropped). Root in the sandbox can still own,
#: read and write every file of the sandbox (CHOWN, DAC_OVERRIDE, FOWNER), switch users as package
#: managers and test suites do (SETUID, SETGID), and the runner can kill a timed-out tree whatever
#: user it runs as (KILL). Not kept, among others: NET_RAW (raw sockets), MKNOD, SYS_CHROOT,
#: SETFCAP, SETPCAP, FSETID, NET_BIND_SERVICE, AUDIT_WRITE (Docker's defaults), and of course
#: SYS_ADMIN, SYS_PTRACE, NET_ADMIN. With ``no-new-privileges`` no setuid binary can regain any.
DEFAULT_CAP_ADD = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]
#: Linux capability names (capabilities(7)), without the CAP_ prefix.
KNOWN_CAPS = frozenset(
    "AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE "
    "DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN MAC_OVERRIDE "
    "MKNOD NET_ADMIN NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID SETPCAP SETUID "
    "SYS_ADMIN SYS_BOOT SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE SYS_RAWIO SYS_RESOURCE "
    "SYS_TIME SYS_TTY_CONFIG SYSLOG WAKE_ALARM".split())

#: tmpfs mounts a read-only root gets (the runner and the exec fallback need a writable /tmp).
READ_ONLY_TMPFS = {"/tmp": "rw,nosuid,nodev,mode=1777", "/var/tmp": "rw,nosuid,nodev,mode=1777",
                   "/run": "rw,nosuid,nodev,mode=755"}
#: Why a read-only container has no snapshots.
READ_ONLY_SNAPSHOT = ("read_only: the workspace is a volume and /tmp a tmpfs, which an engine's commit does not keep "
                      "(snapshots need read_only: false)")
NOPYTHON_FRAME = {"op": "nopython"}
#: What the launcher answers instead of starting anything when the container was to be remapped
#: (``userns: remap``) but the host's uid or gid 0 is mapped into it (or the maps cannot be read).
HOST_ROOT_FRAME = {"op": "host-root"}


def _printf_frame(frame: dict[str, str]) -> str:
    """A ``printf`` writing ``frame`` as one unauthenticated frame (4-byte length, then the JSON)."""
    data = json.dumps(frame).encode()
    octal = "".join(f"\\{b:03o}" for b in struct.pack(">I", len(data)))
    return f"printf '{octal}%s' '{data.decode()}'"


def _launcher() -> str:
    """The container's main process
    (``sh -c LAUNCHER swe-sandbox PYTHON BOOTSTRAP MAX_LIFETIME USERNS``).

    First, with ``USERNS`` ``remap``, it checks the container's user namespace from inside, before
    anything else runs: when the host's uid 0 or gid 0 appears in ``/proc/self/uid_map`` or
    ``gid_map`` (no user namespace: ``0 0 4294967295``), or a map cannot be read, it writes the
    ``host-root`` frame and exits, and the host refuses the sandbox. This holds whatever the engine
    or ``create_args`` did (a Docker daemon without ``userns-remap``, a Podman without ranges).

    With that python it then ``exec``s the runner (``-I -S``: isolated, no ``site``, so the sandbox's
    PYTHON* variables do not reach the runner itself, and ~15 ms less start), which becomes PID 1:
    nothing else in the container holds its pipes, no command can signal it (the kernel drops
    signals from inside a pid namespace to its init unless it handles them), and it keeps the
    lifetime guard itself (``max_lifetime`` in its hello). Without that python it writes the
    ``nopython`` frame, starts the lifetime guard in the background and holds the container until
    its stdin (the owner's attach) ends.
    """
    return (
        'if [ "$4" = remap ]; then for m in uid_map gid_map; do s=; '
        'while read -r a o b; do if [ "$o" = 0 ]; then s=root; break; fi; s=ok; done </proc/self/$m; '
        f'[ "$s" = ok ] || {{ {_printf_frame(HOST_ROOT_FRAME)}; exit 1; }}; done; fi; '
        'if [ -n "$1" ] && command -v "$1" >/dev/null 2>&1; then exec "$1" -I -S -c "$2"; fi; '
        "trap 'exit 0' TERM; "
        # the guard: at the deadline (on /proc/uptime, in whole seconds), SIGKILL to every process
        # but PID 1, then SIGTERM to PID 1 (init, or this shell when init is off; both exit on it).
        # A `pkill sleep` from a command only cuts one nap short: the guard sleeps again.
        '(read -r u _ </proc/uptime; end=$((${u%%.*} + $3)); '
        'while read -r u _ </proc/uptime; [ "${u%%.*}" -lt "$end" ]; do sleep $((end - ${u%%.*})); done; '
        'kill -9 -1; kill -TERM 1) </dev/null >/dev/null 2>&1 & '
        f"{_printf_frame(NOPYTHON_FRAME)}; "
        # no python: hold the container until the owner's attach ends; a stray TERM (`kill 1`
        # forwarded by init) only interrupts `wait`, and the loop waits again
        'trap : TERM; exec 3<&0 </dev/null >/dev/null 2>&1; cat <&3 & c=$!; '
        'while kill -0 $c 2>/dev/null; do wait $c; done; kill -TERM 1 2>/dev/null; exit 0'
    )


LAUNCHER = _launcher()
#: The longest ``pull_timeout`` accepted: 30 days, in seconds.
PULL_TIMEOUT_MAX_S = 30 * 86400.0
#: Reads the memory cgroup's OOM-kill counter (cgroup v2, then v1) from inside the container.
OOM_PROBE = ("cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control "
             "2>/dev/null || true")


#: How long a failed ``CLI run``'s container may take to go before the SDK path creates (seconds).
REMOVAL_WAIT_S = 10.0

#: ``network`` values of ours, as the engine's network mode: ``allowlist`` has none of its own.
ENGINE_NETWORK = {ALLOWLIST: "none", "on": "bridge"}


class ContainerConfig(NetworkedConfig):
    """Config shared by the ``docker`` and ``podman`` backends."""

    image: str = "swe-sandbox/base"
    """Image to run; ``swe-sandbox image build`` builds the default (and ``swe-sandbox/nopython``).
    Images named ``swe-sandbox/...`` or ``swe-sandbox-suite/...`` without a registry are built
    here and never pulled, whatever ``image_pull`` says (``image_ref.BUILT_IMAGES``)."""
    image_pull: Literal["missing", "always", "never"] = "missing"
    """When the image is pulled from its registry (through the engine's SDK, with the engine's own
    credentials): ``missing`` (default) when the engine does not have it; ``always`` before every
    container (a cheap manifest check when nothing changed); ``never``: a missing image is an
    ``ImagePullError``. Sandboxes of one process that need the same image share one pull."""
    pull_timeout: float = Field(1800.0, gt=0, le=PULL_TIMEOUT_MAX_S)
    """Seconds a pull may take (default 1800, for images of several GB); then it is stopped and the
    sandbox fails with ``ImagePullError`` (reason ``timeout``)."""
    insecure_registries: list[str] = Field(default_factory=list)
    """Podman only: registries (``host[:port]``) pulled from without TLS verification (plain HTTP
    allowed), besides those on loopback (``localhost``, 127.0.0.0/8, ``::1``), which always are.
    Docker's are the daemon's (``--insecure-registry``; it treats 127.0.0.0/8 so by default)."""
    workspace: str | None = None
    """Host directory copied into ``mount_point`` when the container starts (None: an empty one)."""
    mount_point: str = "/workspace"
    """The container's working directory, where ``workspace`` lands."""
    runner: Literal["auto", "python", "exec"] = "auto"
    """``python``: the runner as the container's main process, attached (one round trip per
    command); ``exec``: the one-exec-per-command fallback; ``auto``: the runner if the image has
    ``python`` (>= 3.6), else the fallback."""
    python: str = "python3"
    """Interpreter inside the image that runs the runner."""
    channel: Literal["auto", "socket", "attach"] = "auto"
    """How the host reaches the runner: ``socket`` (the direct channel, ``environments.direct``: a
    unix socket of this host bound into the container, ~1 ms less per command than the attach and
    no daemon CPU), ``attach`` (every frame through the engine's attach stream), ``auto`` (default:
    ``socket`` with a local engine, ``attach`` with a remote one, which cannot bind this host's
    directories). The exec fallback has no runner: neither applies."""
    network: str = "none"
    """Network mode: ``none`` (default: no network at all), ``allowlist`` (only the names of
    ``allow``, through a proxy on the host reached by a socket bound into the container:
    ``swe_sandbox.network``; the container itself has no network; needs the runner and a local
    engine), ``on`` or ``bridge`` (the engine's default network), ``host`` (needs ``userns: host``:
    neither engine shares the host's network namespace with a remapped container), or a network name."""
    cap_drop: list[str] = Field(default_factory=lambda: ["ALL"])
    cap_add: list[str] = Field(default_factory=lambda: list(DEFAULT_CAP_ADD))
    """Capabilities kept after ``cap_drop`` for root (default: ``DEFAULT_CAP_ADD``, documented
    above); a non-root ``user`` gets none."""
    no_new_privileges: bool = True
    pids_limit: int | None = Field(1024, gt=0)
    """Most processes and threads at once in the container (a fork bomb stops there)."""
    memory: str | None = "4g"
    """Memory limit (``512m``, ``4g``; swap is not added on top). None: unlimited."""
    cpus: float | None = Field(2.0, gt=0)
    """CPU limit in cores. None: unlimited."""
    user: str = ""
    """``uid[:gid]`` or a user name of the image; empty: the image's user (root for ours). The
    workspace directory and files copied in (``workspace``, ``upload``) belong to a numeric
    ``uid[:gid]`` (docker with ``read_only``: the directory stays root's), else to root; a numeric
    non-root ``uid`` also gets ``HOME`` = ``mount_point`` (unless ``env`` sets it)."""
    read_only: bool = False
    """Read-only root filesystem; the workspace, /tmp, /var/tmp and /run stay writable."""
    tmpfs: dict[str, str] = Field(default_factory=dict)
    """Extra tmpfs mounts: ``{path: options}``, e.g. ``{"/cache": "size=256m"}``."""
    userns: Literal["remap", "host"] = Field("remap", validate_default=True)
    """``remap`` (default): every uid of the container, root included, is an unprivileged host
    uid (a user namespace). Podman gives each container its own 65536 ids (``userns=auto``) from
    the ``containers`` ranges of /etc/subuid and /etc/subgid; Docker maps every container onto the
    ``dockremap`` ranges when the daemon runs with ``--userns-remap=default``. Both are set up by
    ``scripts/setup-engines.sh``. When the engine does not do it, the sandbox does not start
    (``BackendUnavailable`` saying how to enable it; checked inside the container before anything
    runs), never silently as host root. ``host``: no user namespace, root inside is root on the
    host (capabilities dropped as above): an explicit opt-out, for engines you cannot configure."""
    init: bool = True
    """With the exec fallback (``runner: exec``), run an init process (docker-init/catatonit) as
    PID 1: reaps zombies, forwards signals. With the runner, the runner itself is PID 1 (it reaps
    zombies, and no other process then holds its pipes)."""
    max_lifetime: float = Field(86400.0, gt=0)
    """Seconds after which the container ends by itself, whatever happens to its owner."""
    hostname: str = "swe-sandbox"
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels on the container (the ``org.swe-sandbox.*`` ones are always set)."""
    url: str = ""
    """Engine API socket, e.g. ``unix:///var/run/docker.sock``; empty: the engine's default."""
    cli: str = ""
    """The engine's command-line client (used for the runner's exec); empty: found on PATH."""
    api_timeout: float = Field(600.0, gt=0)
    """Socket timeout of SDK calls, seconds (the docker SDK's own default, 60 s, is too short for
    big archives)."""
    run_id: str = ""
    """Identifier put in the container's name and labels; empty: a random one."""
    create_args: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the SDK's ``containers.create`` (engine-specific, unchecked)."""

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str) -> str:
        return check_reference(value)

    @field_validator("user", mode="before")
    @classmethod
    def _user_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value  # -c user=1000

    @field_validator("memory")
    @classmethod
    def _memory_size(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+)?[bkmg]?", value.strip().lower()):
            raise ValueError(f"{value!r} is not a size: a number with an optional unit b, k, m or g (e.g. 512m, 4g)")
        return value

    @field_validator("userns")
    @classmethod
    def _host_network_needs_host_userns(cls, value: str, info: ValidationInfo) -> str:
        if value == "remap" and info.data.get("network") == "host":
            raise ValueError("network: host shares the host's network namespace, which Docker and Podman refuse to a "
                             "container with a user namespace (userns: remap, the default): set userns: host as well "
                             "(root in the sandbox is then root on the host), or use network: bridge")
        return value

    @field_validator("cap_add", "cap_drop")
    @classmethod
    def _capability_names(cls, value: list[str]) -> list[str]:
        bad = [c for c in value if not re.fullmatch(r"(CAP_)?[A-Z_]+", c.upper()) or
               (c.upper().removeprefix("CAP_") not in KNOWN_CAPS and c.upper() != "ALL")]
        if bad:
            raise ValueError(f"unknown capabilities {bad} (known: ALL, {', '.join(sorted(KNOWN_CAPS))})")
        return value


class ContainerEnvironment(Environment):
    """Commands run in one container per environment (base of ``docker`` and ``podman``)."""

    config_class: ClassVar[type[ContainerConfig]] = ContainerConfig
    engine_class: ClassVar[type[Engine]] = Engine
    isolation = ("container: own user (root inside is an unprivileged host uid), pid, net, mount, ipc and uts "
                 "namespaces, no network, capabilities dropped, no-new-privileges, pids/memory/cpu limits")
    isolation_host_userns = ("container: NO USER NAMESPACE (userns: host): root inside IS the host's root, "
                             "with capabilities dropped and no-new-privileges; own pid/net/mount/ipc/uts "
                             "namespaces, no network, pids/memory/cpu limits")
    config: ContainerConfig
    volatile_dirs = ("/dev/shm", "/dev/mqueue")

    @classmethod
    def missing_capabilities(cls, config: ContainerConfig) -> dict[str, str]:
        """What the conformance kit must not expect here (``swe_sandbox.capabilities``)."""
        gaps = {cap.SNAPSHOT: READ_ONLY_SNAPSHOT, cap.RESET_IN_PLACE: READ_ONLY_SNAPSHOT} if config.read_only else {}
        url = config.url or cls.engine_class.default_url()
        if not url.startswith("unix://"):
            gaps[cap.NETWORK_ALLOWLIST] = (f"a remote engine ({url}): the proxy's socket on this host cannot be "
                                           "bound into its containers")
        if not url.startswith("unix://") or config.channel == "attach":
            gaps[cap.DIRECT_RUNNER_CHANNEL] = ("channel: attach: every frame goes through the engine's attach stream"
                                               if config.channel == "attach" else
                                               f"a remote engine ({url}): this host's socket cannot be bound "
                                               "into its containers, so frames go through the attach stream")
        if config.runner != "exec":
            return {**gaps, cap.RUN_AS_USER: f"the runner runs as the configured user {config.user!r}, not root"} \
                if config.user.partition(":")[0] not in ("", "0", "root") else gaps
        return {**fallback.missing_capabilities(), **gaps,
                cap.TAMPERPROOF_TIMEOUT: "exec fallback: the lifetime guard is a shell run by the container's root, so "
                                         "a root command can make it exec anything (what it starts descends from no "
                                         "command, and survives the command's timeout)"}

    def _snapshot(self) -> ContainerSnapshot:
        """The container's whole root, committed (``container.snapshot``)."""
        from swe_sandbox.environments.container.snapshot import ArchiveSnapshot, ContainerSnapshot

        kind = ContainerSnapshot if self.engine.commit_keeps_owners or self.config.userns == "host" else ArchiveSnapshot
        return kind.take(self)

    def __init__(self, config: ContainerConfig):
        super().__init__(config)
        if config.workspace is not None and not Path(config.workspace).is_dir():
            raise ConfigError(f"environment.workspace: {config.workspace} is not a directory")
        if not config.mount_point.startswith("/"):
            raise ConfigError(f"environment.mount_point: must be an absolute path (got {config.mount_point!r})")
        if config.channel == "socket" and not (config.url or self.engine_class.default_url()).startswith("unix://"):
            raise ConfigError("environment.channel: socket needs a local engine (a unix:// url): a remote engine "
                              "cannot bind this host's socket; use channel: auto or attach")
        self.run_id = config.run_id or uuid.uuid4().hex[:12]
        self.container_id: str | None = None
        self.mode: str | None = None
        self._engine: Engine | None = None
        self._finalizer: weakref.finalize[[Engine, str], ContainerEnvironment] | None = None
        self._final_state: dict[str, Any] | None = None
        self._oom_kills = 0
        self._tether: Channel | None = None
        self._listening: ChannelSocket | None = None
        #: How the host reaches the runner: ``socket`` (the direct channel) or ``attach``.
        self.channel_kind = "attach"
        self._started_at: float | None = None
        self.engine_files: dict[str, str | None] = {}
        if config.userns == "host":
            self.isolation = self.isolation_host_userns

    # -- engine ---------------------------------------------------------------------------------
    @property
    def _cid(self) -> str:
        """``container_id`` of the started sandbox (None once closed, maybe from another thread)."""
        cid = self.container_id
        if cid is None:
            raise SandboxError("this environment is closed")
        return cid

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = self.engine_class(self.config.url, self.config.api_timeout, self.config.cli)
        return self._engine

    @classmethod
    def gc(cls, *, dry_run: bool = False, all_hosts: bool = False) -> list[dict[str, str]]:
        """Remove this engine's swe-sandbox containers whose owner process is gone (``engine.gc``).

        Args:
            dry_run: only say what would be removed. Default False.
            all_hosts: also containers created from other hosts. Default False.

        Returns:
            list[dict[str, str]]: one entry per container looked at (see ``container.engine.gc``).
        """
        return engine_gc(cls.engine_class(), dry_run=dry_run, all_hosts=all_hosts)

    @classmethod
    def unavailable_reason(cls, url: str = "", image: str | None = None) -> str | None:
        engine = cls.engine_class(url)
        reason = engine.unavailable_reason()
        if reason is None and image is not None and not engine.has_image(image):
            return f"{engine.name} has no image {image}; build it with `swe-sandbox image build`"
        return reason

    # -- what gets created ----------------------------------------------------------------------
    def labels(self) -> dict[str, str]:
        return {
            **self.config.labels,
            LABEL_MANAGED: "1",
            LABEL_BACKEND: self.engine_class.name,
            LABEL_OWNER_PID: str(os.getpid()),
            LABEL_OWNER_START: process_start_id(os.getpid()) or "",
            LABEL_OWNER_HOST: socket.gethostname(),
            LABEL_RUN_ID: self.run_id,
            LABEL_CREATED: str(int(time.time())),
        }

    @property
    def non_root(self) -> bool:
        """Whether ``user`` names someone else than root (then no capability is added: Docker
        would not make them effective anyway, and Podman would hand them to that user)."""
        name = self.config.user.partition(":")[0]
        return name not in ("", "0", "root")

    def _home(self) -> dict[str, str]:
        """A numeric non-root ``user`` gets the workspace (theirs) as HOME: for a uid the image's
        passwd lacks, Docker would say ``/`` and Podman the working directory; ``env`` may override."""
        uid = self.config.user.partition(":")[0]
        return {"HOME": self.config.mount_point} if uid.isdigit() and uid != "0" else {}

    def network_binds(self) -> dict[str, str]:
        """``network: allowlist``: the proxy's socket directory, bound at ``SANDBOX_NET_DIR``."""
        return {str(self.net_dir): SANDBOX_NET_DIR} if self.net_dir is not None else {}

    @property
    def direct_channel(self) -> bool:
        """Whether the runner is reached over the direct channel (``channel``, ``environments.direct``)."""
        return self.config.runner != "exec" and not cap.missing_capabilities(type(self), self.config).get(
            cap.DIRECT_RUNNER_CHANNEL)

    def channel_binds(self) -> dict[str, str]:
        """The direct channel's host directory, bound at ``direct.SANDBOX_CHANNEL_DIR``."""
        return self._listening.binds() if self._listening is not None else {}

    @property
    def container_name(self) -> str:
        """The container's name, ``swe-sandbox-<run_id>``."""
        return f"swe-sandbox-{self.run_id}"

    def container_spec(self) -> ContainerSpec:
        cfg = self.config
        python = "" if cfg.runner == "exec" else cfg.python
        return ContainerSpec(
            image=cfg.image,
            command=["sh", "-c", LAUNCHER, "swe-sandbox", python, BOOTSTRAP, str(math.ceil(cfg.max_lifetime)),
                     cfg.userns],
            name=self.container_name,
            labels=self.labels(),
            environment=self.sandbox_env({"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", **self._home()}),
            working_dir=cfg.mount_point,
            hostname=cfg.hostname,
            init=cfg.init and cfg.runner == "exec",  # else the runner is PID 1 (see _launcher)
            network=ENGINE_NETWORK.get(cfg.network, cfg.network),
            binds={**self.network_binds(), **self.channel_binds()},
            cap_add=[] if self.non_root else list(cfg.cap_add),
            cap_drop=list(cfg.cap_drop),
            no_new_privileges=cfg.no_new_privileges,
            pids_limit=cfg.pids_limit,
            memory=cfg.memory,
            cpus=cfg.cpus,
            user=cfg.user,
            read_only=cfg.read_only,
            tmpfs={**(READ_ONLY_TMPFS if cfg.read_only else {}), **cfg.tmpfs},
            workspace_volume=cfg.read_only,
            userns=cfg.userns,
            extra=dict(cfg.create_args),
        )

    # -- lifecycle ------------------------------------------------------------------------------
    def pull_request(self) -> PullRequest:
        """How this sandbox's image is pulled (``swe_sandbox.environments.container.pulling``)."""
        cfg = self.config
        registry = parse_image(cfg.image).registry
        return PullRequest(backend=self.engine_class.name, url=cfg.url, image=cfg.image,
                           insecure=is_loopback(registry) or registry in cfg.insecure_registries,
                           timeout=cfg.pull_timeout)

    @property
    def pull_policy(self) -> str:
        """``image_pull``, except ``never`` for images built here (``image_ref.built_here``)."""
        return "never" if built_here(self.config.image) else self.config.image_pull

    def pull_image(self) -> None:
        """Get ``image`` into the engine as ``image_pull`` says, creating nothing (``swe-sandbox
        image pull``): ``missing`` pulls it when absent, ``always`` pulls it, ``never`` only checks.

        Raises:
            ImagePullError: the pull failed, or (``never``) the image is absent.
        """
        policy, image = self.pull_policy, self.config.image
        if policy == "never":
            if not self.engine.has_image(image):
                raise pull_error(self.engine.name, image, "never")
            return
        pull(self.pull_request(), present=(lambda: self.engine.has_image(image)) if policy == "missing" else None)

    def _create(self) -> str:
        """Create the container, pulling its image first as ``image_pull`` says."""
        spec, policy = self.container_spec(), self.pull_policy
        if policy == "always":
            pull(self.pull_request())
        try:
            cid = self._create_container(spec)
        except _ImageMissing:
            if policy != "missing":
                raise pull_error(self.engine.name, spec.image, "never") from None
            pull(self.pull_request(), present=lambda: self._has_image(spec.image))
            cid = self._create_container(spec)  # still missing: _ImageMissing is a SandboxStartError
        self._adopt(cid)
        return cid

    def _create_container(self, spec: ContainerSpec) -> str:
        """``engine.create``, its failure translated (``_ImageMissing`` when the image is absent)."""
        try:
            return self.engine.create(spec)
        except self.engine.errors as exc:
            reason = self.engine.unavailable_reason()  # checked only now: a ping costs ~10 ms
            if reason:
                raise BackendUnavailable(reason) from None
            if spec.userns == "remap" and self.engine.is_userns_error(exc):
                raise BackendUnavailable(self._host_root_reason(error_line(exc))) from None
            if self.engine.is_not_found(exc) or not self._has_image(spec.image):
                raise _ImageMissing(f"{self.engine.name}: no image {spec.image} (not even after a pull)") from None
            raise SandboxStartError(f"{self.engine.name}: cannot create the container: {error_line(exc)}") from None

    def _host_root_reason(self, what: str) -> str:
        """Why a ``userns: remap`` sandbox was refused, how to enable remapping, how to opt out."""
        return (f"{self.engine.name}: refusing to start a sandbox whose root would be the host's root "
                f"({what}). {self.engine.userns_help} Or opt out, knowing that root in the sandbox is then "
                "root on the host: userns: host (-c environment.userns=host).")

    def _has_image(self, image: str) -> bool:
        try:
            return self.engine.has_image(image)
        except self.engine.errors:
            return True  # unknown: report the create error as it is

    def _spawn(self, argv: list[str], cli_env: dict[str, str]) -> Channel:
        """The attach (``argv``: the CLI's ``start --attach`` or ``run --interactive``), with the
        runner; over the direct channel when there is one (its socket made in ``_open_channel``
        before the container, which binds its directory)."""
        options: dict[str, Any] = {"max_lifetime": self.config.max_lifetime}
        listening, self._listening = self._listening, None
        if listening is None:
            return spawn_runner(argv, cli_env, **options)
        try:
            return spawn_runner(argv, cli_env, make=functools.partial(DirectChannel, listening=listening),
                                channel=listening.sandbox_path, **options)
        except BaseException:
            listening.close()
            raise

    def _open_channel(self) -> Session:
        self._started_at = time.monotonic()  # before the guard's clock starts: max_lifetime is never early
        if self.direct_channel:
            try:
                self._listening = ChannelSocket()
            except OSError as exc:
                raise SandboxStartError(f"{self.engine.name}: cannot make the direct channel's socket: {exc}") from None
        cli_env = self.engine.cli_env()
        try:
            channel = self._run_by_cli(cli_env) or self._spawn(self.engine.attach_argv(self._create()), cli_env)
        except BaseException:
            if self._listening is not None:
                self._listening.close()
                self._listening = None
            raise
        cid = self._cid
        try:
            first = channel.ready(self.config.start_timeout,
                                  unauthenticated=(NOPYTHON_FRAME["op"], HOST_ROOT_FRAME["op"]))
        except SandboxDied:
            why = channel.diagnose() or self.describe_state()
            channel.close(wait=0.5)
            self._stop()
            raise SandboxStartError(f"{self.engine.name}: the container did not start: {why}") from None
        except ProtocolError as exc:  # e.g. a connection to the direct channel that was not the runner's
            channel.close(wait=0.5)
            self._stop()
            raise SandboxStartError(f"{self.engine.name}: the runner's first frame was not trusted: {exc}") from None
        if first.get("op") == HOST_ROOT_FRAME["op"]:  # the launcher ran nothing else
            channel.close(wait=0.5)
            self._stop()
            raise BackendUnavailable(self._host_root_reason("the host's uid 0 is mapped into the container"))
        if first.get("op") != NOPYTHON_FRAME["op"]:  # the runner's ready: Environment.start reads it again
            self.mode = "runner"
            self._check_channel(channel)
            return channel
        if self.config.runner == "python":
            channel.close(wait=0.5)
            self._stop()
            raise SandboxStartError(f"{self.engine.name}: image {self.config.image} has no {self.config.python} "
                                    "for the runner (set runner: auto or exec to use the exec fallback)")
        self.mode = "exec"
        if isinstance(channel, DirectChannel):
            channel.stop_listening()  # no runner will connect
        self._tether = channel  # stays attached: ends the container if this process dies
        return ExecFallbackChannel(popen_exec(self.engine.exec_argv(cid, []), cli_env),
                                   info={"cwd": self.config.mount_point}, describe_death=self.describe_state,
                                   sweep_orphans=True, shared_clock=self.engine.url.startswith("unix://"))

    def _run_by_cli(self, cli_env: dict[str, str]) -> Channel | None:
        """Create, start and attach in one CLI process (``engine.run_argv``: no SDK on this path),
        where the engine's CLI can say the whole spec, the channel is direct and the image needs no
        pull first; the channel, its runner's first frame read, or None.

        None too when the CLI exited before that frame (no image, a refused option, an engine
        down): what is left of it is removed and a new channel socket made, so the SDK path
        (``_create``) can pull, or say why in its own words.

        Raises:
            SandboxStartError: no first frame within ``start_timeout`` (the CLI still waiting), or
                the first frame was not the runner's."""
        listening = self._listening
        if listening is None or self.pull_policy == "always":
            return None
        cidfile = listening.dir / CIDFILE_NAME  # in our own directory: no other user can plant a link there
        launch = self.engine.run_argv(self.container_spec(), str(cidfile))
        if launch is None:
            return None
        argv, values = launch
        channel = self._spawn(argv, {**cli_env, **values})
        deadline = time.monotonic() + self.config.start_timeout
        try:
            channel.ready(self.config.start_timeout, unauthenticated=(NOPYTHON_FRAME["op"], HOST_ROOT_FRAME["op"]))
            self._adopt(cidfile.read_text().strip())
        except (SandboxDied, OSError) as exc:
            # End of file before the deadline: the CLI gave up (its exit status may not be there
            # yet: a process closes its pipes before it becomes a zombie, so no poll() here).
            timed_out = time.monotonic() >= deadline
            why = channel.diagnose() or str(exc)
            channel.close(wait=0.5)
            self._forget_by_name()
            if timed_out:  # no answer within start_timeout: slow, not refused (no second try)
                raise SandboxStartError(f"{self.engine.name}: the container did not start: {why}") from None
            self._listening = ChannelSocket()
            return None
        except ProtocolError as exc:  # e.g. a connection to the direct channel that was not the runner's
            self._adopt(self.container_name)
            channel.close(wait=0.5)
            self._stop()
            raise SandboxStartError(f"{self.engine.name}: the runner's first frame was not trusted: {exc}") from None
        finally:
            cidfile.unlink(missing_ok=True)
        return channel

    def _forget_by_name(self) -> None:
        """Remove what a failed ``CLI run`` left under this sandbox's name, and wait until the name is
        free again (an auto-removal may still be under way), at most ``REMOVAL_WAIT_S`` seconds."""
        deadline = time.monotonic() + REMOVAL_WAIT_S
        try:
            self.engine.remove(self.container_name)
            while self.engine.inspect(self.container_name) is not None and time.monotonic() < deadline:
                time.sleep(0.05)  # polled: the engine's removal has no event we could wait on here
        except self.engine.errors:
            pass  # the SDK path's create says what is wrong

    def _adopt(self, cid: str) -> None:
        """``cid`` is this sandbox's container: removed even if close() is never called."""
        self.container_id = cid
        self._finalizer = weakref.finalize(self, _remove_quietly, self.engine, cid)

    def _check_channel(self, channel: Channel) -> None:
        """Record the channel the runner answered on; ``channel: socket`` refuses the attach."""
        kind = self.channel_kind = channel.kind if isinstance(channel, DirectChannel) else "attach"
        if kind == "attach" and self.config.channel == "socket":
            why = channel.diagnose()
            channel.close(wait=0.5)
            self._stop()
            raise SandboxStartError(f"{self.engine.name}: the runner did not reach the direct channel "
                                    f"(channel: socket): {why}")

    def _after_start(self) -> None:
        """Record the container's facts, copy the workspace in."""
        self.info.setdefault("mode", self.mode)
        self.info["container_id"] = self.container_id
        #: The engine's own files (``ENGINE_FILES``) as the container started: a reset checks them.
        resettable = self.mode == "runner" and cap.has_capability(self, cap.RESET_IN_PLACE)
        self.engine_files = self.path_entries(ENGINE_FILES) if resettable else {}
        self.info["userns"] = self.config.userns
        self.info["channel"] = self.channel_kind if self.mode == "runner" else "exec"
        try:
            if self._owner() != (0, 0):  # the engine made the working directory root's
                self._hand_over_workspace()
            if self.config.workspace is not None:
                self.engine.put_archive(self._cid, self.config.mount_point,
                                        tar_directory(Path(self.config.workspace), self._owner()))
        except self.engine.errors + (tarfile.TarError,) as exc:
            self.close()
            raise SandboxStartError(f"{self.engine.name}: cannot set up the workspace: {error_line(exc)}") from None

    def _explain_death(self, exc: SandboxDied) -> SandboxDied:
        """Add what became of the container (and whether it reached ``max_lifetime``)."""
        state = describe(self._final_state)
        if self._started_at and time.monotonic() - self._started_at >= self.config.max_lifetime:
            state += f"; it reached its max_lifetime of {_num(self.config.max_lifetime)} s"
        return SandboxDied(f"{exc}{' (' + state + ')' if state not in str(exc) else ''}")

    def _check_result(self, result: dict[str, Any]) -> None:
        if result["returncode"] == 137 and not result["extra"].get("timed_out") and self.config.memory:
            self._mark_oom(result)

    def _mark_oom(self, result: dict[str, Any]) -> None:
        """A SIGKILLed command: say so clearly when the memory cgroup's OOM killer did it."""
        try:
            probe = self._run(OOM_PROBE, "/", timeout=10)
        except SandboxError:
            return
        kills = 0
        for line in probe["output"].splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                kills = int(value)
        if kills > self._oom_kills:
            self._oom_kills = kills
            result["exception_info"] = (f"The command was killed by the out-of-memory killer: the sandbox's memory "
                                        f"limit ({self.config.memory}) was reached")
            result["extra"]["oom_killed"] = True

    def _interrupt(self) -> None:
        self._stop()  # the running command dies with its container

    def _close(self) -> None:
        """Remove the container at once (its processes die with it), then reap the attach."""
        channel, self._channel = self._channel, None
        tether, self._tether = self._tether, None
        try:
            self._stop()
        finally:
            for ch in (channel, tether):
                if ch is not None:
                    ch.close(wait=0.05)  # the container is gone: no need to wait for the CLI to notice

    def _release(self) -> None:
        """End the channels and leave the removal to the engine: the runner (or the exec fallback's
        launcher) exits at the end of file, and ``auto_remove`` removes the container then."""
        channel, self._channel = self._channel, None
        tether, self._tether = self._tether, None
        self.container_id = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        for ch in (channel, tether):
            if isinstance(ch, DirectChannel):
                ch.release()  # end of file on both; its socket's directory goes now
            elif isinstance(ch, Channel):
                ch.interrupt()  # end of file; the attach CLI forwards it and exits by itself
            elif ch is not None:
                ch.close(wait=0)  # the exec fallback's: no exec left running

    def _stop(self) -> None:
        cid, self.container_id = self.container_id, None
        if cid is None:
            return
        try:
            self._final_state = self.engine.inspect(cid)
        except self.engine.errors:
            self._final_state = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self.engine.remove(cid)
        from swe_sandbox.environments.container.snapshot import release

        release(self.engine, self.config.image)  # the last sandbox of a removed snapshot's image

    def describe_state(self) -> str:
        """One phrase on what became of the container (for dead-sandbox errors)."""
        if self.container_id is None:
            return describe(self._final_state)
        try:
            return describe(self.engine.inspect(self.container_id))
        except self.engine.errors as exc:
            return f"its state is unknown: {error_line(exc)}"

    # -- files ----------------------------------------------------------------------------------
    def _hand_over_workspace(self) -> None:
        """Give ``mount_point`` to the non-root ``user``: its entry extracted into its parent (Docker
        ignores a ``.`` entry's owner); under a read-only root, the ``.`` entry (Podman honours it;
        Docker's read-only workspace then stays root's, see the README's known limits)."""
        mount = PurePosixPath(self.config.mount_point)
        try:
            self.engine.put_archive(self._cid, str(mount.parent), tar_empty_dir(mount.name, self._owner()))
        except self.engine.errors:  # a read-only root
            self.engine.put_archive(self._cid, str(mount), tar_empty_dir(".", self._owner()))

    def _owner(self) -> tuple[int, int]:
        """uid and gid owning the workspace and files copied in: a numeric ``user``, else root."""
        uid, _, gid = self.config.user.partition(":")
        if uid.isdigit():
            return int(uid), int(gid) if gid.isdigit() else int(uid)
        return 0, 0

    def _kind(self, path: str) -> str:
        """What ``path`` is in the container: ``dir``, ``file``, ``none`` or ``link:TARGET`` (the
        archive API cannot say: Docker replaces a directory by a file put over it, Podman follows a
        link it is asked for)."""
        probe = (f'p={shlex.quote(path)}; if [ -L "$p" ]; then printf "link:"; readlink -- "$p"; '
                 'elif [ -d "$p" ]; then echo dir; elif [ -e "$p" ]; then echo file; else echo none; fi')
        result = self.execute({"command": probe}, cwd="/", timeout=30)
        if result["returncode"] != 0:
            raise SandboxError(f"cannot inspect {path} in the sandbox: {result['output'].strip()}")
        return result["output"].removesuffix("\n")

    def _make_parents(self, path: str) -> bool:
        return self.execute({"command": f"mkdir -p -- {shlex.quote(path)}"}, cwd="/", timeout=30)["returncode"] == 0

    def _upload(self, src: Path, dst: str) -> None:
        """Copy ``src`` into the container through the engine's archive API (owned by ``user``)."""
        cid, target = self._cid, PurePosixPath(dst)
        kind, is_tree = self._kind(dst), src.is_dir() and not src.is_symlink()
        if kind == "dir" and not is_tree:
            target = target / src.name  # a file onto a directory lands inside it
        elif kind == "file" and is_tree:
            raise FileExistsError(17, "upload: a file is in the way of the directory", dst)
        try:
            try:
                self.engine.put_archive(cid, str(target.parent), tar_path(src, target.name, self._owner()))
            except self.engine.errors as exc:
                if not self.engine.is_not_found(exc):
                    raise
                # The parent is missing: made by the container's user (the engine would make it
                # root's), else sent as the whole path from the root.
                if self._make_parents(str(target.parent)):
                    self.engine.put_archive(cid, str(target.parent), tar_path(src, target.name, self._owner()))
                else:
                    self.engine.put_archive(cid, "/", tar_path(src, str(target).lstrip("/"), self._owner()))
        except self.engine.errors + (tarfile.TarError, SandboxError) as exc:
            raise SandboxError(f"upload to {target}: {error_line(exc)}") from None

    def _download(self, src: str, dst: Path) -> None:
        """Copy ``src`` out of the container through the archive API (the archive is checked)."""
        kind = self._kind(src)
        if kind == "none":
            raise FileNotFoundError(2, "download: no such file or directory in the sandbox", src)
        if kind.startswith("link:"):  # the link itself, as the other backends copy it
            place_symlink(kind[len("link:"):], PurePosixPath(src).name, dst)
            return
        try:
            chunks = self.engine.get_archive(self._cid, src)
        except self.engine.errors as exc:
            if not self.engine.is_not_found(exc):
                raise SandboxError(f"download of {src}: {error_line(exc)}") from None
            state = self.describe_state()
            if state != describe({"State": {"Running": True}}):
                raise SandboxDied(f"the sandbox is gone ({state})") from None
            raise FileNotFoundError(2, "download: no such file or directory in the sandbox", src) from None
        extract_chunks(chunks, PurePosixPath(src).name, dst, limit=self.config.max_download_bytes, source=src)


# -- helpers ---------------------------------------------------------------------------------------
class _ImageMissing(SandboxStartError):
    """``engine.create`` failed for want of the image (pulled then, as ``image_pull`` says)."""


def _num(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def _remove_quietly(engine: Engine, cid: str) -> None:
    try:
        engine.remove(cid)
    except engine.errors:  # best effort at interpreter exit
        pass


def describe(state: dict[str, Any] | None) -> str:
    """What an inspect result says about a container's end, in a few words."""
    if state is None:
        return "the container no longer exists"
    st = state.get("State") or {}
    if st.get("Running"):
        return "the container is still running"
    parts = [f"the container stopped (exit code {st.get('ExitCode')})"]
    if st.get("OOMKilled"):
        parts.append("killed for lack of memory")
    if st.get("Error"):
        parts.append(str(st["Error"]))
    return ", ".join(parts)


