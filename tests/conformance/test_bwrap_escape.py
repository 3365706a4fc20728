"""Escape tests for the bwrap backend: what a command inside must not reach (DESIGN.md section 5).

The sandbox promises: every namespace unshared (network included), no capabilities, a clear
environment, the system read-only, only the workspace and a private /tmp writable.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import swe_sandbox
from swe_sandbox.testing.kit import (
    host_processes_with,
    run,
    sandbox_processes_with,
    unique_marker,
    wait_host_gone,
    wait_until,
)

from helpers.variants import require_backend

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


def test_workspace_is_shared_with_host(fresh_sandbox, shared_workspace):
    """/workspace is the host workspace directory, read-write both ways; it is the default cwd. (The
    directory is an unprivileged user's: root's sandboxes never run as root.)"""
    workspace = shared_workspace(0o755, uid=WORKSPACE_UID)
    (workspace / "from-host.txt").write_text("hello from host\n")
    environment = fresh_sandbox(workspace=str(workspace))
    result = run(environment, "pwd; cat /workspace/from-host.txt; echo 'from sandbox ü' > /workspace/out.txt; "
                              "mkdir -p sub && echo nested > sub/n.txt")
    assert result["returncode"] == 0, result
    assert result["output"] == "/workspace\nhello from host\n"
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "from sandbox ü\n"
    assert (workspace / "sub" / "n.txt").read_text() == "nested\n"


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
            except (TimeoutError, OSError):
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
        assert wait_until(lambda: len(server.accepted) == 1, within=2.0), "the host server does not work"
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


# -- a hostile command against the host: privileges, kernel interfaces, channel, limits ---------
#
# Each test below is the attack as a malicious command would run it; the assertion is what the
# host must still look like. They assume the host process may be root (the README's setup).

#: An unprivileged host uid with no passwd entry: owner of the workspaces these tests hand in.
WORKSPACE_UID = 1_999_999_999
SETID = 0o6000


def _host_ids(marker: str) -> list[tuple[int, int, str]]:
    """``(uid, gid, uid_map)`` as the host's /proc shows them for the processes whose command line
    holds ``marker`` (real uid and gid; uid_map as read from the host's user namespace)."""
    found = []
    for line in host_processes_with(marker):
        pid = line.split()[0]
        try:
            status = open(f"/proc/{pid}/status").read()
            uid_map = open(f"/proc/{pid}/uid_map").read()
        except OSError:
            continue
        fields = dict(row.split(":", 1) for row in status.splitlines() if ":" in row)
        found.append((int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0]), uid_map))
    return found


def _started_marker(environment) -> str:
    """Start ``sleep MARKER`` in the background of ``environment`` and return the marker."""
    marker = unique_marker()
    # returns once the background job has exec'd sleep (until then its command line is bash's)
    result = run(environment, f"sleep {marker} >/dev/null 2>&1 & "
                              f"until grep -q {marker} /proc/$!/cmdline 2>/dev/null; do sleep 0.01; done")
    assert result["returncode"] == 0, result
    return marker


def _setid_entries(root) -> list[str]:
    """Entries under host directory ``root`` (itself included) with a setuid or setgid bit."""
    found = []
    for dirpath, dirs, files in os.walk(root):
        for name in [""] + dirs + files:
            path = os.path.join(dirpath, name) if name else dirpath
            mode = os.lstat(path).st_mode
            if mode & SETID and not stat.S_ISLNK(mode):
                found.append(f"{path} {oct(mode)} uid={os.lstat(path).st_uid}")
    return found


@pytest.fixture
def shared_workspace(fresh_sandbox):  # removed after the sandboxes of the test are closed
    """Factory of host directories handed to sandboxes as their ``workspace`` (removed after the
    test). They live in the system's temporary directory: pytest's ``tmp_path`` is inside root's
    private directory, which the sandbox's unprivileged host uid could not reach."""
    made = []

    def make(mode=0o777, uid=None):
        workspace = Path(tempfile.mkdtemp(prefix="swe-escape-ws-"))
        made.append(workspace)
        workspace.chmod(mode)
        if uid is not None:
            os.chown(workspace, uid, uid)
        return workspace

    yield make
    for workspace in made:
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.mark.parametrize("path", ["/proc/sys/kernel/printk_ratelimit_burst", "/proc/sys/kernel/core_pattern"])
def test_sysctl_writes_never_reach_the_host(sandbox, path):
    """`echo ... > /proc/sys/...` (core_pattern: host-root code execution) changes nothing on the host."""
    before = open(path).read()
    value = "|/workspace/pwn %p" if path.endswith("core_pattern") else str(int(before) + 1)
    try:
        result = run(sandbox, f"echo '{value}' > {path} && echo WROTE; cat {path}")
        after = open(path).read()
    finally:
        if open(path).read() != before:  # the attack worked: put the host back
            with open(path, "w") as restore:
                restore.write(before)
    assert after == before, f"the sandbox changed the host's {path}: {result}"
    assert "WROTE" not in result["output"], result


def test_kernel_interfaces_are_read_only_or_masked(sandbox):
    """As docker's defaults: /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus, /proc/fs read-only;
    /proc/kcore, /proc/keys, /proc/timer_list, ... empty; /sys absent or read-only."""
    result = run(sandbox, r"""
for p in /proc/sys/kernel/core_pattern /proc/sys/vm/drop_caches /proc/sysrq-trigger /proc/sys /proc/irq \
         /proc/bus /proc/fs /proc/acpi /proc/scsi /proc/asound /sys /sys/kernel /sys/firmware; do
    [ -e $p ] && [ -w $p ] && echo "WRITABLE $p"
done
for p in /proc/kcore /proc/keys /proc/timer_list /proc/latency_stats /proc/sched_debug /proc/timer_stats; do
    [ -e $p ] && [ -s $p -o "$(head -c 1 $p 2>/dev/null | wc -c)" != 0 ] && echo "READABLE $p"
done
for d in /proc/acpi /proc/scsi /proc/asound /sys/firmware; do
    [ -d $d ] && [ -n "$(ls -A $d 2>/dev/null)" ] && echo "LISTS $d"
done
touch /proc/acpi/x /sys/x 2>/dev/null && echo CREATED
echo done""")
    assert result["output"] == "done\n", result


def test_sandbox_root_is_an_unprivileged_host_uid(fresh_sandbox):
    """Seen from the host's /proc, every sandbox process runs as a non-root uid and gid, and the
    sandbox's uid 0 maps to that uid (not to host root)."""
    environment = fresh_sandbox()
    assert run(environment, "id -u")["output"] == "0\n"  # root inside, as today
    marker = _started_marker(environment)
    ids = _host_ids(marker)
    assert ids, "the sandbox's process is not visible from the host"
    for uid, gid, uid_map in ids:
        assert uid != 0 and gid != 0, ids
        assert all(int(line.split()[1]) != 0 for line in uid_map.splitlines()), uid_map


def test_sandbox_runs_as_the_owner_of_a_given_workspace(fresh_sandbox, shared_workspace):
    """A workspace owned by an unprivileged user: the sandbox runs as that user (its files stay its)."""
    workspace = shared_workspace(0o755, uid=WORKSPACE_UID)
    environment = fresh_sandbox(workspace=str(workspace))
    result = run(environment, "echo made > new.txt && mkdir d && echo ok")
    assert result["output"] == "ok\n", result
    assert {p.stat().st_uid for p in workspace.iterdir()} == {WORKSPACE_UID}
    assert {uid for uid, _, _ in _host_ids(_started_marker(environment))} == {WORKSPACE_UID}


def test_a_workspace_the_sandbox_cannot_write_is_refused(fresh_sandbox, shared_workspace):
    """Root's own 0755 directory: the sandbox (never root) could not write it; refused, not chowned."""
    if os.geteuid() != 0:
        pytest.skip("only root's sandboxes change uid")
    workspace = shared_workspace(0o755)
    with pytest.raises(swe_sandbox.ConfigError, match="workspace.*host_uid"):
        run(fresh_sandbox(workspace=str(workspace)), "true")
    assert workspace.stat().st_uid == 0


@pytest.mark.parametrize("attack", [
    "cp /bin/true t && chmod u+s t",
    "cp /bin/true t && chmod 2755 t",
    "install -m 4755 /bin/true t",
    "python3 -c \"import os; os.close(os.open('t', os.O_CREAT | os.O_WRONLY, 0o4755))\"",
    "python3 -c \"import os, stat; os.mknod('t', stat.S_IFREG | 0o6755)\"",
    "mkdir d && chmod g+s d",
    "mkdir -m 2755 d",
    "python3 -c \"import os; os.mkdir('d', 0o7755)\"",
])
def test_no_setid_file_reaches_a_host_workspace(fresh_sandbox, shared_workspace, attack):
    """A setuid/setgid file or directory never appears in a host workspace, even while the sandbox
    still runs (nothing left to strip at close)."""
    workspace = shared_workspace()
    environment = fresh_sandbox(workspace=str(workspace))
    result = run(environment, f"{attack}; ls -l")
    assert _setid_entries(workspace) == [], result
    for entry in workspace.iterdir():
        assert entry.lstat().st_uid != 0, f"{entry} belongs to host root: {result}"


def test_strip_setid_bits_never_follows_a_link(tmp_path, shared_workspace):
    """The clean-up at close clears setid bits in the workspace and nothing a link there points to."""
    from swe_sandbox.environments.bwrap import strip_setid_bits

    outside = tmp_path / "outside"
    outside.write_text("host file")
    outside.chmod(0o4755)
    workspace = shared_workspace()
    (workspace / "sub").mkdir()
    (workspace / "sub" / "planted").write_text("x")
    (workspace / "sub" / "planted").chmod(0o6755)
    (workspace / "sub").chmod(0o2755)
    (workspace / "link").symlink_to(outside)
    (workspace / "dirlink").symlink_to(tmp_path)
    strip_setid_bits(workspace)
    assert _setid_entries(workspace) == []
    assert outside.stat().st_mode & 0o7777 == 0o4755


RUNNER_PIPES_SCAN = r"""
import os, sys
wanted = {int(sys.argv[1]), int(sys.argv[2])}
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        continue
    for fd in fds:
        try:
            st = os.stat("/proc/%s/fd/%s" % (pid, fd))
        except OSError:
            continue
        if st.st_ino in wanted:
            print("HOLDS", pid, fd, open("/proc/%s/comm" % pid).read().strip())
for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
    try:
        os.close(os.open("/proc/1/fd/%d" % fd, mode | os.O_NONBLOCK))
        print("OPENED /proc/1/fd/%d" % fd)
    except OSError as exc:
        pass
print("pid1", open("/proc/1/comm").read().strip())
"""


def test_no_process_a_command_can_reach_holds_the_runner_pipes(sandbox):
    """The runner is PID 1 (no bwrap init holding its stdin/stdout): scanning every /proc/*/fd from a
    command finds no open end of the runner's pipes, and /proc/1/fd/0 and /1 do not open."""
    run(sandbox, "true")  # started
    proc = sandbox._channel.proc
    pipes = [os.fstat(stream.fileno()).st_ino for stream in (proc.stdin, proc.stdout)]
    script = RUNNER_PIPES_SCAN.replace("'", "'\"'\"'")
    result = run(sandbox, f"python3 -c '{script}' {pipes[0]} {pipes[1]}")
    assert result["output"] == "pid1 swe-sandbox-run\n", result


def test_orphans_are_reaped_and_close_ends_everything(fresh_sandbox):
    """Orphaned children (re-parented to the runner, PID 1) do not pile up as zombies; closing ends
    every process of the sandbox."""
    environment = fresh_sandbox()
    result = run(environment, "for i in $(seq 200); do (sleep 0.01 &); done; echo started")
    assert result["output"] == "started\n", result
    deadline = time.monotonic() + 10
    while True:
        zombies = run(environment, "ps -eo stat= | grep -c '^Z'")["output"].strip()
        if zombies == "0" or time.monotonic() > deadline:
            break
    assert zombies == "0", f"{zombies} zombies left"
    marker = _started_marker(environment)
    assert host_processes_with(marker)
    environment.close()
    assert wait_host_gone(marker, grace=5) == []


SYSCALLS = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    ret = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if ret == 0 and name.startswith("clone"):
        os._exit(0)
    if ret >= 0:
        if name.startswith("clone"):
            os.waitpid(ret, 0)
        print(name, "ALLOWED")
    else:
        print(name, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
NEWUSER, NEWNS, SIGCHLD = 0x10000000, 0x20000, 17
call("unshare_user", 272, NEWUSER)
call("unshare_mount", 272, NEWNS)
call("clone_newuser", 56, NEWUSER | SIGCHLD, 0, 0, 0, 0)
call("clone3", 435, 0, 0)
call("setns", 308, 0, 0)
call("keyctl", 250, 0, -3, 0)
call("add_key", 248, 0, 0, 0, 0, -3)
call("request_key", 249, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("userfaultfd", 323, 0)
call("io_uring_setup", 425, 1, 0)
call("mount", 165, 0, 0, 0, 0, 0)
call("fsopen", 430, 0, 0)
call("open_tree", 428, -100, 0, 0)
call("move_mount", 429, 0, 0, 0, 0, 0)
call("mount_setattr", 442, 0, 0, 0, 0, 0)
call("pivot_root", 155, 0, 0)
call("kexec_load", 246, 0, 0, 0, 0)
call("init_module", 175, 0, 0, 0)
call("reboot", 169, 0, 0, 0, 0)
call("swapon", 167, 0, 0)
call("acct", 163, 0)
call("syslog", 103, 3, 0, 0)
call("settimeofday", 164, 0, 0)
call("adjtimex", 159, 0)
call("quotactl", 179, 0, 0, 0, 0)
call("open_by_handle_at", 304, 0, 0, 0)
call("iopl", 172, 3)
call("openat2", 437, -100, 0, 0, 0)
call("personality_no_aslr", 135, 0x0040000)
fd = os.open("/dev/null", os.O_RDONLY)
call("ioctl_tiocsti", 16, fd, 0x5412, 0)
call("ioctl_tioclinux", 16, fd, 0x541C, 0)
"""

#: What each call must give: EPERM (Docker's default profile), ENOSYS where a caller should fall back.
SYSCALL_VERDICTS = {"clone3": "ENOSYS", "openat2": "ENOSYS"}


def test_seccomp_denies_what_dockers_default_profile_denies(sandbox):
    """Namespaces, mounts (old and new API), keyrings, bpf, perf, userfaultfd, io_uring, kexec,
    modules, reboot, swap, clocks, syslog, quotas, handles, port I/O, personality and tty injection."""
    script = SYSCALLS.replace("'", "'\"'\"'")
    result = run(sandbox, f"python3 -c '{script}'; unshare -Ur true && echo UNSHARED; "
                          "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m 2>/dev/null && echo MOUNTED")
    verdicts = dict(line.split() for line in result["output"].splitlines() if len(line.split()) == 2)
    wrong = {name: got for name, got in verdicts.items() if got != SYSCALL_VERDICTS.get(name, "EPERM")}
    assert len(verdicts) == 33 and wrong == {}, result["output"]
    assert "UNSHARED" not in result["output"] and "MOUNTED" not in result["output"]


def test_ordinary_syscalls_still_work_under_seccomp(sandbox):
    """What a build needs keeps working: threads, fork, chmod without setid bits, personality queries."""
    result = run(sandbox, "cd /tmp && python3 -c \"import os, threading, ctypes; "
                          "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join(); "
                          "os.close(os.open('f', os.O_CREAT | os.O_WRONLY, 0o644)); os.chmod('f', 0o755); "
                          "print(ctypes.CDLL(None).personality(0xffffffff))\" && ls -l f | cut -c1-10")
    assert result["output"] == "thread\n0\n-rwxr-xr-x\n", result


def test_a_fork_bomb_stops_at_the_process_limit(fresh_sandbox):
    """A classic fork bomb hits RLIMIT_NPROC inside the sandbox; the timeout then ends it and the
    sandbox keeps working."""
    environment = fresh_sandbox(max_processes=64)
    result = run(environment, "ulimit -u; bomb() { bomb | bomb & }; bomb; sleep 2", timeout=4)
    assert result["output"].startswith("64\n"), result
    assert "Resource temporarily unavailable" in result["output"], result
    assert run(environment, "echo alive")["output"] == "alive\n"


def test_a_memory_hog_is_stopped(fresh_sandbox):
    """A process touching more memory than ``max_memory_bytes`` gets MemoryError, not the host's RAM."""
    environment = fresh_sandbox(max_memory_bytes=256 << 20)
    result = run(environment, "python3 -c \"x = b'x' * (1 << 30); print('GOT', len(x))\"", timeout=20)
    assert "MemoryError" in result["output"] and "GOT" not in result["output"], result


def test_default_limits_are_set(sandbox):
    """Without config, the limits of the README apply to every command (RLIMITs and tmpfs sizes)."""
    result = run(sandbox, "ulimit -u -d -f -n; df -B1 --output=size /tmp /var/tmp /dev/shm | tail -n 3")
    lines = [line.split()[-1] for line in result["output"].splitlines()]
    assert lines[:4] == ["1024", str(4 << 20), str(16 << 20), "8192"], result  # ulimit: KiB (-d -f), counts
    assert lines[4:] == [str(1 << 30), str(1 << 30), str(64 << 20)], result


def test_tmp_fills_up_at_its_limit(fresh_sandbox):
    """/tmp and /var/tmp are tmpfs of ``tmp_size_bytes``: a command filling them gets ENOSPC there."""
    environment = fresh_sandbox(tmp_size_bytes=16 << 20)
    result = run(environment, "for d in /tmp /var/tmp; do head -c 64M /dev/zero > $d/fill 2>/dev/null; "
                              "echo $d $? $(stat -c %s $d/fill); done", timeout=20)
    rows = [line.split() for line in result["output"].splitlines()]
    assert [row[:2] for row in rows] == [["/tmp", "1"], ["/var/tmp", "1"]], result
    assert all(int(row[2]) <= 16 << 20 for row in rows), result


def test_uploads_belong_to_the_sandbox(fresh_sandbox, tmp_path):
    """Files ``upload`` writes (as root on the host) are the sandbox's own: it can change and remove them."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("host\n")
    (src / "g.txt").write_text("g\n")
    environment = fresh_sandbox()
    environment.upload(src, "/workspace/up")
    environment.upload(src / "g.txt", "/workspace/new/deep/g.txt")
    result = run(environment, "echo more >> up/sub/f.txt && rm up/g.txt && touch up/sub/new new/deep/h "
                              "&& rm -r new && cat up/sub/f.txt")
    assert result["output"] == "host\nmore\n", result
    assert (environment.workspace / "up").stat().st_uid != 0
    environment.download("/workspace/up", tmp_path / "back")
    assert (tmp_path / "back" / "sub" / "f.txt").read_text() == "host\nmore\n"


def test_without_the_seccomp_library_the_sandbox_does_not_start(fresh_sandbox, monkeypatch):
    """No silent downgrade: without pyseccomp (or libseccomp) starting fails and says what to install;
    ``seccomp: false`` is the explicit way to run without the filter."""
    from swe_sandbox.environments import bwrap_seccomp

    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import pyseccomp -> ImportError
    monkeypatch.setattr(bwrap_seccomp, "filter_bpf", bwrap_seccomp.filter_bpf.__wrapped__)
    with pytest.raises(swe_sandbox.BackendUnavailable, match="pip install pyseccomp.*libseccomp2"):
        run(fresh_sandbox(), "true")
    result = run(fresh_sandbox(seccomp=False), "setarch -R true && echo no-filter")  # personality: filtered
    assert result["output"] == "no-filter\n", result
