"""The container engines behind the ``docker`` and ``podman`` backends: what both SDKs must do.

``Engine`` is the few lifecycle calls the backends need (create, archives, inspect, remove, list),
each engine filling them in with its own SDK (``docker.py``, ``podman.py``); ``ContainerSpec`` is
what to create in engine-neutral terms. Every container carries the ``LABEL_*`` labels (owner
host, pid and pid start time, run id), from which ``gc`` finds the containers of dead owners.
SDK errors are turned into one line by ``error_line``; callers translate them into
swe-sandbox's errors (``ContainerEnvironment``) or report them (``gc``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

LABEL = "org.swe-sandbox"
LABEL_MANAGED = f"{LABEL}.managed"
LABEL_BACKEND = f"{LABEL}.backend"
LABEL_OWNER_PID = f"{LABEL}.owner-pid"
LABEL_OWNER_START = f"{LABEL}.owner-start"
LABEL_OWNER_HOST = f"{LABEL}.owner-host"
LABEL_RUN_ID = f"{LABEL}.run-id"
LABEL_CREATED = f"{LABEL}.created"
#: On a snapshot's image: the snapshot's id (``container.snapshot``).
LABEL_SNAPSHOT = f"{LABEL}.snapshot"
#: Files the engine writes into a container at start, bind-mounted (no list of changes shows them).
ENGINE_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
#: The kinds of ``Engine.changes``, by the engines' number (Docker's and Podman's ``Kind``).
CHANGE_KINDS = {0: "changed", 1: "added", 2: "deleted"}
CLI_ENV_VARS = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME")
CLI_ENV_PREFIXES = ("DOCKER_", "CONTAINER_", "CONTAINERS_")


@dataclass
class ContainerSpec:
    """What to create, in engine-neutral terms (each ``Engine`` maps it onto its SDK)."""

    image: str
    command: list[str]
    name: str
    labels: dict[str, str]
    environment: dict[str, str]
    working_dir: str
    hostname: str
    init: bool
    network: str
    cap_add: list[str]
    cap_drop: list[str]
    no_new_privileges: bool
    pids_limit: int | None
    memory: str | None
    cpus: float | None
    user: str
    read_only: bool
    tmpfs: dict[str, str]
    workspace_volume: bool
    binds: dict[str, str] = field(default_factory=dict)
    """Host directories bound read-only into the container: ``{host path: container path}``."""
    userns: str = "remap"
    """``remap``: the container's uids are mapped to unprivileged host uids (Podman: a user
    namespace of its own; Docker: the daemon's ``userns-remap``); ``host``: the host's uids."""
    extra: dict[str, Any] = field(default_factory=dict)


class Engine:
    """One container engine behind its SDK: the few calls the backends need.

    Subclasses set the class attributes and implement the SDK-specific methods.
    """

    name: ClassVar[str] = ""
    cli_name: ClassVar[str] = ""
    sdk_package: ClassVar[str] = ""
    #: How to make this engine map the container's root to an unprivileged host uid (the end of
    #: the error when it does not, see ``ContainerEnvironment``).
    userns_help: ClassVar[str] = ""
    #: Whether a commit keeps the container's own file owners (False: the new layer holds the
    #: host ids of the container's user namespace; snapshots are archives then, ``container.snapshot``).
    commit_keeps_owners: ClassVar[bool] = True

    def __init__(self, url: str = "", timeout: float = 600.0, cli: str = ""):
        self.url = url or self.default_url()
        self.timeout = timeout
        self.cli = cli or self.cli_name
        self._client = None

    @classmethod
    def default_url(cls) -> str:
        raise NotImplementedError

    @property
    def client(self):
        if self._client is None:
            self._client = self.make_client()
        return self._client

    # -- SDK-specific ---------------------------------------------------------------------------
    def make_client(self):
        raise NotImplementedError

    def ping(self) -> None:
        raise NotImplementedError

    def has_image(self, image: str) -> bool:
        raise NotImplementedError

    def pull_events(self, image: str, *, insecure: bool = False) -> Iterator[dict[str, Any]]:
        """Pull ``image`` through the SDK, yielding the engine's progress events (JSON objects,
        see ``pull_progress``); a failure is an SDK exception or an ``{"error": ...}`` event.
        ``insecure``: skip TLS verification and allow plain HTTP, where the engine lets the client
        decide (Podman). The engine's own credentials are used (Docker's ``config.json`` read by
        the SDK, Podman's auth file read by the service)."""
        raise NotImplementedError

    def create(self, spec: ContainerSpec) -> str:
        raise NotImplementedError

    def put_archive(self, cid: str, path: str, data) -> None:
        raise NotImplementedError

    def get_archive(self, cid: str, path: str) -> Iterable[bytes]:
        raise NotImplementedError

    def get_owned_archive(self, cid: str, path: str) -> Iterable[bytes]:
        """``get_archive`` with the owners as the container sees them (what ``put_archive`` takes
        back); the default: the engine's archive already is."""
        return self.get_archive(cid, path)

    def inspect(self, cid: str) -> dict[str, Any] | None:
        """The container's inspect data, or None when it does not exist."""
        raise NotImplementedError

    def remove(self, cid: str) -> None:
        """Kill and remove at once, with its anonymous volumes; no error if it is gone."""
        raise NotImplementedError

    def list_managed(self) -> list[dict[str, Any]]:
        """``[{"id", "labels", "status"}]`` of every container carrying ``LABEL_MANAGED``."""
        raise NotImplementedError

    def commit(self, cid: str, image: str, labels: dict[str, str]) -> str:
        """Commit the container's filesystem as image ``image`` (``repository:tag``) carrying
        ``labels``; the image's id."""
        raise NotImplementedError

    def changes(self, cid: str) -> list[tuple[str, str]]:
        """What the container changed against its image: ``[(path, kind)]`` with kind ``changed``,
        ``added`` or ``deleted`` (the engine's ``diff``: every path, parents included)."""
        raise NotImplementedError

    def remove_image(self, image: str) -> bool:
        """Remove image ``image`` unless a container still uses it (then False); no error if it is gone."""
        raise NotImplementedError

    def list_managed_images(self) -> list[dict[str, Any]]:
        """``[{"id", "labels", "tags"}]`` of every image carrying ``LABEL_SNAPSHOT``."""
        raise NotImplementedError

    def sdk_errors(self) -> tuple[type[BaseException], ...]:
        """Every exception this engine's SDK raises: its own classes, and ``OSError`` (socket
        errors, and requests' errors, which derive from it). The one place an SDK's errors are
        named: callers catch ``errors``. Imports the SDK."""
        raise NotImplementedError

    @functools.cached_property
    def errors(self) -> tuple[type[BaseException], ...]:
        """``sdk_errors()``, imported on first use (only when an exception is being handled)."""
        return self.sdk_errors()

    def is_not_found(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def is_userns_error(self, exc: BaseException) -> bool:
        """Whether a create error says the engine cannot give the container a user namespace."""
        return False

    # -- the command-line client ----------------------------------------------------------------
    def cli_argv(self) -> list[str]:
        """The CLI and its option selecting the same engine socket as the SDK."""
        raise NotImplementedError

    def cli_env(self) -> dict[str, str]:
        """Environment of the CLI process on the host (never forwarded into the container)."""
        return {k: v for k, v in os.environ.items() if k in CLI_ENV_VARS or k.startswith(CLI_ENV_PREFIXES)}

    def exec_argv(self, cid: str, argv: list[str], *, interactive: bool = True) -> list[str]:
        """One process in the running container (the exec fallback's per-command exec)."""
        return [*self.cli_argv(), "exec", *(["-i"] if interactive else []), cid, *argv]

    def run_argv(self, spec: ContainerSpec, cidfile: str) -> tuple[list[str], dict[str, str]] | None:
        """Create, start and attach ``spec`` in one CLI process (``CLI run --interactive``), its id
        written to ``cidfile``: ``(argv, values to add to the CLI's environment)``, or None where the
        CLI cannot say all of it (the default: the SDK creates, ``attach_argv`` attaches)."""
        return None

    def attach_argv(self, cid: str) -> list[str]:
        """Start the created container with its main process's stdin, stdout and stderr attached."""
        return [*self.cli_argv(), "start", "--attach", "--interactive", cid]

    def unavailable_reason(self) -> str | None:
        """Why this engine cannot be used from here (SDK, CLI, daemon), or None."""
        try:
            __import__(self.sdk_package)
        except ImportError:
            return (f"the {self.sdk_package} Python SDK is not installed "
                    f"(pip install 'swe-sandbox[{self.name}]')")
        if shutil.which(self.cli) is None:
            return f"the {self.cli} command-line client is not installed (scripts/setup-engines.sh installs it)"
        try:
            self.ping()
        except self.errors as exc:  # any SDK or socket error means "not reachable"
            return f"the {self.name} engine at {self.url} does not answer ({error_line(exc)}); start it with scripts/setup-engines.sh"
        return None


def label_changes(labels: dict[str, str]) -> list[str]:
    """``labels`` as the Dockerfile ``LABEL`` instructions a commit's ``changes`` takes."""
    return [f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()]


def error_line(exc: BaseException) -> str:
    """An (SDK) exception as one line of at most 500 characters."""
    text = " ".join(str(exc).split())
    return text[:500] or type(exc).__name__


def process_start_id(pid: int) -> str | None:
    """``boot_id:start_ticks`` of a live process (tells a reused pid apart), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        start = stat[stat.rfind(b")") + 2:].split()[19].decode()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except (OSError, IndexError):
        return None
    return f"{boot}:{start}"


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process that created a container (per its labels) still runs on this host."""
    try:
        pid = int(labels.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return False
    start = labels.get(LABEL_OWNER_START) or ""
    current = process_start_id(pid)
    if current is not None:
        return not start or current == start
    if Path("/proc/self/stat").exists():
        return False  # Linux, and no such process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gc(engine: Engine, *, dry_run: bool = False, all_hosts: bool = False) -> list[dict[str, str]]:
    """Remove the swe-sandbox containers and snapshot images of ``engine`` whose owning process is gone.

    Only containers labelled by swe-sandbox and created on this host are considered (``all_hosts``:
    every one, e.g. on a shared remote engine after its clients died). An engine that is not
    installed or not running has nothing to remove. Each backend's ``ContainerEnvironment.gc``
    calls this with its own engine (``swe-sandbox gc``).

    Args:
        engine: the engine to sweep (its ``name`` is each entry's ``backend``).
        dry_run: only say what would be removed. Default False.
        all_hosts: also containers created from other hosts. Default False.

    Returns:
        list[dict[str, str]]: one ``{"backend", "id", "run_id", "owner_pid", "action"}`` per
        container looked at, where ``action`` is ``removed``, ``would remove`` (``dry_run``),
        ``kept (owner alive)`` or ``error: ...``; an engine that failed to list gets one entry with
        ``id`` ``""``. Engine errors are reported, never raised.
    """
    if engine.unavailable_reason() is not None:
        return []
    try:
        managed = engine.list_managed()
    except engine.errors as exc:
        return [{"backend": engine.name, "id": "", "run_id": "", "owner_pid": "",
                 "action": f"error: cannot list containers: {error_line(exc)}"}]
    report = [_gc_one(engine, engine.name, item, dry_run, all_hosts) for item in managed]
    try:
        images = engine.list_managed_images()
    except engine.errors as exc:
        images = []
        report.append({"backend": engine.name, "id": "", "run_id": "", "owner_pid": "",
                       "action": f"error: cannot list snapshot images: {error_line(exc)}"})
    report += [_gc_one(engine, engine.name, {**item, "image": True}, dry_run, all_hosts) for item in images]
    return [entry for entry in report if entry]


def _gc_one(engine: Engine, backend: str, item: dict[str, Any], dry_run: bool, all_hosts: bool) -> dict[str, str]:
    labels, host = item["labels"], socket.gethostname()
    if not all_hosts and labels.get(LABEL_OWNER_HOST) != host:
        return {}
    entry = {"backend": backend, "id": item["id"][:12], "run_id": labels.get(LABEL_RUN_ID, ""),
             "owner_pid": labels.get(LABEL_OWNER_PID, "")}
    if labels.get(LABEL_OWNER_HOST) == host and owner_alive(labels):
        entry["action"] = "kept (owner alive)"
    elif dry_run:
        entry["action"] = "would remove"
    else:
        try:
            if not item.get("image"):
                engine.remove(item["id"])
            elif not engine.remove_image(item["id"]):
                entry["action"] = "kept (a container still uses it)"
                return entry
            entry["action"] = "removed"
        except engine.errors as exc:
            entry["action"] = f"error: {error_line(exc)}"
    return entry
