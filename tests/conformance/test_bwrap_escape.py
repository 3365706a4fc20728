"""Escape tests for the bwrap backend: what a command inside must not reach (DESIGN.md section 5).

The sandbox promises: every namespace unshared (network included), no capabilities, a clear
environment, the system read-only, only the workspace and a private /tmp writable.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid

import pytest

import swe_sandbox
from conftest import require_backend, run, sandbox_processes_with, unique_marker

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def sandbox():
    """One bwrap environment shared by the read-only checks of this module."""
    require_backend("bwrap")
    environment = swe_sandbox.get_environment("bwrap", timeout=20)
    try:
        yield environment
    finally:
        environment.close()


@pytest.fixture
def fresh_sandbox():
    """Factory of fresh bwrap environments (for config or host environment changes); closed after."""
    require_backend("bwrap")
    made = []

    def factory(**overrides):
        overrides.setdefault("timeout", 20)
        environment = swe_sandbox.get_environment("bwrap", **overrides)
        made.append(environment)
        return environment

    yield factory
    for environment in made:
        environment.close()


# -- file system -------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", ["/", "/usr", "/usr/local/bin", "/etc", "/home", "/root", "/var", "/opt",
                                       "/bin", "/lib"])
def test_no_writes_outside_workspace_and_tmp(sandbox, directory):
    """Writes outside /workspace and /tmp fail, and nothing appears on the host."""
    name = f"swe-escape-{uuid.uuid4().hex}"
    target = os.path.join(directory, name)
    result = run(sandbox, f"echo x > '{target}' || echo write-failed; mkdir '{target}.d' || echo mkdir-failed; "
                          f"touch '{target}.t' || echo touch-failed")
    assert "write-failed" in result["output"], result
    assert "mkdir-failed" in result["output"], result
    assert "touch-failed" in result["output"], result
    for suffix in ("", ".d", ".t"):
        assert not os.path.lexists(target + suffix), f"{target + suffix} was created on the host"


def test_existing_system_files_cannot_be_modified_or_removed(sandbox):
    """System files cannot be modified, removed or have their mode changed."""
    before = open("/etc/hostname", "rb").read() if os.path.exists("/etc/hostname") else None
    result = run(sandbox, "echo pwned >> /etc/passwd || echo append-failed; rm -f /etc/hostname || echo rm-failed; "
                          "chmod 777 /usr/bin/env || echo chmod-failed; ln -s /x /usr/bin/swe-escape || echo ln-failed")
    for word in ("append-failed", "rm-failed", "chmod-failed", "ln-failed"):
        assert word in result["output"], result
    assert b"pwned" not in open("/etc/passwd", "rb").read()
    if before is not None:
        assert open("/etc/hostname", "rb").read() == before
    assert not os.path.lexists("/usr/bin/swe-escape")


def test_remount_and_mount_fail(sandbox):
    """The read-only system cannot be remounted writable, nor anything mounted."""
    result = run(sandbox, "mount -o remount,rw / 2>&1 || echo remount-failed; "
                          "mount -o remount,rw /usr 2>&1 || echo remount-usr-failed; "
                          "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m 2>&1 || echo mount-failed; "
                          "touch /usr/swe-escape-after-remount 2>/dev/null && echo WROTE-USR")
    assert "remount-failed" in result["output"]
    assert "remount-usr-failed" in result["output"]
    assert "mount-failed" in result["output"]
    assert "WROTE-USR" not in result["output"]


def test_workspace_is_shared_with_host(fresh_sandbox, tmp_path):
    """/workspace is the host workspace directory, read-write both ways; it is the default cwd."""
    (tmp_path / "from-host.txt").write_text("hello from host\n")
    environment = fresh_sandbox(workspace=str(tmp_path))
    result = run(environment, "pwd; cat /workspace/from-host.txt; echo 'from sandbox ü' > /workspace/out.txt; "
                              "mkdir -p sub && echo nested > sub/n.txt")
    assert result["returncode"] == 0, result
    assert result["output"] == "/workspace\nhello from host\n"
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "from sandbox ü\n"
    assert (tmp_path / "sub" / "n.txt").read_text() == "nested\n"


def test_tmp_is_private(sandbox):
    """/tmp is writable inside but private: the file does not appear in the host's /tmp."""
    name = f"swe-escape-tmp-{uuid.uuid4().hex}"
    result = run(sandbox, f"echo inside > /tmp/{name} && cat /tmp/{name}; echo x > /var/tmp/{name} && echo var-tmp-ok")
    assert result["output"] == "inside\nvar-tmp-ok\n"
    assert not os.path.exists(f"/tmp/{name}")
    assert not os.path.exists(f"/var/tmp/{name}")


def test_host_files_outside_system_dirs_invisible(sandbox):
    """Host directories that are not part of the system (this repository, /root, /home) are not visible."""
    here = os.path.dirname(os.path.abspath(__file__))
    result = run(sandbox, f"ls -A '{here}' 2>/dev/null && echo SEES-REPO; ls -A /root 2>/dev/null; "
                          "ls -A /home 2>/dev/null; echo done")
    assert "SEES-REPO" not in result["output"]
    assert result["output"] == "done\n", result


def test_shadow_not_readable(sandbox):
    """/etc/shadow and /etc/gshadow are not readable (fail or empty); ssh host keys are hidden."""
    result = run(sandbox, "cat /etc/shadow /etc/gshadow 2>/dev/null; cat /etc/ssh/ssh_host_*key 2>/dev/null; "
                          "echo end")
    assert result["output"] == "end\n", result
    if os.path.exists("/etc/shadow"):
        host_first = open("/etc/shadow").readline().strip()
        assert host_first not in result["output"]


# -- network -----------------------------------------------------------------------------------


class HostServer:
    """A TCP server in the test process; records every connection it accepts."""

    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted.append(addr)
            try:
                conn.sendall(b"HOST-SECRET-BANNER\n")
            finally:
                conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


CONNECT_SCRIPT = r"""
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        print("CONNECTED", target, s.recv(100))
    except OSError as exc:
        print("FAILED", target, type(exc).__name__)
    finally:
        s.close()
"""


def test_no_connection_to_host_loopback(sandbox):
    """A server the test starts on the host's 127.0.0.1 cannot be reached from inside."""
    server = HostServer("127.0.0.1")
    try:
        sanity = socket.create_connection(("127.0.0.1", server.port), timeout=2)
        sanity.close()
        time.sleep(0.2)
        assert len(server.accepted) == 1, "the host server does not work"
        result = run(sandbox, f"python3 -c '{CONNECT_SCRIPT}' 127.0.0.1:{server.port} localhost:{server.port}")
        time.sleep(0.3)
        assert "CONNECTED" not in result["output"], result
        assert result["output"].count("FAILED") == 2, result
        assert len(server.accepted) == 1, "the sandbox reached the host's server"
    finally:
        server.close()


def test_no_connection_to_host_addresses_or_internet(sandbox):
    """Nothing outside is reachable: the host's other addresses (server on 0.0.0.0), public IPs."""
    server = HostServer("0.0.0.0")
    try:
        addresses = {"127.0.0.1"}
        try:
            out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout
            addresses |= {a for a in out.split() if ":" not in a}
        except (OSError, subprocess.TimeoutExpired):
            pass
        targets = [f"{a}:{server.port}" for a in sorted(addresses)] + ["1.1.1.1:53", "8.8.8.8:443"]
        result = run(sandbox, f"python3 -c '{CONNECT_SCRIPT}' " + " ".join(targets), timeout=30)
        assert "CONNECTED" not in result["output"], result
        assert result["output"].count("FAILED") == len(targets), result
        assert server.accepted == []
    finally:
        server.close()


def test_only_loopback_interface(sandbox):
    """The sandbox has its own network namespace with only the loopback interface."""
    result = run(sandbox, "tail -n +3 /proc/net/dev")
    interfaces = [line.split(":")[0].strip() for line in result["output"].splitlines()]
    assert interfaces == ["lo"], result


def test_no_connection_to_host_abstract_unix_socket(sandbox):
    """A host abstract unix socket (per network namespace) cannot be reached from inside."""
    name = f"swe-escape-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    try:
        script = ("import socket; s = socket.socket(socket.AF_UNIX)\n"
                  "try:\n    s.connect(chr(0) + '" + name + "'); print('CONNECTED')\n"
                  "except OSError as e:\n    print('FAILED', type(e).__name__)")
        result = run(sandbox, f"python3 -c \"{script}\"")
        assert result["output"].startswith("FAILED"), result
    finally:
        server.close()


# -- processes, environment, privileges --------------------------------------------------------


def test_no_view_of_host_processes(sandbox):
    """Own pid namespace: a host process (and the test process itself) is invisible inside."""
    marker = unique_marker()
    host_sleep = subprocess.Popen(["sleep", marker])
    try:
        assert sandbox_processes_with(sandbox, marker) == []
        assert sandbox_processes_with(sandbox, "pytest") == []
        result = run(sandbox, f"kill -0 {host_sleep.pid} 2>/dev/null && echo CAN-SIGNAL; "
                              f"test -e /proc/{os.getpid()} && echo SEES-TEST-PID; "
                              "ls -d /proc/[0-9]* | wc -l")
        lines = result["output"].split()
        assert "CAN-SIGNAL" not in lines and "SEES-TEST-PID" not in lines, result
        assert int(lines[-1]) < 20, f"sees {lines[-1]} processes"
        assert host_sleep.poll() is None
    finally:
        host_sleep.kill()
        host_sleep.wait()


def test_no_host_environment(fresh_sandbox, monkeypatch):
    """A host variable is absent inside, in every process's environment."""
    monkeypatch.setenv("SWE_ESCAPE_HOST_SECRET", "host-secret-value-31337")
    environment = fresh_sandbox()
    result = run(environment, "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert result["returncode"] == 0
    assert "host-secret-value-31337" not in result["output"]
    assert "SWE_ESCAPE_HOST_SECRET" not in result["output"]


def test_capabilities_are_zero(sandbox):
    """Every capability set is empty (CapEff, CapPrm, CapInh, CapBnd, CapAmb)."""
    result = run(sandbox, "grep ^Cap /proc/self/status")
    caps = dict(line.split(":\t") for line in result["output"].splitlines())
    assert set(caps) >= {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    assert all(int(value, 16) == 0 for value in caps.values()), caps


def test_hostname_isolated(sandbox):
    """Own UTS namespace: the hostname is the sandbox's, and changing it fails."""
    result = run(sandbox, "hostname; hostname escaped 2>/dev/null && echo CHANGED")
    assert result["output"].splitlines()[0] != socket.gethostname()
    assert "CHANGED" not in result["output"]
