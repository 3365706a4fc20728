"""Backend ``ssh``: commands run on a remote host over one SSH connection (paramiko).

One connection per environment. The runner starts on the remote through ONE session channel
(``python3 -c BOOTSTRAP``, its source written to the channel's stdin); every command is one round
trip on it. A remote without python3 gets the exec fallback (``mode: fallback``, or ``auto``): one
channel per command, the timeout enforced and the streams merged on the remote.

SSH alone is NOT a sandbox: commands run as the SSH user, with that user's files and network.
``remote_sandbox: bwrap`` runs them inside bubblewrap on the remote, with the bwrap backend's
policy (``BwrapEnvironment.bwrap_argv``) and the remote workspace mounted at ``mount_point``.

Safety (DESIGN.md §5): an unknown host key is refused (naming its fingerprint) unless
``accept_new_host_keys``; the sandbox's variables (``sandbox_env``) travel inline on the remote
command line, shell-quoted, never through the SSH ``env`` request and never the host's own; a
timeout kills the command's whole tree on the remote (the runner or the fallback script does it).

Liveness: every ``keepalive_interval`` seconds a keepalive the server must answer; a connection
that closed, or stayed silent for ``keepalive_interval * keepalive_count_max`` seconds, fails the
command with ``SandboxDied`` and the next command reconnects (same workspace). A runner that died
on a healthy connection closes the environment, as on every backend.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
import secrets
import shlex
import socket
import stat
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field, SecretStr

from swe_sandbox.config import SANDBOX_PATH, EnvironmentConfig, validate
from swe_sandbox.environments.base import Channel, Environment, runner_payload
from swe_sandbox.environments.bwrap import MASKED_FILES, SYSTEM_DIRS, BwrapConfig, BwrapEnvironment
from swe_sandbox.environments.fallback import ExecFallbackChannel
from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxDied, SandboxError, SandboxStartError
from swe_sandbox.runner import BOOTSTRAP, RUN_TOKEN_VAR

#: How often blocked reads and writes wake up to check the connection (seconds).
POLL_S = 0.2
WINDOW = 8 << 20
#: The bwrap backend's base environment (BwrapEnvironment._open_channel).
BWRAP_BASE_ENV = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "USER": "root"}
LAYOUT_PATHS = (*SYSTEM_DIRS, *MASKED_FILES)
#: Kills what the exec fallback's commands left running (they carry RUN_TOKEN_VAR=run id).
SWEEP = """for round in 1 2 3; do
  for f in $(grep -l -a -z -x -F TOKEN /proc/[0-9]*/environ 2>/dev/null); do
    q=${f#/proc/}; kill -KILL "${q%/environ}"
  done
done 2>/dev/null; true"""


class SshConfig(EnvironmentConfig):
    """Config of the ``ssh`` backend."""

    backend: str = "ssh"
    host: str = ""
    port: int = Field(22, gt=0, lt=65536)
    username: str | None = None
    """None: paramiko's default (the local user name)."""
    key_filename: str | list[str] | None = None
    password: SecretStr | None = None
    """Password, or passphrase of ``key_filename``. Without either, the agent and ~/.ssh keys are tried."""
    known_hosts: str | None = None
    """known_hosts file; None: ~/.ssh/known_hosts."""
    accept_new_host_keys: bool = False
    """Trust (and save) an unknown host key; a changed key is always refused."""
    connect_timeout: float = Field(15.0, gt=0)
    keepalive_interval: float = Field(5.0, gt=0)
    """Seconds between keepalives; the connection is dead after ``keepalive_count_max`` unanswered."""
    keepalive_count_max: int = Field(3, ge=1)
    workspace: str | None = None
    """Remote directory commands run in; None: a fresh temporary one, removed at close."""
    mode: Literal["auto", "runner", "fallback"] = "auto"
    """runner: one channel for every command (needs python3 >= 3.6 there); fallback: one per command."""
    python: str = "python3"
    remote_sandbox: Literal["none", "bwrap"] = "none"
    bwrap: dict[str, Any] = Field(default_factory=dict)
    """bwrap backend fields for ``remote_sandbox: bwrap`` (mount_point, share_net, ro_binds, bwrap_path)."""


class _RemoteBwrap(BwrapEnvironment):
    """The bwrap backend's policy for a workspace on the remote host (only ``bwrap_argv`` is used)."""

    def __init__(self, config: BwrapConfig, workspace: str):
        Environment.__init__(self, config)
        self.remote_workspace = workspace

    @property
    def workspace(self) -> PurePosixPath:
        return PurePosixPath(self.remote_workspace)

    def _stop(self) -> None:
        pass


class _Link:
    """One SSH connection and its liveness (keepalives that must be answered)."""

    def __init__(self, client, cfg: SshConfig):
        self.client, self.transport = client, client.get_transport()
        self.interval, self.limit = cfg.keepalive_interval, cfg.keepalive_interval * cfg.keepalive_count_max
        self.alive_at, self.failed, self.done = time.monotonic(), "", threading.Event()
        threading.Thread(target=self._keepalive, daemon=True, name="swe-sandbox-ssh-keepalive").start()

    def _keepalive(self) -> None:
        while not self.done.wait(self.interval) and self.transport.is_active():
            self.transport.global_request("keepalive@openssh.com", wait=True)  # OpenSSH answers (a refusal)
            self.alive_at = time.monotonic()

    def dead(self) -> str:
        """Why the connection is unusable, or "" while it is fine."""
        quiet = time.monotonic() - self.alive_at
        if not self.failed and not self.transport.is_active():
            self.failed = "the SSH connection closed"
        elif not self.failed and quiet > self.limit:
            self.failed = f"the SSH server did not answer for {quiet:.0f} s"
        return self.failed

    def session(self):
        chan = self.transport.open_session(window_size=WINDOW, timeout=self.limit)
        chan.settimeout(POLL_S)
        return chan

    def recv(self, chan, read, n: int = 1 << 20) -> bytes:
        """``read(n)`` (chan.recv / recv_stderr) until data or end; b"" also when the connection is lost."""
        while True:
            try:
                data = read(n)
            except socket.timeout:
                if self.dead():
                    return b""
                continue
            except OSError:
                data = b""
            if data:
                self.alive_at = time.monotonic()
            elif not chan.eof_received:  # closed without the remote's EOF: the connection went away
                self.failed = self.failed or "the SSH connection was lost"
            return data

    def send(self, chan, data: bytes) -> None:
        while data:
            try:
                data = data[chan.send(data[:1 << 18]):]
            except socket.timeout:
                pass
            if self.dead():
                raise OSError(self.failed)

    def close(self) -> None:
        self.done.set()
        self.client.close()


class SshChannel(Channel):
    """The runner's stdin and stdout over one SSH session channel."""

    def __init__(self, chan, link: _Link):
        super().__init__(None)
        self.chan, self.link, self.stderr, self.clean = chan, link, b"", False

    def _write(self, data: bytes) -> None:
        self.link.send(self.chan, data)

    def _read_some(self, timeout: float | None) -> bytes | None:
        while True:
            while self.chan.recv_stderr_ready():  # drained, so it never stalls the window
                self.stderr = (self.stderr + self.chan.recv_stderr(1 << 16))[-2000:]
            try:
                data = self.chan.recv(1 << 20)  # waits at most POLL_S
            except socket.timeout:
                if self.link.dead():
                    raise OSError(self.link.failed) from None
                if timeout is not None:
                    return None  # Channel.recv keeps the deadline
                continue
            if data:
                self.link.alive_at = time.monotonic()
                return data
            if not self.chan.eof_received:
                self.link.failed = self.link.failed or "the SSH connection was lost"
            if self.link.dead():
                raise OSError(self.link.failed)
            return b""

    def diagnose(self) -> str:
        parts = [f"exit status {self.chan.exit_status}"] if self.chan.exit_status_ready() else []
        return "; ".join(parts + ([f"stderr: {self.stderr.decode('utf-8', 'replace').strip()}"] if self.stderr else []))

    def close(self, wait: float = 2.0) -> None:
        try:
            if not self.link.dead():  # end of file: the runner kills what commands left, then exits
                self.chan.shutdown_write()
                self.clean = self.chan.status_event.wait(wait) and self.chan.exit_status == 0
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        self.chan.close()


class _RemoteProcess:
    """One command on its own channel, shaped like ``subprocess.Popen`` for ``ExecFallbackChannel``."""

    def __init__(self, chan, link: _Link):
        self.chan, self.link = chan, link
        read_fd, write_fd = os.pipe()  # the fallback selects on a real fd: a thread fills it
        self.stdout, self.stdin, self.stderr = os.fdopen(read_fd, "rb", 0), self, self
        threading.Thread(target=self._pump, args=(write_fd,), daemon=True).start()

    def _pump(self, fd: int) -> None:
        try:
            while data := self.link.recv(self.chan, self.chan.recv):
                while data:
                    data = data[os.write(fd, data):]
        except OSError:
            pass
        finally:
            os.close(fd)

    def write(self, data: bytes) -> None:
        self.link.send(self.chan, data)

    def read(self, n: int = 1 << 16) -> bytes:
        return self.link.recv(self.chan, self.chan.recv_stderr, n)

    def close(self) -> None:
        self.chan.shutdown_write()

    def wait(self, timeout: float | None = None) -> int:
        return _exit_status(self.chan, self.link, timeout)

    def poll(self) -> int | None:
        return self.chan.exit_status if self.chan.exit_status_ready() else None

    def kill(self) -> None:
        self.chan.close()
        self.stdout.close()  # a pump blocked on a full pipe gets EPIPE


class SshEnvironment(Environment):
    """Commands run on a remote host over SSH (no isolation by itself; see ``remote_sandbox``)."""

    config_class = SshConfig
    isolation = ("none by itself: commands run on the remote host as the SSH user, with its files and network "
                 "(remote_sandbox: bwrap adds the bwrap policy there)")
    config: SshConfig

    def __init__(self, config: SshConfig):
        if not config.host:
            raise ConfigError("environment.host: required: the SSH server to run commands on")
        workspace = config.workspace or f"/tmp/swe-sandbox-ssh-{secrets.token_hex(6)}"
        self._policy = None
        if config.remote_sandbox == "bwrap":
            bcfg = validate(BwrapConfig, {**config.bwrap, "backend": "bwrap", "python": config.python},
                            section="environment.bwrap")
            self._policy = _RemoteBwrap(bcfg, workspace)
            self.isolation = "bwrap on the remote host: " + BwrapEnvironment.isolation
        if not config.cwd:  # commands (and --workspace uploads) go to the workspace
            config = config.model_copy(update={"cwd": self._policy.config.mount_point if self._policy else workspace})
        super().__init__(config)
        self.workspace, self._made = workspace, config.workspace is not None
        self._link: _Link | None = None
        self._sftp = None
        self._mode = "runner"
        self._executing = self._lost = False
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
    def _connect(self, timeout: float) -> _Link:
        import paramiko

        cfg = self.config
        where = f"{cfg.username + '@' if cfg.username else ''}{cfg.host}:{cfg.port}"
        known = os.path.expanduser(cfg.known_hosts or "~/.ssh/known_hosts")

        class Policy(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client, hostname, key):
                fp = "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
                if not cfg.accept_new_host_keys:
                    raise SandboxStartError(
                        f"unknown host key of {hostname}: {key.get_name()} {fp} is not in {known}; check the "
                        f"fingerprint, then add it (ssh-keyscan -p {cfg.port} {cfg.host} >> {known}) or set "
                        "accept_new_host_keys: true")
                keys = paramiko.HostKeys(known if os.path.exists(known) else None)
                keys.add(hostname, key.get_name(), key)
                os.makedirs(os.path.dirname(known) or ".", exist_ok=True)
                keys.save(known)

        client = paramiko.SSHClient()
        if os.path.exists(known):
            client.load_host_keys(known)
        client.set_missing_host_key_policy(Policy())
        secret = cfg.password.get_secret_value() if cfg.password else None
        try:
            client.connect(cfg.host, cfg.port, cfg.username, password=secret, passphrase=secret,
                           key_filename=cfg.key_filename, timeout=timeout, banner_timeout=timeout,
                           auth_timeout=timeout, allow_agent=not (cfg.key_filename or secret),
                           look_for_keys=not (cfg.key_filename or secret))
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise SandboxStartError(f"host key of {where} CHANGED (not the one in {known}): {exc}") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            raise SandboxStartError(f"cannot connect to {where}: {type(exc).__name__}: {exc}") from None
        except BaseException:
            client.close()
            raise
        return _Link(client, cfg)

    def _run(self, link: _Link, script: str) -> tuple[int, str]:
        """Run ``script`` with ``sh`` on the remote: (exit status, stdout and stderr)."""
        chan = link.session()
        chan.set_combine_stderr(True)
        chan.exec_command("exec sh -c " + shlex.quote(script))
        chan.shutdown_write()
        out = b"".join(iter(lambda: link.recv(chan, chan.recv), b""))
        if link.dead():
            raise SandboxStartError(f"{self.config.host}: {link.failed}")
        return _exit_status(chan, link), out.decode("utf-8", "replace")

    def _prepare(self, link: _Link) -> None:
        """Create the workspace; choose runner or fallback; check remote bwrap."""
        cfg, q = self.config, shlex.quote
        lines = [f"mkdir {'-p ' if self._made else ''}-m 700 -- {q(self.workspace)} || exit 3",
                 f"{q(cfg.python)} -c 'import sys; sys.exit(sys.version_info < (3, 6))' 2>/dev/null && echo python=1"]
        if self._policy:
            lines += [f"{q(self._policy.config.bwrap_path)} --unshare-all --unshare-user --ro-bind / / -- true 2>&1"
                      " && echo bwrap=1",
                      f"for p in {' '.join(LAYOUT_PATHS)}; do if [ -L $p ]; then echo \"$p L$(readlink $p)\"; "
                      "elif [ -d $p ]; then echo \"$p D\"; elif [ -e $p ]; then echo \"$p F\"; fi; done"]
        for run_id in self._fallback_runs:  # reconnecting: end the lost connection's commands, as a runner does
            lines.append(SWEEP.replace("TOKEN", shlex.quote(f"{RUN_TOKEN_VAR}={run_id}")))
        self._fallback_runs.clear()
        code, out = self._run(link, "\n".join([*lines, "exit 0"]))
        if code:
            raise SandboxStartError(f"cannot create the workspace {self.workspace} on {cfg.host}: {out.strip()}")
        self._made = True
        facts = set(out.splitlines())
        if "python=1" not in facts and cfg.mode == "runner":
            raise SandboxStartError(f"{cfg.python} (>= 3.6) not found on {cfg.host}; use mode: fallback or auto")
        self._mode = "runner" if cfg.mode == "runner" or (cfg.mode == "auto" and "python=1" in facts) else "fallback"
        if self._policy and "bwrap=1" not in facts:
            raise BackendUnavailable(f"remote_sandbox: bwrap: bubblewrap does not work on {cfg.host}: "
                                     f"{' '.join(f for f in facts if '=' not in f and f[:1] != '/')[:500]}")
        if self._policy:
            here = {f"{p} L{os.readlink(p)}" if os.path.islink(p) else f"{p} D" if os.path.isdir(p) else f"{p} F"
                    for p in LAYOUT_PATHS if os.path.lexists(p)}
            there = {f for f in facts if f[:1] == "/"}
            if here != there:  # BwrapEnvironment.bwrap_argv() reads this host's file system
                raise SandboxStartError(f"remote_sandbox: bwrap: the system layout of {cfg.host} differs from this "
                                        f"host's ({sorted(here ^ there)}); not supported yet")

    def _ensure_link(self) -> _Link:
        if self._closed:
            raise SandboxError("this environment is closed")
        if self._link is None or self._link.dead():
            self._drop_link()
            link = self._connect(self.config.connect_timeout)
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

    def _command(self, argv: list[str], env: dict[str, str]) -> str:
        """The remote shell command: ``argv`` with ``env`` added, quoted (in bwrap: only ``env``)."""
        pairs = [f"{k}={v}" for k, v in env.items()]
        if self._policy:
            policy = self._policy.bwrap_argv()
            return "exec " + shlex.join(["env", "-i", *pairs, *policy[: policy.index("--") + 1], *argv])
        # Without SSH_CLIENT, bash does not think sshd started it: no ~/.bashrc per command.
        return "exec " + shlex.join(["env", "-u", "SSH_CLIENT", "-u", "SSH2_CLIENT", *pairs, *argv])

    def _open_channel(self) -> Channel:
        link = self._ensure_link()
        base = dict(BWRAP_BASE_ENV) if self._policy else {}
        if self._mode == "fallback":
            info = {"host": self.config.host, "workspace": self.workspace}
            channel = ExecFallbackChannel(self._start_exec, self.sandbox_env(), info, lambda: link.dead())
            self._fallback_runs.append(channel.run_id)
            return channel
        chan = link.session()
        chan.exec_command(self._command([self.config.python, "-c", BOOTSTRAP], self.sandbox_env(base)))
        channel = self._runner = SshChannel(chan, link)
        try:
            channel._write(runner_payload())
        except OSError:
            pass  # it died at once; the ready wait reports why
        return channel

    def _start_exec(self, argv: list[str]) -> _RemoteProcess:
        link = self._link
        try:
            if link is None or link.dead():
                raise OSError(link.failed if link else "not connected")
            chan = link.session()
            chan.exec_command(self._command(argv, dict(BWRAP_BASE_ENV) if self._policy else {}))
        except Exception as exc:  # paramiko.SSHException, EOFError, socket errors
            raise OSError(f"cannot open an SSH channel: {exc}") from None
        return _RemoteProcess(chan, link)

    # -- life cycle ------------------------------------------------------------------------------
    def execute(self, action, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        self._executing, self._lost = True, False
        try:
            return super().execute(action, cwd, timeout=timeout)
        except SandboxDied as exc:
            if not self._lost:
                raise
            self._closed = False  # the connection was lost, not the sandbox: the next command reconnects
            raise SandboxDied(f"{exc} (connection to {self.config.host}:{self.config.port} lost; "
                              "the next command reconnects)") from None
        finally:
            self._executing = False

    def _stop(self) -> None:
        link, self._link, self._sftp = self._link, None, None
        self._lost = self._executing and link is not None and bool(link.dead())
        if self._lost:
            link.close()  # keep the workspace for the next connection
            return
        # What commands left: a runner ends it unless it died; the exec fallback has no runner.
        died = self._runner is not None and not self._runner.clean and self.info.get("run_id")
        runs, self._runner = [*self._fallback_runs, *([self.info["run_id"]] if died else [])], None
        script = [SWEEP.replace("TOKEN", shlex.quote(f"{RUN_TOKEN_VAR}={run_id}")) for run_id in runs]
        if self.config.workspace is None and self._made:
            script.append(f"rm -rf -- {shlex.quote(self.workspace)}")
        try:
            if script:
                if link is None or link.dead():  # lost earlier: one short try to clean up
                    link = self._connect(min(5.0, self.config.connect_timeout))
                self._run(link, "\n".join(script))
                self._fallback_runs.clear()
                self._made = self.config.workspace is not None
        except SandboxError:
            pass
        finally:
            if link is not None:
                link.close()

    # -- files -----------------------------------------------------------------------------------
    def _sftp_client(self):
        link = self._ensure_link()
        if self._sftp is None:
            self._sftp = link.client.open_sftp()
            self._sftp.get_channel().settimeout(link.limit)
        return self._sftp

    def _remote(self, path: str) -> str:
        """The remote path of ``path`` as commands see it (relative: to the working directory)."""
        if not self._policy:
            return posixpath.join(self.config.cwd, path)
        mount = self._policy.config.mount_point
        rel = posixpath.relpath(posixpath.normpath(posixpath.join(self.config.cwd, path)), mount)
        if rel.startswith(".."):
            raise ValueError(f"{path}: only paths under {mount} can be copied")
        return posixpath.normpath(posixpath.join(self.workspace, rel))

    def upload(self, src, dst: str) -> None:
        sftp, src, top = self._sftp_client(), Path(src), self._remote(dst)
        if not src.is_dir():
            _mkdirs(sftp, posixpath.dirname(top))
            return _put(sftp, src, top)
        _mkdirs(sftp, top)
        for root, dirs, files in os.walk(src):
            there = posixpath.normpath(posixpath.join(top, Path(root).relative_to(src).as_posix()))
            for name in dirs + files:
                here, remote = Path(root, name), posixpath.join(there, name)
                _mkdirs(sftp, remote) if here.is_dir() and not here.is_symlink() else _put(sftp, here, remote)

    def download(self, src: str, dst) -> None:
        _get(self._sftp_client(), self._remote(src), Path(dst))


def _exit_status(chan, link: _Link, timeout: float | None = None) -> int:
    """The remote command's exit status (-1: none, the connection was lost)."""
    end = None if timeout is None else time.monotonic() + timeout
    while not chan.status_event.wait(POLL_S) and not link.dead():
        if end is not None and time.monotonic() > end:
            raise TimeoutError("the remote command did not end")
    return chan.exit_status


def _mkdirs(sftp, path: str) -> None:
    try:
        sftp.mkdir(path)
    except OSError:
        try:
            is_dir = stat.S_ISDIR(sftp.stat(path).st_mode)
        except OSError:
            is_dir = False
        if not is_dir:
            if posixpath.dirname(path) == path:
                raise
            _mkdirs(sftp, posixpath.dirname(path))
            sftp.mkdir(path)


def _put(sftp, local: Path, remote: str) -> None:
    if local.is_symlink():
        try:
            sftp.remove(remote)
        except OSError:
            pass
        sftp.symlink(os.readlink(local), remote)
        return
    with open(local, "rb") as src, sftp.open(remote, "wb") as dst:
        dst.set_pipelined(True)
        while chunk := src.read(1 << 15):
            dst.write(chunk)
        dst.chmod(os.stat(local).st_mode & 0o7777)


def _get(sftp, remote: str, local: Path) -> None:
    mode = sftp.lstat(remote).st_mode
    if stat.S_ISDIR(mode):
        local.mkdir(parents=True, exist_ok=True)
        for name in sftp.listdir(remote):
            _get(sftp, posixpath.join(remote, name), local / name)
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    if local.is_symlink() or (stat.S_ISLNK(mode) and local.exists()):
        local.unlink()
    if stat.S_ISLNK(mode):
        os.symlink(sftp.readlink(remote), local)
    else:
        sftp.get(remote, str(local))
        os.chmod(local, mode & 0o7777)
