"""Backend ``ssh``: commands run on a remote host over one SSH connection (paramiko).

One connection per environment (``link``). The runner starts on the remote through ONE
session channel (``python3 -c BOOTSTRAP``, its source written to the channel's stdin); every
command is one round trip on it (``streams.SshChannel``). A remote without python3 gets the
exec fallback (``runner: exec``, or ``auto``): one channel per command, the timeout enforced and
the streams merged on the remote (``fallback.ExecFallbackChannel`` over ``RemoteProcess``).
Files move through SFTP (``files``).

SSH alone is NOT a sandbox: commands run as the SSH user, with that user's files and network.
``remote_sandbox: bwrap`` runs them inside bubblewrap on the remote, with the bwrap backend's
policy (``bwrap.bwrap_policy``) and the remote workspace mounted at ``mount_point``.

Safety (DESIGN.md §5): an unknown host key is refused (naming its fingerprint) unless
``accept_new_host_keys``; the sandbox's variables (``sandbox_env``) travel inline on the remote
command line, shell-quoted, never through the SSH ``env`` request and never the host's own; a
timeout kills the command's whole tree on the remote (the runner or the fallback script does it).

A connection that closed or froze fails the running command with ``ConnectionLost`` within
``keepalive_interval * keepalive_count_max`` seconds; the next command reconnects (same
workspace) and first kills what the lost connection's commands left. A runner that died on a
healthy connection closes the environment, as on every backend.

sshd runs every channel's command through the user's login shell; bash then reads ~/.bashrc
(it sees SSH_CLIENT) once per channel: once per environment with the runner, once per command
with the exec fallback, where its cost adds to every command (the timeout counts from when the
remote script starts). Commands themselves do not see SSH_CLIENT, so they read no startup files.
"""

from __future__ import annotations

import posixpath
import secrets
import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr

from swe_sandbox import capabilities as cap
from swe_sandbox.config import ALLOWLIST, EnvironmentConfig, validate
from swe_sandbox.environments import fallback
from swe_sandbox.environments.base import Environment, Session, mount_relative
from swe_sandbox.environments.bwrap import BASE_ENV as BWRAP_BASE_ENV
from swe_sandbox.environments.bwrap import BwrapConfig, BwrapEnvironment
from swe_sandbox.environments.fallback import ExecFallbackChannel, run_sweep, trace_path
from swe_sandbox.environments.snapshot import SnapshotRoot
from swe_sandbox.environments.ssh import files as ssh_files
from swe_sandbox.environments.ssh.link import SshLink, connect, ssh_errors
from swe_sandbox.environments.ssh.remote_bwrap import RemoteBwrap
from swe_sandbox.environments.ssh.streams import RemoteProcess, SshChannel
from swe_sandbox.errors import ConfigError, ConnectionLost, SandboxDied, SandboxError, SandboxStartError
from swe_sandbox.runner import BOOTSTRAP, ISOLATED

#: Where the exec fallback keeps each run's trace file (``fallback.trace_path``).
TRACE_DIR = "/tmp"
#: Without SSH_CLIENT, bash does not think sshd started it: commands read no ~/.bashrc.
NO_SSH_VARS = ["-u", "SSH_CLIENT", "-u", "SSH2_CLIENT"]


class SshConfig(EnvironmentConfig):
    """Config of the ``ssh`` backend."""

    backend: str = "ssh"
    """Always ``ssh``."""
    host: str = ""
    """The SSH server (name or address); required."""
    port: int = Field(22, gt=0, lt=65536)
    """The server's TCP port."""
    username: str | None = None
    """Remote user; None: paramiko's default (the local user name)."""
    key_filename: str | list[str] | None = None
    """Private key file(s); None: with no ``password`` either, ssh-agent and ~/.ssh keys are tried."""
    password: SecretStr | None = None
    """Password, or passphrase of ``key_filename`` (never shown in configs or trajectories)."""
    known_hosts: str | None = None
    """known_hosts file the host key is checked against; None: ~/.ssh/known_hosts."""
    accept_new_host_keys: bool = False
    """Trust (and save to ``known_hosts``) an unknown host key; a changed key is always refused."""
    connect_timeout: float = Field(15.0, gt=0)
    """Seconds for the TCP connect, the server's banner and the authentication, each."""
    keepalive_interval: float = Field(5.0, gt=0)
    """Seconds between keepalives the server must answer."""
    keepalive_count_max: int = Field(3, ge=1)
    """Unanswered keepalive intervals after which the connection counts as dead."""
    workspace: str | None = None
    """Remote directory commands run in; None: a fresh temporary one, removed at close."""
    runner: Literal["auto", "python", "exec"] = "auto"
    """``python``: the runner over one channel for every command (needs python3 >= 3.6 there);
    ``exec``: the fallback, one channel per command; ``auto``: the runner if the remote has it."""
    python: str = "python3"
    """The remote interpreter that runs the runner."""
    remote_sandbox: Literal["none", "bwrap"] = "none"
    """``bwrap``: commands run in bubblewrap on the remote, with the bwrap backend's policy."""
    bwrap: dict[str, Any] = Field(default_factory=dict)
    """bwrap backend fields for ``remote_sandbox: bwrap`` (mount_point, share_net, ro_binds, bwrap_path)."""


def sweep(run_id: str) -> str:
    """Remote shell lines killing what commands of the run ``run_id`` left (``fallback.run_sweep``):
    at close after the exec fallback (no runner to do it) or a runner that died, and on
    reconnecting in fallback mode."""
    return run_sweep(run_id, trace_path(TRACE_DIR, run_id))


class SshEnvironment(Environment):
    """Commands run on a remote host over SSH (no isolation by itself; see ``remote_sandbox``).

    Attributes:
        workspace (str): the remote directory behind the working directory.
    """

    config_class = SshConfig
    needs_target = True  # a host: `swe-sandbox check` without --env shows it, uncounted
    isolation = ("none: SSH alone is not a sandbox; commands run on the remote host as the SSH user, with its "
                 "files and network (remote_sandbox: bwrap adds the bwrap policy there)")
    config: SshConfig

    @classmethod
    def missing_capabilities(cls, config: SshConfig) -> dict[str, str]:
        """What the conformance kit must not expect here (``swe_sandbox.capabilities``)."""
        import getpass


        gaps: dict[str, str] = {cap.NETWORK_ALLOWLIST: "the allow-list proxy's socket is not forwarded to the remote "
                                                       "host (remote bwrap takes network: none or on)"}
        gaps[cap.DIRECT_RUNNER_CHANNEL] = "sshd relays every frame between the SSH channel and the runner's pipes"
        if config.remote_sandbox == "none":
            root = "SSH alone is not a sandbox: commands run as the SSH user, here root, "
            gaps[cap.HOST_ISOLATION] = "SSH alone is not a sandbox: commands run on the remote host itself"
            gaps[cap.SETID_FREE_WORKSPACE] = ("SSH alone is not a sandbox: the workspace is the SSH user's own "
                                              "directory on the remote, where that user may set any mode bits")
            if (config.username or getpass.getuser()) == "root":
                gaps[cap.NOT_HOST_ROOT] = root + "who may write the host's kernel settings"
                gaps[cap.TAMPERPROOF_TIMEOUT] = root + "who may replace the host's own `sleep` (only tested, never done)"
                gaps[cap.PRIVATE_RUNNER_CHANNEL] = root + "whose CAP_SYS_PTRACE opens the non-dumpable runner's pipes"
                gaps[cap.UNREACHABLE_RUNNER_CHANNEL] = root + "whose CAP_SYS_PTRACE reads the runner's fds and sshd's"
        if config.remote_sandbox != "none" or (config.username or getpass.getuser()) != "root":
            gaps[cap.RUN_AS_USER] = ("the runner runs as the SSH user, who is not root" if config.remote_sandbox == "none"
                                     else "the remote bwrap sandbox maps one uid only: there is no other user to become")
        if config.runner == "exec":
            gaps.update(fallback.missing_capabilities(shared_host=True))
        gaps[cap.SNAPSHOT_METADATA] = ("the workspace is copied through SFTP, which carries no FIFOs nor owners, nor "
                                       "the workspace directory's own mode")
        return gaps

    def __init__(self, config: SshConfig):
        if not config.host:
            raise ConfigError("environment.host: required: the SSH server to run commands on")
        workspace = config.workspace or f"/tmp/swe-sandbox-ssh-{secrets.token_hex(6)}"
        self._policy = None
        if config.remote_sandbox == "bwrap":
            bcfg = validate(BwrapConfig, {**config.bwrap, "backend": "bwrap", "python": config.python},
                            section="environment.bwrap")
            if bcfg.network == ALLOWLIST:
                raise ConfigError(f"environment.bwrap.network: {ALLOWLIST} is not available over ssh (the proxy's "
                                  "socket is not forwarded to the remote host): use none or on")
            self._policy = RemoteBwrap(bcfg, workspace)
            self.isolation = "bwrap on the remote host: " + BwrapEnvironment.isolation
        self._given = config  # as the caller gave it: a fork's config (sibling_config)
        if not config.cwd:  # commands (and --workspace uploads) go to the workspace
            config = config.model_copy(update={"cwd": self._policy.config.mount_point if self._policy else workspace})
        super().__init__(config)
        self.workspace, self._made = workspace, config.workspace is not None
        self.mode = "runner"
        self._link: SshLink | None = None
        self._sftp = None
        self._fallback_runs: list[str] = []  # their background jobs are killed at close
        self._runner: SshChannel | None = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            import paramiko  # noqa: F401
        except ImportError:
            return "paramiko is not installed (pip install 'swe-sandbox[ssh]')"
        return None

    # -- connection ------------------------------------------------------------------------------
    def _ensure_link(self) -> SshLink:
        """The open connection, (re)connecting and preparing the remote when there is none."""
        if self._closed:
            raise SandboxError("this environment is closed")
        if self._link is None or self._link.dead():
            self._drop_link()
            link = connect(self.config, self.config.connect_timeout)
            try:
                self._prepare(link)
            except BaseException:
                link.close()
                raise
            self._link = link
        return self._link

    def _drop_link(self) -> None:
        link, self._link, self._sftp = self._link, None, None
        if link is not None:
            link.close()

    def _prepare(self, link: SshLink) -> None:
        """Create the workspace, choose runner or fallback, check remote bwrap; end the commands a
        lost connection left (as a runner would)."""
        cfg, q = self.config, shlex.quote
        lines = [f"mkdir {'-p ' if self._made else ''}-m 700 -- {q(self.workspace)} || exit 3",
                 f"{q(cfg.python)} -c 'import sys; sys.exit(sys.version_info < (3, 6))' 2>/dev/null && echo python=1",
                 *(self._policy.probe() if self._policy else []), *map(sweep, self._fallback_runs), "exit 0"]
        self._fallback_runs.clear()
        code, out = link.run("\n".join(lines))
        if code:
            raise SandboxStartError(f"cannot create the workspace {self.workspace} on {cfg.host}: {out.strip()}")
        self._made = True
        facts = set(out.splitlines())
        if "python=1" not in facts and cfg.runner == "python":
            raise SandboxStartError(f"{cfg.python} (>= 3.6) not found on {cfg.host}; set runner: auto or exec "
                                    "to use the exec fallback")
        self.mode = "runner" if cfg.runner == "python" or (cfg.runner == "auto" and "python=1" in facts) else "exec"
        if self._policy:
            self._policy.check(cfg.host, facts)

    def _command(self, argv: list[str], env: dict[str, str], *, replace: bool = True) -> str:
        """The remote shell command: ``argv`` with ``env`` added, quoted (in bwrap: only ``env``).

        ``replace=False`` keeps the login shell as its parent, which turns a killed ``argv`` into
        an exit status (paramiko ignores sshd's ``exit-signal``); the shell's own stderr (its
        "Killed" notice) is dropped, ``argv``'s is kept.
        """
        pairs = [f"{k}={v}" for k, v in env.items()]
        if self._policy:
            words = ["env", "-i", *pairs, *self._policy.policy_argv(), *argv]
        else:
            words = ["env", *NO_SSH_VARS, *pairs, *argv]
        if replace:
            return f"exec {shlex.join(words)}"
        return f"exec 3>&2 2>/dev/null; {shlex.join(words)} 2>&3 3>&-; exit $?"

    def _open_channel(self) -> Session:
        link = self._ensure_link()
        base = dict(BWRAP_BASE_ENV) if self._policy else {}
        if self.mode == "exec":
            info = {"host": self.config.host, "workspace": self.workspace}
            session = ExecFallbackChannel(self._start_exec, self.sandbox_env(), info, lambda: link.dead(),
                                          trace_dir=TRACE_DIR)
            self._fallback_runs.append(session.run_id)
            return session
        try:
            chan = link.start(self._command([self.config.python, *ISOLATED, "-c", BOOTSTRAP], self.sandbox_env(base)))
        except ssh_errors() as exc:
            raise SandboxStartError(f"cannot open an SSH channel on {link.where}: {exc}") from None
        channel = self._runner = SshChannel(chan, link)
        channel.start_runner()
        return channel

    def _start_exec(self, argv: list[str]) -> RemoteProcess:
        """Start one fallback command (``ExecFallbackChannel``'s ``start_exec``)."""
        link = self._link
        try:
            if link is None or link.dead():
                raise OSError(link.failed if link else "not connected")
            chan = link.start(self._command(argv, dict(BWRAP_BASE_ENV) if self._policy else {}, replace=False))
        except ssh_errors() as exc:
            raise OSError(f"cannot open an SSH channel: {exc}") from None
        return RemoteProcess(chan, link)

    # -- life cycle ------------------------------------------------------------------------------
    def _after_start(self) -> None:
        self.info.setdefault("mode", self.mode)

    def _lost_connection(self, exc: SandboxDied) -> ConnectionLost | None:
        """The connection was lost, not the sandbox: the next command reconnects (same workspace)."""
        if self._link is None or not self._link.dead():
            return None
        return ConnectionLost(f"{exc} (connection to {self.config.host}:{self.config.port} lost; "
                              "the next command reconnects)")

    def _drop_connection(self) -> None:
        """Close the lost connection, keeping the workspace for the next one."""
        self._drop_link()

    def _stop(self) -> None:
        link, self._link, self._sftp = self._link, None, None
        try:
            self._clean_up(link)
        finally:
            if link is not None:
                link.close()

    def _clean_up(self, link: SshLink | None) -> None:
        """Kill what commands left where no runner did, and remove a temporary workspace."""
        died = self._runner is not None and not self._runner.clean and self.info.get("run_id")
        runs, self._runner = [*self._fallback_runs, *([self.info["run_id"]] if died else [])], None
        script = [*map(sweep, runs)]
        if self.config.workspace is None and self._made:
            script.append(f"rm -rf -- {shlex.quote(self.workspace)}")
        if not script:
            return
        try:
            if link is None or link.dead():  # lost earlier: one short try to clean up
                link = connect(self.config, min(5.0, self.config.connect_timeout))
            link.run("\n".join(script))
            self._fallback_runs.clear()
            self._made = self.config.workspace is not None
        except SandboxError:
            pass

    # -- files -----------------------------------------------------------------------------------
    def snapshot_roots(self) -> list[SnapshotRoot]:
        """The remote workspace (copied through ``download`` and ``upload``)."""
        self.start()
        return [SnapshotRoot("workspace", self._policy.config.mount_point if self._policy else self.workspace)]

    def sibling_config(self) -> SshConfig:
        """The config as given, with a fresh remote workspace (``workspace`` unset)."""
        return self._given.model_copy(update={"workspace": None})

    def _sftp_client(self):
        link = self._ensure_link()
        if self._sftp is None:
            self._sftp = link.client.open_sftp()
            self._sftp.get_channel().settimeout(link.limit)
        return self._sftp

    def _remote(self, path: str) -> str:
        """The remote path behind sandbox ``path`` (absolute: ``Environment.sandbox_path``).

        Raises:
            ValueError: with ``remote_sandbox: bwrap``, ``path`` is outside ``mount_point``.
        """
        if not self._policy:
            return posixpath.join(self.config.cwd, path)
        rel = mount_relative(posixpath.join(self.config.cwd, path), self._policy.config.mount_point)
        return posixpath.normpath(posixpath.join(self.workspace, rel))

    def _upload(self, src: Path, dst: str) -> None:
        ssh_files.upload(self._sftp_client(), src, self._remote(dst), confined=self.workspace)

    def _download(self, src: str, dst: Path) -> None:
        ssh_files.download(self._sftp_client(), self._remote(src), dst, limit=self.config.max_download_bytes)
