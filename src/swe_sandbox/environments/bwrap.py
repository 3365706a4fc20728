"""Backend ``bwrap``: one long-lived bubblewrap sandbox per environment, the runner inside.

Policy (DESIGN.md §5): every namespace unshared (user, pid, net, ipc, uts, cgroup), all
capabilities dropped, ``--die-with-parent``, a new session, only the variables of
``sandbox_env()``; the host's system directories read-only, ``/etc/shadow`` and ``/etc/gshadow``
masked, the root read-only; writable are only the workspace (a host directory, mounted at
``mount_point``) and private ``/tmp`` and ``/var/tmp``. No network, not even the host's loopback.
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import Field, field_validator

from swe_sandbox.config import SANDBOX_PATH, EnvironmentConfig
from swe_sandbox.environments import hostcopy
from swe_sandbox.environments.base import Channel, Environment, spawn_runner
from swe_sandbox.errors import BackendUnavailable, ConfigError
from swe_sandbox.runner import BOOTSTRAP

SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/ssh")
RESERVED_MOUNTS = ("/", *SYSTEM_DIRS, "/proc", "/dev", "/tmp", "/var/tmp", "/sys", "/run")


class BwrapConfig(EnvironmentConfig):
    """Config of the ``bwrap`` backend."""

    backend: str = "bwrap"
    workspace: str | None = None
    """Host directory mounted read-write at ``mount_point``; None: a fresh temporary one, removed at close."""
    mount_point: str = "/workspace"
    """Where the workspace appears inside the sandbox; the default working directory."""
    ro_binds: list[str] = Field(default_factory=list)
    """Extra host paths made visible read-only at the same path."""
    share_net: bool = False
    """Keep the host's network (off by default: no network at all)."""
    python: str = ""
    """Interpreter for the runner inside; empty: ``python3`` from the system, else this process's own (bound read-only)."""
    bwrap_path: str = "bwrap"
    """The bubblewrap binary (looked up in the host's PATH, never the sandbox's)."""

    @field_validator("mount_point")
    @classmethod
    def _mount_point(cls, value: str) -> str:
        norm = os.path.normpath(value)
        if not value.startswith("/") or norm != value.rstrip("/") or norm in RESERVED_MOUNTS \
                or any(norm.startswith(d + "/") for d in RESERVED_MOUNTS if d != "/"):
            raise ValueError(f"must be a normalised absolute path outside {', '.join(RESERVED_MOUNTS)}")
        return norm


@functools.lru_cache(maxsize=None)
def _probe(bwrap: str) -> str | None:
    path = shutil.which(bwrap)
    if path is None:
        return f"bubblewrap ({bwrap}) is not installed; on Debian: apt-get install bubblewrap"
    probe = [path, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap failed to run: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        return f"bubblewrap cannot create its namespaces here (user namespaces disabled?): {why}"
    return None


class BwrapEnvironment(Environment):
    """Commands run inside one bubblewrap sandbox (Linux namespaces, no root needed)."""

    config_class = BwrapConfig
    isolation = "namespaces: own pid/net/ipc/uts/user, no network, read-only system, writable workspace and /tmp"
    config: BwrapConfig

    def __init__(self, config: BwrapConfig):
        super().__init__(config)
        self._tmp_workspace: str | None = None
        if config.workspace is not None and not Path(config.workspace).is_dir():
            raise ConfigError(f"environment.workspace: {config.workspace} is not a directory")

    @classmethod
    def unavailable_reason(cls, bwrap: str = "bwrap") -> str | None:
        return _probe(bwrap)

    @property
    def workspace(self) -> Path:
        """The host directory behind ``mount_point``."""
        if self.config.workspace is not None:
            return Path(self.config.workspace)
        if self._tmp_workspace is None:
            self._tmp_workspace = tempfile.mkdtemp(prefix="swe-sandbox-bwrap-")
        return Path(self._tmp_workspace)

    def _python(self) -> tuple[str, list[str]]:
        """The runner's interpreter inside, and binds it needs."""
        if self.config.python:
            return self.config.python, []
        if shutil.which("python3", path=SANDBOX_PATH):
            return "python3", []
        prefix = os.path.realpath(sys.base_prefix)
        return os.path.realpath(sys.executable), ["--ro-bind", prefix, prefix]

    def bwrap_argv(self) -> list[str]:
        """The full bubblewrap command line (useful to debug the policy)."""
        cfg = self.config
        argv = [cfg.bwrap_path, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                "--cap-drop", "ALL", "--hostname", "swe-sandbox"]
        if cfg.share_net:
            argv.append("--share-net")
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for path in MASKED_FILES:
            if os.path.isdir(path):
                argv += ["--tmpfs", path]
            elif os.path.exists(path):
                argv += ["--ro-bind", "/dev/null", path]
        for path in cfg.ro_binds:
            argv += ["--ro-bind", path, path]
        python, binds = self._python()
        argv += binds
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
                 "--bind", str(self.workspace), cfg.mount_point, "--remount-ro", "/",
                 "--chdir", cfg.mount_point, "--", python, "-c", BOOTSTRAP]
        return argv

    def _open_channel(self) -> Channel:
        reason = self.unavailable_reason(self.config.bwrap_path)
        if reason:
            raise BackendUnavailable(reason)
        argv = self.bwrap_argv()
        argv[0] = shutil.which(argv[0])  # resolved here: Popen would search the sandbox's PATH
        base = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "USER": "root"}
        return spawn_runner(argv, self.sandbox_env(base))

    def _stop(self) -> None:
        if self._tmp_workspace is not None:
            shutil.rmtree(self._tmp_workspace, ignore_errors=True)
            self._tmp_workspace = None
        elif self.config.workspace is not None:
            strip_setid_bits(Path(self.config.workspace))

    def _workspace_rel(self, path: str) -> str:
        """Sandbox ``path`` (absolute) as a path relative to the workspace mount.

        Raises:
            ValueError: ``path`` is outside the workspace mount.
        """
        mount = self.config.mount_point
        rel = posixpath.relpath(posixpath.normpath(path), mount)
        if rel == ".." or rel.startswith("../"):
            raise ValueError(f"{path}: only paths under {mount} can be copied")
        return "" if rel == "." else rel

    def _upload(self, src: Path, dst: str) -> None:
        """Copy host ``src`` to ``dst`` under the workspace mount; never through a link (``hostcopy``)."""
        hostcopy.copy(hostcopy.HOST_ROOT, hostcopy.host_rel(src, follow_last=False), self.workspace,
                      self._workspace_rel(dst))

    def _download(self, src: str, dst: Path) -> None:
        """Copy ``src`` under the workspace mount to host ``dst``; never through a link (``hostcopy``)."""
        hostcopy.copy(self.workspace, self._workspace_rel(src), hostcopy.HOST_ROOT, hostcopy.host_rel(dst),
                      limit=self.config.max_download_bytes, source=src)


def strip_setid_bits(root: Path) -> None:
    """Clear setuid/setgid bits a sandbox left in a host workspace (its files are the caller's)."""
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
                if mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISLNK(mode):
                    os.chmod(path, mode & ~(stat.S_ISUID | stat.S_ISGID) & 0o7777)
            except OSError:
                pass

