"""Backend ``bwrap``: one long-lived bubblewrap sandbox per environment, the runner inside.

Policy (DESIGN.md §5): every namespace unshared (user, pid, net, ipc, uts, cgroup) and no new user
namespace inside (``--disable-userns``), all capabilities dropped, ``--die-with-parent``, a new
session, only the variables of ``sandbox_env()``; the host's system directories read-only,
``/etc/shadow``, ``/etc/gshadow`` and ``/etc/ssh`` masked, the root read-only; kernel interfaces as
Docker leaves them (``PROC_READ_ONLY`` read-only, ``PROC_MASKED`` empty, no ``/sys`` at all);
writable are only the workspace (a host directory, mounted at ``mount_point``) and private,
size-bounded ``/tmp``, ``/var/tmp`` and ``/dev/shm`` (tmpfs; past ``tmpfs_budget_bytes`` across
this process's sandboxes, /tmp and /var/tmp go on disk: ``swe_sandbox.environments.scratch``). No network, not even the host's loopback.

Run by root, bwrap itself runs as an unprivileged host uid (``host_uid``), so the sandbox's root
is that uid, never host root. The runner is PID 1 (``--as-pid-1``): no bwrap init inside holds its
pipes. ``LAUNCHER`` sets the RLIMITs, hands bwrap the seccomp filter (``bwrap_seccomp``) and
drops privileges, then execs bwrap.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import pwd
import re
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Literal

from pydantic import Field, field_validator, model_validator

from swe_sandbox import capabilities as cap
from swe_sandbox.config import SANDBOX_PATH, NetworkedConfig
from swe_sandbox.environments import bwrap_seccomp, hostcopy, scratch
from swe_sandbox.environments.base import Channel, Environment, mount_relative, spawn_runner
from swe_sandbox.environments.scratch import SCRATCH_MOUNTS
from swe_sandbox.environments.snapshot import SnapshotRoot
from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxError, SandboxStartError, SweSandboxError
from swe_sandbox.network.policy import SANDBOX_NET_DIR
from swe_sandbox.runner import BOOTSTRAP, ISOLATED, descendants

SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: moby's defaults (oci/defaults.go, ``DefaultLinuxSpec``): MaskedPaths under /proc (/sys is not
#: mounted at all here, /sys/firmware with it) and ReadonlyPaths.
PROC_MASKED = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
               "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi")
PROC_READ_ONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
#: Hidden inside: an empty read-only directory, or /dev/null (the /proc ones as this host has them).
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/ssh", *PROC_MASKED)
RESERVED_MOUNTS = ("/", *SYSTEM_DIRS, "/proc", "/dev", "/tmp", "/var/tmp", "/sys", "/run")
#: Oldest bubblewrap with every option used here (``--disable-userns``: 0.8.0; ``--size``: 0.7.0).
MIN_BWRAP = (0, 8, 0)
#: Host uids handed out to sandboxes of a root process, one per live sandbox (a lock file each in
#: ``_lock_dir()``): above systemd's and the usual subordinate-id ranges, below 2**31.
UID_POOL_START, UID_POOL_SIZE = 2_000_000_000, 65536
SHM_SIZE = 64 << 20  # /dev/shm, bytes (Docker's default shm-size)
#: The sandbox's own variables, under ``Environment.sandbox_env``'s (here and in ssh's remote bwrap).
BASE_ENV = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "USER": "root"}
SECCOMP_FD = 3  # where LAUNCHER hands bwrap the seccomp filter
GiB = 1 << 30
logger = logging.getLogger("swe_sandbox.environments.bwrap")
#: The warning when a sandbox's /tmp and /var/tmp go on disk (``tmpfs_budget_bytes``).
ON_DISK_WARNING = ("bwrap: /tmp and /var/tmp of this sandbox are on disk ({path}, not size-bounded): "
                   "their tmpfs ({size} bytes) would take this process's sandboxes past "
                   "environment.tmpfs_budget_bytes ({budget} bytes, {used} held)")

#: ``python -I -S -c LAUNCHER SPEC BWRAP ARGS...``: SPEC (JSON) gives ``rlimits`` ([[name, value]],
#: soft = hard), ``bpf`` (hex, or null) put on ``seccomp_fd``, ``uid`` and ``gid`` (or null) to drop to
#: (no supplementary groups); then bwrap is exec'd (same pid: its parent stays this process).
LAUNCHER = r"""
import json, os, resource, sys
spec = json.loads(sys.argv[1])
for name, value in spec["rlimits"]:
    resource.setrlimit(getattr(resource, name), (value, value))
if spec["bpf"] is not None:
    fd = os.memfd_create("swe-sandbox-seccomp", 0)
    os.write(fd, bytes.fromhex(spec["bpf"]))
    os.lseek(fd, 0, os.SEEK_SET)
    if fd != spec["seccomp_fd"]:
        os.dup2(fd, spec["seccomp_fd"])
        os.close(fd)
    os.set_inheritable(spec["seccomp_fd"], True)
if spec["uid"] is not None:
    os.setgroups([])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
os.execv(sys.argv[2], sys.argv[2:])
"""


class BwrapConfig(NetworkedConfig):
    """Config of the ``bwrap`` backend."""

    backend: str = "bwrap"
    workspace: str | None = None
    """Host directory mounted read-write at ``mount_point``; None: a fresh temporary one, removed at close.
    Run by root, the sandbox's host uid (``host_uid``) must be able to write it: else it is refused."""
    mount_point: str = "/workspace"
    """Where the workspace appears inside the sandbox; the default working directory. Not a system
    directory, ``/proc``, ``/dev`` nor under them; below ``/tmp`` or ``/var/tmp`` it may be
    (``mount_point_problem``)."""
    ro_binds: list[str] = Field(default_factory=list)
    """Extra host paths made visible read-only at the same path (readable by the sandbox's host uid)."""
    network: Literal["none", "allowlist", "on"] = "none"
    """``none`` (default): no network at all, not even the host's loopback; ``allowlist``: only the
    names of ``allow``, through a proxy on the host reached by a socket bound into the sandbox
    (``swe_sandbox.network``; commands get ``HTTP(S)_PROXY``); ``on``: the host's network, all of it."""
    share_net: bool = False
    """The older spelling of ``network: on`` (true keeps the host's network)."""
    python: str = ""
    """Interpreter for the runner inside; empty: ``python3`` from the system, else this process's own (bound read-only)."""
    bwrap_path: str = "bwrap"
    """The bubblewrap binary (looked up in the host's PATH, never the sandbox's)."""
    host_uid: int | None = Field(None, gt=0)
    """Host uid the sandbox runs as when this process is root (the sandbox's uid 0 is this uid; never
    0). None: the owner of ``workspace`` when that is not root, else a uid of the sandbox's own from
    ``UID_POOL_START`` on (no other sandbox shares it, nor its process limit). Not root: bwrap runs
    as this process's uid, and only that uid is accepted here."""
    seccomp: bool = True
    """Load the seccomp filter of ``bwrap_seccomp`` (Docker's default denials); needs pyseccomp and
    libseccomp (the sandbox does not start without them while this is true)."""
    max_processes: int | None = Field(1024, gt=0)
    """RLIMIT_NPROC: processes and threads of the sandbox's host uid, counted host-wide by the kernel.
    Set only when this process is root: with a uid of the sandbox's own (the default) that is the
    sandbox's; with ``host_uid`` or a workspace owner's uid, that user's other processes count too.
    None: no limit."""
    max_memory_bytes: int | None = Field(4 * GiB, gt=0)
    """RLIMIT_DATA, bytes, per process (heap and private writable mappings; address-space
    reservations of JVMs, Go or V8 do not count). None: no limit."""
    max_file_size_bytes: int | None = Field(16 * GiB, gt=0)
    """RLIMIT_FSIZE: largest file a process may write, bytes (the workspace's disk use is not bounded)."""
    max_open_files: int | None = Field(8192, gt=0, le=1 << 20)
    """RLIMIT_NOFILE: open descriptors per process."""
    tmp_size_bytes: int = Field(GiB, gt=0)
    """Size of each of the tmpfs ``/tmp`` and ``/var/tmp``, bytes (memory of the host); /dev/shm has ``SHM_SIZE``."""
    tmpfs_budget_bytes: int | None = Field(None, ge=0)
    """Bytes of tmpfs ``/tmp`` and ``/var/tmp`` that all the bwrap sandboxes of this process may
    hold at once (each sandbox counts ``2 * tmp_size_bytes``, what it may fill of the host's
    memory). A sandbox that would go past it gets its /tmp and /var/tmp on disk instead (a
    private directory under ``scratch.SCRATCH_PARENT``, removed at close, not size-bounded), with
    a warning. None: half of the host's memory (``scratch.default_budget``); 0: always on disk.
    /dev/shm (``SHM_SIZE``) is always tmpfs and not counted."""

    @model_validator(mode="after")
    def _share_net_is_network_on(self) -> BwrapConfig:
        if self.share_net and self.network != "on":
            if "network" in self.model_fields_set:
                raise ValueError(f"share_net: true is network: on, but network is {self.network!r}: set one of them")
            self.network = "on"
        return self

    @field_validator("mount_point")
    @classmethod
    def _mount_point(cls, value: str) -> str:
        problem = mount_point_problem(value)
        if problem:
            raise ValueError(problem)
        return os.path.normpath(value)


def mount_point_problem(path: str) -> str | None:
    """Why ``path`` cannot be the workspace's ``mount_point``; None when it can.

    A mount point is a normalised absolute path, none of ``RESERVED_MOUNTS`` and not under one of
    them, except below ``/tmp`` and ``/var/tmp``: those are the sandbox's own (tmpfs, or its scratch
    directory), and the workspace is bound over them after they are mounted.
    """
    norm = os.path.normpath(path)
    if not path.startswith("/") or norm != path.rstrip("/") or norm in RESERVED_MOUNTS \
            or any(norm.startswith(d + "/") for d in RESERVED_MOUNTS if d not in ("/", *SCRATCH_MOUNTS)):
        return (f"must be a normalised absolute path outside {', '.join(RESERVED_MOUNTS)} "
                f"(below {' or '.join(SCRATCH_MOUNTS)} is allowed)")
    return None


def _bwrap_version(path: str) -> tuple[int, ...]:
    """The version of the bubblewrap at ``path``, e.g. ``(0, 8, 0)``; ``()`` when it does not tell."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(part) for part in match.groups()) if match else ()


@functools.cache
def _probe(bwrap: str, uid: int | None) -> str | None:
    """Why bubblewrap cannot run here, started as the sandbox will be (through ``LAUNCHER``, as host
    ``uid`` when not None); None when it can."""
    path = shutil.which(bwrap)
    if path is None:
        return f"bubblewrap ({bwrap}) is not installed; on Debian: apt-get install bubblewrap"
    version = _bwrap_version(path)
    if version < MIN_BWRAP:
        found = ".".join(map(str, version)) or "unknown"
        return f"bubblewrap >= {'.'.join(map(str, MIN_BWRAP))} is needed ({path} is {found})"
    policy = ["--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1", "--ro-bind", "/", "/"]
    ids = None if uid is None else (uid, uid)
    probe = launch_argv([path, *policy, *(["--uid", "0", "--gid", "0"] if ids else []), "--", "true"],
                        rlimits=[], ids=ids, bpf=None)
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap failed to run: {exc}"
    if done.returncode != 0:
        who = f" as host uid {uid}" if uid is not None else ""
        why = done.stderr.decode(errors="replace").strip()
        return f"bubblewrap cannot create its namespaces here{who} (unprivileged user namespaces disabled?): {why}"
    return None


def launch_argv(bwrap_argv: list[str], *, rlimits: list[tuple[str, int]], ids: tuple[int, int] | None,
                bpf: bytes | None) -> list[str]:
    """``bwrap_argv`` (its first word a full path) behind ``LAUNCHER``: RLIMITs, the seccomp BPF on
    ``SECCOMP_FD``, then host ``ids`` (uid, gid) if not None."""
    spec = {"rlimits": rlimits, "bpf": None if bpf is None else bpf.hex(), "seccomp_fd": SECCOMP_FD,
            "uid": ids and ids[0], "gid": ids and ids[1]}
    python = sys.executable or shutil.which("python3") or "python3"
    return [python, "-I", "-S", "-c", LAUNCHER, json.dumps(spec), *bwrap_argv]


def _lock_dir() -> str:
    """Root's directory of the uid pool's lock files (made on first use).

    Raises:
        SandboxStartError: it exists but is not a directory of root's that only root can write.
    """
    path = os.path.join("/run" if os.path.isdir("/run") else tempfile.gettempdir(), "swe-sandbox-uids")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise SandboxStartError(f"{path}: must be a directory of root's that only root can write (uid locks)")
    return path


def _lock_pool_uid() -> tuple[int, IO[bytes]]:
    """A host uid from the pool that no live sandbox and no user of /etc/passwd holds, and the open
    lock file that holds it (closing it, or this process ending, frees the uid).

    Raises:
        SandboxStartError: every uid of the pool is taken.
    """
    dir_fd = os.open(_lock_dir(), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for uid in range(UID_POOL_START, UID_POOL_START + UID_POOL_SIZE):
            if _has_passwd_entry(uid):
                continue
            fd = os.open(str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return uid, os.fdopen(fd, "rb")
    finally:
        os.close(dir_fd)
    raise SandboxStartError(f"all {UID_POOL_SIZE} host uids from {UID_POOL_START} are held by live sandboxes")


def _has_passwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _requested_ids(config: BwrapConfig) -> tuple[int, int] | None:
    """Host ``(uid, gid)`` a root process runs the sandbox as, when the config decides it (``host_uid``,
    or a workspace's non-root owner); None: a uid of the pool. The gid is never 0."""
    if config.host_uid is not None:
        try:
            gid = pwd.getpwuid(config.host_uid).pw_gid
        except KeyError:
            gid = 0
        return config.host_uid, gid or config.host_uid
    if config.workspace is not None:
        st = os.stat(config.workspace)
        if st.st_uid != 0:
            return st.st_uid, st.st_gid or st.st_uid
    return None


def _check_writable(path: str, ids: tuple[int, int] | None) -> None:
    """Refuse a workspace the sandbox's host ``ids`` (None: a pool uid, a stranger to it) cannot write,
    or reach (bwrap, running as that uid, opens it by path): mode bits of it and its parents (owner,
    group or others; ACLs are not read).

    Raises:
        ConfigError: names the field and why.
    """
    real, (uid, gid) = os.path.realpath(path), ids or (None, None)
    for where, need in [(real, 0o3)] + [(str(parent), 0o1) for parent in Path(real).parents]:
        st = os.stat(where)
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        if (st.st_mode >> shift) & need != need:
            break
    else:
        return
    who = f"host uid {uid}" if uid is not None else f"an unprivileged host uid of its own (from {UID_POOL_START})"
    what = "write" if where == real else "search its parent"
    raise ConfigError(
        f"environment.workspace: {path}: the sandbox runs as {who}, never as root, and cannot {what} {where} "
        f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); give the directory to an unprivileged user "
        f"(the sandbox then runs as its owner), somewhere it can reach, or set environment.host_uid to a uid "
        f"that can write it")


class BwrapEnvironment(Environment):
    """Commands run inside one bubblewrap sandbox (Linux namespaces, no root needed)."""

    config_class = BwrapConfig
    isolation = ("namespaces: own pid/net/ipc/uts/user (root inside is an unprivileged host uid), no network, "
                 "seccomp, process/memory/file limits, read-only system, writable workspace and /tmp")
    config: BwrapConfig
    volatile_dirs = ("/dev/shm",)

    @classmethod
    def missing_capabilities(cls, config: BwrapConfig) -> dict[str, str]:
        """What the conformance kit must not expect here (``swe_sandbox.capabilities``)."""
        return {cap.FILES_OUTSIDE_WORKSPACE: "only the workspace mount is shared with the host; the rest of the sandbox "
                                             "is read-only binds and private tmpfs, so upload/download reach paths "
                                             "under mount_point only (ValueError elsewhere)",
                cap.RUN_AS_USER: "the sandbox's user namespace maps one uid only: there is no other user to become"}

    def __init__(self, config: BwrapConfig):
        super().__init__(config)
        self._tmp_workspace: str | None = None
        self._uid_lock: IO[bytes] | None = None
        self._tmpfs_held = 0  # bytes of scratch.TMPFS this sandbox holds
        self._scratch: str | None = None  # its disk /tmp and /var/tmp, past the budget
        if config.workspace is not None and not Path(config.workspace).is_dir():
            raise ConfigError(f"environment.workspace: {config.workspace} is not a directory")
        self._switch = os.geteuid() == 0
        self._ids: tuple[int, int] | None = None
        if self._switch:
            self._ids = _requested_ids(config)
            if config.workspace is not None:
                _check_writable(config.workspace, self._ids)
        elif config.host_uid not in (None, os.getuid()):
            raise ConfigError(f"environment.host_uid: only a root process can run the sandbox as another uid "
                              f"(this one is uid {os.getuid()})")

    @classmethod
    def unavailable_reason(cls, bwrap: str = "bwrap") -> str | None:
        return _probe(bwrap, UID_POOL_START if os.geteuid() == 0 else None)

    def host_ids(self) -> tuple[int, int] | None:
        """Host ``(uid, gid)`` the sandbox runs as when this process is root (a pool uid is taken on
        first call, held until close); None when not root (bwrap runs as this process)."""
        if self._switch and self._ids is None:
            uid, self._uid_lock = _lock_pool_uid()
            self._ids = (uid, uid)
        return self._ids if self._switch else None

    @property
    def workspace(self) -> Path:
        """The host directory behind ``mount_point`` (a temporary one belongs to the sandbox's uid)."""
        if self.config.workspace is not None:
            return Path(self.config.workspace)
        if self._tmp_workspace is None:
            ids = self.host_ids()
            self._tmp_workspace = tempfile.mkdtemp(prefix="swe-sandbox-bwrap-")
            if ids is not None:
                os.chown(self._tmp_workspace, *ids)
        return Path(self._tmp_workspace)

    def snapshot_roots(self) -> list[SnapshotRoot]:
        """The sandbox's state: the workspace, ``/tmp`` (HOME) and ``/var/tmp``; the tmpfs ones are
        reached through the runner's ``/proc/PID/root`` (``/dev/shm`` is not kept)."""
        self.start()
        ids = self.host_ids()
        roots = [SnapshotRoot("workspace", self.config.mount_point, self.workspace, ids)]
        for path, name in SCRATCH_MOUNTS.items():
            host = Path(self._scratch, name) if self._scratch else self._sandbox_root() / path.lstrip("/")
            roots.append(SnapshotRoot(name, path, host, ids, host_writable=self._scratch is not None))
        return roots

    def _sandbox_root(self) -> Path:
        """``/proc/PID/root`` of the sandbox's first process (the runner, PID 1 inside)."""
        channel = self._channel
        proc = getattr(channel, "proc", None)
        for pid in [proc.pid, *(descendants(proc.pid) or [])] if proc is not None else []:
            try:
                nspid = Path(f"/proc/{pid}/status").read_text().split("NSpid:")[1].split("\n")[0].split()
            except (OSError, IndexError):
                continue
            if len(nspid) > 1 and nspid[-1] == "1":
                return Path(f"/proc/{pid}/root")
        raise SandboxError("bwrap: the sandbox's first process was not found (is it still running?)")

    def bwrap_argv(self, *, seccomp_fd: int | None = None, uid0: bool = False) -> list[str]:
        """The full bubblewrap command line (useful to debug the policy): ``bwrap_policy``, then
        the runner. Args as ``bwrap_policy``'s."""
        python = runner_python(self.config)[0]
        return [*bwrap_policy(self.config, self.workspace, seccomp_fd=seccomp_fd, uid0=uid0, scratch=self._scratch,
                              net_dir=self.net_dir), python, *ISOLATED, "-c", BOOTSTRAP]

    def _open_channel(self) -> Channel:
        cfg = self.config
        if shutil.which(cfg.bwrap_path) is None:  # the rest of the probe only if the start fails
            raise BackendUnavailable(self.unavailable_reason(cfg.bwrap_path) or f"{cfg.bwrap_path} is not found")
        bpf = self._seccomp_bpf()
        ids = self.host_ids()
        self._take_scratch(ids)
        try:
            argv = self.bwrap_argv(seccomp_fd=SECCOMP_FD if bpf else None, uid0=ids is not None)
            path = shutil.which(argv[0])  # resolved here: Popen would search the sandbox's PATH
            assert path is not None  # found just above
            argv[0] = path
            launch = launch_argv(argv, rlimits=self._rlimits(), ids=ids, bpf=bpf)
            return spawn_runner(launch, self.sandbox_env(BASE_ENV))
        except BaseException:
            self._release_scratch()
            raise

    def _start_error(self, exc: SandboxError) -> SweSandboxError:
        """The runner did not start: bubblewrap's own probe (``unavailable_reason``: its version, its
        namespaces as this process starts them) says why where it can (``BackendUnavailable``). Run
        only now: before every start it cost two more processes (~50 ms of a one-shot ``exec``)."""
        reason = self.unavailable_reason(self.config.bwrap_path)
        return BackendUnavailable(reason) if reason else super()._start_error(exc)

    def _take_scratch(self, ids: tuple[int, int] | None) -> None:
        """Hold this sandbox's tmpfs in ``scratch.TMPFS``, or past its budget make its disk scratch."""
        if self._tmpfs_held or self._scratch is not None:
            return
        size = 2 * self.config.tmp_size_bytes
        budget = self.config.tmpfs_budget_bytes
        budget = scratch.default_budget() if budget is None else budget
        if scratch.TMPFS.take(size, budget):
            self._tmpfs_held = size
            return
        try:
            self._scratch = scratch.make_scratch(ids)
        except OSError as exc:
            raise SandboxStartError(f"bwrap: cannot make a scratch directory for /tmp: {exc}") from None
        logger.warning(ON_DISK_WARNING.format(path=self._scratch, size=size, budget=budget, used=scratch.TMPFS.used))

    def _release_scratch(self) -> None:
        """Give back the tmpfs this sandbox held, remove its disk scratch."""
        scratch.TMPFS.give_back(self._tmpfs_held)
        self._tmpfs_held = 0
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _seccomp_bpf(self) -> bytes | None:
        """The seccomp filter's BPF, or None with ``seccomp: false``.

        Raises:
            BackendUnavailable: pyseccomp or libseccomp is missing (says what to install).
        """
        if not self.config.seccomp:
            return None
        try:
            return bwrap_seccomp.filter_bpf()
        except bwrap_seccomp.SeccompUnavailable as exc:
            raise BackendUnavailable(f"environment.seccomp: {exc}") from None

    def _rlimits(self) -> list[tuple[str, int]]:
        """``(resource name, value)`` set as soft and hard limit on bwrap (and all it starts). Not
        root: no RLIMIT_NPROC (it would count this user's every process), the rest capped at the hard
        limits in force."""
        cfg = self.config
        wanted = [("RLIMIT_NPROC", cfg.max_processes if self._switch else None), ("RLIMIT_DATA", cfg.max_memory_bytes),
                  ("RLIMIT_FSIZE", cfg.max_file_size_bytes), ("RLIMIT_NOFILE", cfg.max_open_files), ("RLIMIT_CORE", 0)]
        limits = []
        for name, value in wanted:
            if value is None:
                continue
            hard = resource.getrlimit(getattr(resource, name))[1]
            if not self._switch and hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            limits.append((name, value))
        return limits

    def _stop(self) -> None:
        try:
            self._release_scratch()
            if self._tmp_workspace is not None:
                shutil.rmtree(self._tmp_workspace, ignore_errors=True)
                self._tmp_workspace = None
            elif self.config.workspace is not None:
                strip_setid_bits(Path(self.config.workspace))
        finally:
            if self._uid_lock is not None:  # every process of the sandbox is gone: the uid is free again
                self._uid_lock.close()
                self._uid_lock, self._ids = None, None  # a restart takes a pool uid again

    def _workspace_rel(self, path: str) -> str:
        """Sandbox ``path`` (absolute) relative to the workspace mount (``base.mount_relative``)."""
        return mount_relative(path, self.config.mount_point)

    def _upload(self, src: Path, dst: str) -> None:
        """Copy host ``src`` to ``dst`` under the workspace mount; never through a link (``hostcopy``).
        What it creates belongs to the sandbox's host uid, so commands can change it."""
        hostcopy.copy(hostcopy.HOST_ROOT, hostcopy.host_rel(src, follow_last=False), self.workspace,
                      self._workspace_rel(dst), owner=self.host_ids())

    def _download(self, src: str, dst: Path) -> None:
        """Copy ``src`` under the workspace mount to host ``dst``; never through a link (``hostcopy``)."""
        hostcopy.copy(self.workspace, self._workspace_rel(src), hostcopy.HOST_ROOT, hostcopy.host_rel(dst),
                      limit=self.config.max_download_bytes, source=src)


def runner_python(cfg: BwrapConfig) -> tuple[str, list[str]]:
    """The runner's interpreter inside the sandbox, and the bwrap options binding what it needs."""
    if cfg.python:
        return cfg.python, []
    if shutil.which("python3", path=SANDBOX_PATH):
        return "python3", []
    prefix = os.path.realpath(sys.base_prefix)
    return os.path.realpath(sys.executable), ["--ro-bind", prefix, prefix]


def bwrap_policy(cfg: BwrapConfig, workspace: str | os.PathLike, *, seccomp_fd: int | None = None,
                 uid0: bool = False, scratch: str | None = None, net_dir: str | os.PathLike | None = None) -> list[str]:
    """The bwrap backend's policy (module doc) as a bubblewrap command line, up to and including
    its ``--``: what follows is the command to run inside. Used here and by ssh's remote bwrap.

    Args:
        cfg: the policy's fields (``share_net``, ``ro_binds``, ``mount_point``, sizes, ``python``).
        workspace: the directory (of the host bwrap runs on) bound at ``mount_point``.
        seccomp_fd: descriptor bwrap reads the seccomp BPF from (None: no filter).
        uid0: map the sandbox's uid and gid 0 to the (unprivileged) uid bwrap runs as.
        scratch: a directory of ``scratch.make_scratch`` whose subdirectories are bound at /tmp
            and /var/tmp; None: tmpfs of ``cfg.tmp_size_bytes`` there.
        net_dir: ``network: allowlist``: the host directory holding the proxy's socket, bound
            read-only at ``SANDBOX_NET_DIR`` (the sandbox has no network of its own).

    Returns:
        list[str]: starting with ``cfg.bwrap_path``, ending with ``--chdir MOUNT_POINT --``.
    """
    argv = [cfg.bwrap_path, "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "swe-sandbox"]
    argv += ["--uid", "0", "--gid", "0"] if uid0 else []
    argv += ["--share-net"] if cfg.network == "on" else []
    argv += _system_binds() + ["--proc", "/proc", *_proc_policy(), "--dev", "/dev"]
    argv += ["--size", str(SHM_SIZE), "--tmpfs", "/dev/shm"]
    for path, name in SCRATCH_MOUNTS.items():
        argv += ["--bind", os.path.join(scratch, name), path] if scratch else \
            ["--size", str(cfg.tmp_size_bytes), "--tmpfs", path]
    binds = runner_python(cfg)[1]  # after the tmpfs mounts, which would hide a bind under /tmp
    for path in cfg.ro_binds:
        argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", str(net_dir), SANDBOX_NET_DIR] if net_dir is not None else []
    argv += binds + ["--bind", str(workspace), cfg.mount_point, "--remount-ro", "/dev", "--remount-ro", "/"]
    argv += ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return argv + ["--chdir", cfg.mount_point, "--"]


def _system_binds() -> list[str]:
    """The host's system directories read-only, ``MASKED_FILES`` outside /proc hidden."""
    argv = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv + _masks([path for path in MASKED_FILES if not path.startswith("/proc/")])


def _proc_policy() -> list[str]:
    """After ``--proc``: ``PROC_READ_ONLY`` bound read-only over themselves (their content depends on
    the reader, not on the proc mount), ``PROC_MASKED`` hidden as this host has them."""
    argv = []
    for path in PROC_READ_ONLY:
        argv += ["--ro-bind-try", path, path]
    return argv + _masks([path for path in MASKED_FILES if path.startswith("/proc/")])


def _masks(paths: list[str]) -> list[str]:
    """A directory becomes an empty read-only tmpfs, a file /dev/null; a missing path is skipped."""
    argv = []
    for path in paths:
        if os.path.isdir(path):
            argv += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    return argv


def strip_setid_bits(root: Path) -> None:
    """Clear setuid/setgid bits a sandbox left in a host workspace, through descriptors only: the walk
    never follows a link (``os.fwalk``), each entry is opened O_NOFOLLOW and changed with fchmod."""
    try:
        for _, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
            for name in [".", *dirs, *files]:
                try:
                    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                    if mode & (stat.S_ISUID | stat.S_ISGID) and (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                        _clear_setid(name, dir_fd)
                except OSError:
                    pass  # gone or changed since it was listed
    except OSError:
        pass  # the workspace itself is gone


def _clear_setid(name: str, dir_fd: int) -> None:
    """fchmod the regular file or directory ``name`` (opened below ``dir_fd``, no link) without setid bits."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
            os.chmod(fd, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    finally:
        os.close(fd)
