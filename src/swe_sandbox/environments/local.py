"""Backend ``local``: the runner as a child process on the host. No isolation at all.

Commands run as the calling user, with the host's files and network. Only the execute contract
holds (timeouts, tree kill, output order and cap, empty stdin). The host environment is not
forwarded except ``PASSTHROUGH_ENV`` (needed for tools to work), plus ``env`` and ``forward_env``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from swe_sandbox import capabilities as cap
from swe_sandbox.config import EnvironmentConfig
from swe_sandbox.environments import fallback, hostcopy
from swe_sandbox.environments.base import Environment, Session, spawn_runner
from swe_sandbox.environments.snapshot import SnapshotRoot
from swe_sandbox.runner import BOOTSTRAP, ISOLATED, RUN_TOKEN_VAR, kill_tree

#: Host variables the local backend keeps: locale, identity and search path, never credentials.
PASSTHROUGH_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
#: Where the exec fallback keeps each run's trace file (``fallback.trace_path``).
TRACE_DIR = tempfile.gettempdir()


class LocalConfig(EnvironmentConfig):
    """Config of the ``local`` backend."""

    backend: str = "local"
    python: str = ""
    """Interpreter that runs the runner; empty: the one running swe-sandbox."""
    runner: Literal["python", "exec"] = "python"
    """``python``: the runner, one process for every command; ``exec``: the exec fallback, one ``sh``
    wrapper per command (``fallback.ExecFallbackChannel``; what container and ssh hosts without
    python3 get, here checkable on any host)."""
    temp_cwd: bool = False
    """Run commands in a fresh temporary directory of their own (``cwd`` is then ignored), removed
    at close: what a snapshot's forks get (``snapshot``)."""


class LocalEnvironment(Environment):
    """Runs commands directly on the host (no isolation; for trusted commands and development)."""

    config_class = LocalConfig
    isolation = "none: commands run on the host as you, with your files and network"
    config: LocalConfig
    _fallback_run: str | None = None  # run token of the exec fallback's commands (runner: exec)

    @classmethod
    def missing_capabilities(cls, config: LocalConfig) -> dict[str, str]:
        """What the conformance kit must not expect here (``swe_sandbox.capabilities``)."""
        gaps = {cap.HOST_ISOLATION: "no isolation: commands run on the host itself",
                cap.PRIVATE_RUNNER_CHANNEL: "no isolation: a command runs as the calling user, who may open the "
                                            "runner's pipes",
                cap.UNREACHABLE_RUNNER_CHANNEL: "no isolation: the host process holding the other ends of the "
                                                "runner's pipes runs as the commands' user",
                cap.SETID_FREE_WORKSPACE: "no isolation: commands run on the host and write the caller's own "
                                          "directories directly",
                cap.NETWORK_ALLOWLIST: "no isolation: commands use the host's network; nothing could keep them to "
                                       "an allow-list"}
        if os.geteuid() != 0:
            gaps[cap.RUN_AS_USER] = "commands run as the calling user, who is not root and cannot become another"
        if os.geteuid() == 0:
            gaps[cap.NOT_HOST_ROOT] = "no isolation: commands run on the host itself as the calling user, here root"
            gaps[cap.TAMPERPROOF_TIMEOUT] = ("no isolation: commands run on the host as its root, who may replace "
                                             "its own `sleep` (only tested, never done)")
        if config.runner == "exec":
            gaps.update(fallback.missing_capabilities(shared_host=True))
        if not (config.cwd or config.temp_cwd):
            gaps[cap.SNAPSHOT] = ("commands run in the caller's own working directory (no cwd set), which a snapshot "
                                  "does not copy; set cwd (or temp_cwd) to the directory that holds the task")
            gaps[cap.RESET_IN_PLACE] = gaps[cap.SNAPSHOT]
        return gaps

    def __init__(self, config: LocalConfig):
        super().__init__(config)
        self._temp_dir: str | None = None

    @property
    def directory(self) -> str:
        """Where commands start: the temporary directory (``temp_cwd``, made at start), else ``cwd``."""
        return self._temp_dir or self.config.cwd

    def snapshot_roots(self) -> list[SnapshotRoot]:
        """The working directory (``/tmp`` and HOME are the host's own, never copied)."""
        self.start()
        return [SnapshotRoot("workspace", self.directory, Path(self.directory))]

    def sibling_config(self) -> LocalConfig:
        """A fork runs in a temporary directory of its own."""
        return self.config.model_copy(update={"cwd": "", "temp_cwd": True})

    def _open_channel(self) -> Session:
        if self.config.temp_cwd and self._temp_dir is None:
            self._temp_dir = tempfile.mkdtemp(prefix="swe-sandbox-local-")
        base = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        if self.config.runner == "exec":
            channel = fallback.ExecFallbackChannel(self._start_exec(self.sandbox_env(base)), shared_clock=True,
                                                   trace_dir=TRACE_DIR)
            self._fallback_run = channel.run_id  # its commands carry it as their run token
            return channel
        argv = [self.config.python or sys.executable, *ISOLATED, "-c", BOOTSTRAP]
        return spawn_runner(argv, self.sandbox_env(base), cwd=self.directory or None)

    def _start_exec(self, env: dict[str, str]) -> Callable[[list[str]], HostExec]:
        """The exec fallback's ``start_exec``: ``argv`` on the host, in ``config.cwd``, with ``env`` only."""
        return lambda argv: HostExec(argv, env, self.directory or None)

    def _stop(self) -> None:
        """End what commands left running on the host (the exec fallback, or a runner that died first)."""
        if self.info.get("run_id"):
            kill_tree(marker=f"\0{RUN_TOKEN_VAR}={self.info['run_id']}\0".encode(), budget=1.0)
        if self._fallback_run:  # the fallback's own sweep: its run token, and its trace file's holders
            sweep = fallback.run_sweep(self._fallback_run, fallback.trace_path(TRACE_DIR, self._fallback_run))
            subprocess.run(["sh", "-c", sweep], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _upload(self, src: Path, dst: str) -> None:
        hostcopy.copy_paths(src, dst, follow_dst=False)  # a link at dst is replaced, as in a container

    def _download(self, src: str, dst: Path) -> None:
        hostcopy.copy_paths(src, dst, follow_dst=True, limit=self.config.max_download_bytes)


class HostExec:
    """One exec-fallback command on the host, shaped like an engine's exec (``fallback.ExecHandle``).

    Its streams end with its process: the wrapper's output reader, in the wrapper's process group,
    is killed when the wrapper ends (a killed wrapper would otherwise leave it holding stdout until
    the command ends). ``terminate`` kills the group: the wrapper itself shrugs off SIGTERM.
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None):
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env, cwd=cwd, start_new_session=True, close_fds=True)
        self.stdin, self.stdout, self.stderr = self._proc.stdin, self._proc.stdout, self._proc.stderr
        threading.Thread(target=self._end_group, daemon=True).start()

    def _end_group(self) -> None:
        self._proc.wait()
        self.kill()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def poll(self) -> int | None:
        return self._proc.poll()

    def kill(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except OSError:
            pass  # already gone

    terminate = kill
