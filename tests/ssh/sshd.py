"""A real OpenSSH server on loopback, for the ssh backend's tests and benchmark.

Per server: a host key and a user key made with ``ssh-keygen``, its own ``sshd_config`` (the
system's is never read) listening on a free port of 127.0.0.1, run as ``sshd -D -e -f CONFIG``.
It accepts the generated key for the user running the tests (root in CI); the client is given an
explicit key and known_hosts file, so nothing of ``~/.ssh`` is used.

Nor does the tester's ``~/.bashrc`` run: sshd starts every channel's command with the user's
login shell, and bash reads ``~/.bashrc`` there unless ``SHLVL`` is already set, which the server
does (``SetEnv SHLVL=1``). This host's root ``~/.bashrc`` runs ``pyenv init`` (~0.9 s per channel,
no guard for non-interactive shells), which would otherwise land on every exec-fallback command
and on the benchmark's channel-per-command baseline. ``test_ssh_backend`` covers startup files
that print and take time with ``session_env={"BASH_ENV": ...}``.

When sshd is missing it is installed with ``scripts/setup-sshd.sh`` if we are root and ``CI`` (or
``SWE_SANDBOX_SETUP_SSHD=1``) is set; otherwise the tests that need it skip (fail under ``CI``).

    shared_sshd()      one server per test process, started on first use, stopped at exit
    ssh_spec(runner)   the environment config (a dict for get_environment) for that server
    server_or_skip()   the shared server, or the current test skips (fails under CI) without sshd
    Sshd()             a private server, for tests that kill, freeze or restart it
"""

from __future__ import annotations

import atexit
import ctypes
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO / "scripts" / "setup-sshd.sh"
SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = "/run/sshd"
PR_SET_PDEATHSIG = 1
#: An unprivileged login every server accepts too (made by scripts/setup-sshd.sh).
TEST_USER = "swe-sandbox-test"

CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_ed25519
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitUserEnvironment no
PrintMotd no
PrintLastLog no
MaxStartups 64
MaxSessions 64
Subsystem sftp internal-sftp
LogLevel VERBOSE
SetEnv {setenv}
"""


class SshdUnavailable(RuntimeError):
    """No usable sshd here (the message says why and how to get one)."""


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure_sshd() -> None:
    """Make sure sshd and ssh-keygen exist (installing them when allowed), sshd's privsep dir, and
    the unprivileged ``TEST_USER`` (``remote_sandbox: bwrap`` refuses root).

    Raises:
        SshdUnavailable: they are missing and may not be installed here.
    """
    def missing() -> bool:
        return not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None or not _has_user(TEST_USER)

    if missing():
        allowed = "CI" in os.environ or os.environ.get("SWE_SANDBOX_SETUP_SSHD") == "1"
        if not (allowed and os.geteuid() == 0):
            raise SshdUnavailable(f"OpenSSH's server or the user {TEST_USER} is missing; run scripts/setup-sshd.sh "
                                  "as root (or set SWE_SANDBOX_SETUP_SSHD=1 to let the tests install it)")
        done = subprocess.run(["bash", str(SETUP_SCRIPT)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0 or missing():
            raise SshdUnavailable(f"scripts/setup-sshd.sh failed ({done.returncode}): {done.stderr[-2000:]}")
    if not os.path.isdir(PRIVSEP_DIR):
        if os.geteuid() != 0:
            raise SshdUnavailable(f"sshd needs {PRIVSEP_DIR}: run scripts/setup-sshd.sh as root")
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    """One OpenSSH server on 127.0.0.1 with its own keys; ``with Sshd() as server: ...``."""

    def __init__(self, session_env: dict[str, str] | None = None) -> None:
        """Make the keys (the server starts with ``start``).

        Args:
            session_env: variables sshd sets in every session (``SetEnv``), besides ``SHLVL=1``.
        """
        ensure_sshd()
        self.session_env = {"SHLVL": "1", **(session_env or {})}
        self.dir = Path(tempfile.mkdtemp(prefix="swe-sandbox-sshd-"))
        self.user = getpass.getuser()
        self.key = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        for path, comment in ((self.dir / "host_ed25519", "swe-sandbox-test-host"), (self.key, "swe-sandbox-test")):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                           check=True, stdin=subprocess.DEVNULL, capture_output=True)
        shutil.copy(f"{self.key}.pub", self.dir / "authorized_keys")
        # sshd reads the keys file as the user logging in: TEST_USER too (the private keys stay 0600)
        os.chmod(self.dir, 0o711)
        os.chmod(self.dir / "authorized_keys", 0o644)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> Sshd:
        """Start sshd (on a new free port the first time, on the same port after ``stop``)."""
        for _attempt in range(5):
            port = self.port or _free_port()
            setenv = " ".join(f'"{k}={v}"' for k, v in self.session_env.items())
            (self.dir / "sshd_config").write_text(CONFIG.format(port=port, dir=self.dir, setenv=setenv))
            self.known_hosts.write_text(f"[127.0.0.1]:{port} " + " ".join(
                (self.dir / "host_ed25519.pub").read_text().split()[:2]) + "\n")
            log = open(self.dir / "sshd.log", "ab")
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                         preexec_fn=_die_with_parent)
            log.close()
            if self._wait_ready(timeout):
                self.port = port
                return self
            self.stop()
            if self.port:  # a restart on the same port: wait for it to be free again
                time.sleep(0.5)
        raise SshdUnavailable(f"sshd did not start: {self.log()[-2000:]}")

    def _wait_ready(self, timeout: float) -> bool:
        port = int((self.dir / "sshd_config").read_text().split()[1])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def log(self) -> str:
        return (self.dir / "sshd.log").read_text(errors="replace")

    def pids(self) -> list[int]:
        """The listener and every sshd process below it (one or two per connection)."""
        if self.proc is None:
            return []
        table = {}
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except (OSError, ValueError):
                continue
            comm, rest = stat[stat.index("(") + 1: stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            table[int(name)] = (int(rest[1]), comm, rest[0])
        found, frontier = {self.proc.pid}, {self.proc.pid}
        while frontier:
            frontier = {p for p, (ppid, comm, _) in table.items() if ppid in frontier and comm == "sshd"} - found
            found |= frontier
        return sorted(p for p in found if p in table and table[p][2] not in "ZX")

    def signal_all(self, sig: int) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def freeze(self) -> None:
        """SIGSTOP every sshd process of this server: connections stay open, nothing gets through."""
        self.signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal_all(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the listener and every connection's sshd (the host "goes down")."""
        self.signal_all(signal.SIGCONT)
        self.signal_all(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.kill()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Sshd:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- client side -----------------------------------------------------------------------------
    def spec(self, runner: str = "python", **overrides: Any) -> dict[str, Any]:
        """An environment config for this server (``get_environment(server.spec())``).

        Args:
            runner: the ssh backend's ``runner`` field: ``python``, ``exec`` or ``auto``.
            **overrides: further config fields.
        """
        return {"backend": "ssh", "host": "127.0.0.1", "port": self.port, "username": self.user,
                "key_filename": str(self.key), "known_hosts": str(self.known_hosts), "runner": runner, **overrides}

    def write_spec(self, path: Path, runner: str = "python", **overrides: Any) -> Path:
        """The same config as a YAML file (for ``--env FILE``)."""
        import yaml

        path.write_text(yaml.safe_dump(self.spec(runner, **overrides)))
        return path


_SHARED: Sshd | None = None


def shared_sshd() -> Sshd:
    """One server for the whole test process, started on first use and stopped at exit."""
    global _SHARED
    if _SHARED is None:
        server = Sshd()
        atexit.register(server.close)
        _SHARED = server.start()
    return _SHARED


def server_or_skip(make: Callable[[], Sshd] = shared_sshd) -> Sshd:
    """``make()``; without a usable sshd the current test skips (fails under ``CI``)."""
    try:
        return make()
    except SshdUnavailable as exc:
        import pytest

        if "CI" in os.environ:
            pytest.fail(f"no sshd for the ssh backend in CI: {exc}", pytrace=False)
        pytest.skip(f"no sshd for the ssh backend: {exc}")


def ssh_spec(runner: str = "python", **overrides: Any) -> dict[str, Any]:
    """Config of the shared server for the conformance suite; skips (fails under CI) without sshd."""
    return server_or_skip().spec(runner, **overrides)
