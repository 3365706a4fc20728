"""The attack suite: what a hostile, model-written command tries, on every backend variant (DESIGN.md §5).

Each test is one attack, written as a malicious command would do it, and what must hold afterwards:

- kernel interfaces (``/proc/sys``, ``/proc/sysrq-trigger``, ``/sys``) cannot be written; where a
  write seems to succeed, the HOST's value is unchanged (and restored if it was not);
- the runner's channel (its stdin/stdout pipes, identified from the host, where root reads
  ``/proc/<pid>/fd`` of the runner) is reachable from no process inside the sandbox;
- a background job that SIGSTOPs the runner (or whatever holds the channel) and answers the host's
  frames itself cannot forge a result: ``exit 7`` stays 7, a timeout takes its time, nothing
  submits a forged text;
- a well-formed but unauthenticated reply, or one with wrong types, written on the REAL pipe (or
  the direct channel's socket, taken with ``pidfd_getfd``) from the host side is rejected
  (``ProtocolError`` / ``SandboxDied``), never returned as a result;
- a SIGSTOPped runner gives ``SandboxDied`` within timeout + ``HOST_GRACE_S``;
- no setuid/setgid file reaches a host workspace or a download, also while the sandbox runs;
- a sparse file's download is bounded;
- nothing started through the container's lifetime guard or launcher outlives a timeout;
- the sandbox's processes are not the host's root (seen from the host);
- no engine relays the runner's frames where the backend says so (the direct channel's socket has
  the runner as its peer, or the runner's pipe is this process's), and from inside the direct
  channel's socket cannot be connected to, replaced or flooded (it was unlinked as the runner
  connected).

Safety of the suite itself: hostile commands run only inside sandboxes. On variants that are no
sandbox (``local``, and ``ssh`` whose "remote" is this host) the attacks that would change the host
are replaced by harmless probes (an open for writing that writes nothing, a ``test -w``), whose
failure is the declared limitation. The forger acts only on the pipes of this test's own runner or
on exec wrappers carrying this test's run id; every process a test stops or starts is ended by its
pid; a host value changed by a successful attack is restored.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import swe_sandbox
from swe_sandbox.capabilities import (
    DIRECT_RUNNER_CHANNEL,
    HOST_ISOLATION,
    HOST_VISIBLE_PROCESSES,
    NOT_HOST_ROOT,
    PRIVATE_COMMAND_OUTPUT,
    SETID_FREE_WORKSPACE,
    TAMPERPROOF_TIMEOUT,
    UNREACHABLE_RUNNER_CHANNEL,
)
from swe_sandbox.environments.base import HOST_GRACE_S
from swe_sandbox.errors import ProtocolError, SandboxDied
from swe_sandbox.runner import FrameAuth
from swe_sandbox.testing.kit import (
    has,
    host_processes_with,
    hosts_its_workspace,
    requires,
    run,
    unique_marker,
    wait_host_gone,
)

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
RUNNER_COMM = "swe-sandbox-run"
EXEC_WRAPPER_NAME = "swe-sandbox-exec"
#: Every attack looks at the sandbox's processes from the host.
pytestmark = requires(HOST_VISIBLE_PROCESSES)


def on_the_host(env: Any) -> bool:
    """Whether ``env``'s commands run on a host itself: attacks that would change the host are not
    run there (a harmless probe stands in for them)."""
    return not has(env, HOST_ISOLATION)


# -- host-side view of processes ----------------------------------------------------------------


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def proc_status(pid: int) -> dict[str, str]:
    data = _read(f"/proc/{pid}/status") or b""
    out = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def proc_start(pid: int) -> int | None:
    """The start time of ``pid`` (field 22 of /proc/pid/stat): tells a pid from its reuse."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    return int(data[data.rfind(b")") + 2 :].split()[19])


def proc_state(pid: int) -> str:
    data = _read(f"/proc/{pid}/stat")
    return "" if data is None else data[data.rfind(b")") + 2 :][:1].decode()


def proc_argv(pid: int) -> list[bytes]:
    return (_read(f"/proc/{pid}/cmdline") or b"").rstrip(b"\0").split(b"\0")


def proc_comm(pid: int) -> str:
    return (_read(f"/proc/{pid}/comm") or b"").decode("utf-8", "replace").strip()


def alive(pid: int, start: int | None) -> bool:
    return start is not None and proc_start(pid) == start and proc_state(pid) not in ("", "Z", "X")


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents, up to (not including) the host's PID 1."""
    chain: list[int] = []
    while pid > 1 and len(chain) < 64:
        chain.append(pid)
        ppid = proc_status(pid).get("PPid")
        if not ppid:
            break
        pid = int(ppid)
    return chain


def nspids(pid: int) -> list[int]:
    return [int(p) for p in proc_status(pid).get("NSpid", "").split()]


def fd_link(pid: int, fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def fd_links(pid: int) -> dict[int, str]:
    """Every open fd of ``pid`` -> what it links to (empty where /proc cannot say)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    links = {int(fd): fd_link(pid, int(fd)) for fd in fds if fd.isdigit()}
    return {fd: link for fd, link in links.items() if link}


#: pidfd_open(2) and pidfd_getfd(2) on x86-64 and aarch64 (Linux >= 5.6).
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438


def steal_fd(pid: int, fd: int) -> int:
    """A copy of ``pid``'s ``fd`` in this process (``pidfd_getfd``: root on the host takes the
    runner's own end of its socket, which no ``open`` of /proc/<pid>/fd gives)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")
    try:
        got = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return got
    finally:
        os.close(pidfd)


def wait_until(predicate: Callable[[], Any], within: float, step: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something true, for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


def find_host_pid(marker: str, within: float = 30.0) -> int:
    """The host pid of the one process we started whose argv holds ``marker`` as a word."""
    def look() -> int | None:
        for line in host_processes_with(marker):
            pid = int(line.split()[0])
            argv = proc_argv(pid)
            if marker.encode() in argv and os.path.basename(argv[0]) != b"setsid":
                return pid
        return None

    pid = wait_until(look, within)
    assert pid, f"the process holding {marker} never showed up on the host"
    return pid


class Owner:
    """Whatever holds a command's channel to the host: the runner, or the exec fallback's wrapper.

    ``links``: its standard streams (fd -> ``pipe:[N]``); ``sockets``: a runner's unix sockets
    (fd -> ``socket:[N]``: the direct channel, ``environments.direct``); ``pipes``: every end of the
    channel, pipes and sockets; ``channel``: the (in, out) ends frames travel on.
    """

    def __init__(self, kind: str, pid: int):
        self.kind, self.pid = kind, pid
        self.sandbox_pid = nspids(pid)[-1] if nspids(pid) else pid
        fds = (0, 1) if kind == "runner" else (0, 1, 2)
        self.links = {fd: fd_link(pid, fd) for fd in fds}
        self.sockets = {fd: link for fd, link in fd_links(pid).items() if link.startswith("socket:")} \
            if kind == "runner" else {}
        self.pipes = {link for link in [*self.links.values(), *self.sockets.values()]
                      if link and link.startswith(("pipe:", "socket:"))}

    @property
    def direct(self) -> bool:
        """Whether the runner's frames go over a socket (the direct channel), not its stdin/stdout."""
        return bool(self.sockets)

    @property
    def socket_fd(self) -> int:
        """The direct channel's fd in the runner: its first socket (connected before any other)."""
        return min(self.sockets)

    @property
    def channel(self) -> tuple[str | None, str | None]:
        if self.direct:
            return self.sockets[self.socket_fd], self.sockets[self.socket_fd]
        return self.links[0], self.links[1]

    def __repr__(self) -> str:
        return f"Owner({self.kind}, host pid {self.pid}, sandbox pid {self.sandbox_pid}, {self.links})"


def is_exec_wrapper(pid: int) -> bool:
    argv = proc_argv(pid)
    return len(argv) > 3 and os.path.basename(argv[0]) == b"sh" and argv[3] == EXEC_WRAPPER_NAME.encode()


def owner_of(pid: int) -> Owner | None:
    """The runner or exec wrapper above the sandbox process ``pid`` (host pid), or None."""
    for ancestor in ancestors(pid):
        if proc_comm(ancestor) == RUNNER_COMM:
            return Owner("runner", ancestor)
        if is_exec_wrapper(ancestor):
            return Owner("exec", ancestor)
    return None


def sandbox_chain(pid: int) -> list[int]:
    """``pid`` and its ancestors inside the same pid namespace (just ``pid`` when there is none)."""
    depth = len(nspids(pid))
    if depth <= 1:
        return [pid]
    return [p for p in ancestors(pid) if len(nspids(p)) == depth]


class Processes:
    """Processes a test stopped or started on the host: ended by pid (checked against reuse) at the end."""

    def __init__(self) -> None:
        self.stopped: list[tuple[int, int | None]] = []
        self.started: list[tuple[int, int | None]] = []

    def stop(self, pid: int) -> None:
        self.watch(pid)
        os.kill(pid, signal.SIGSTOP)

    def watch(self, pid: int) -> None:
        """``pid`` may be stopped by an attack: resumed, and killed if it outlives the close."""
        self.stopped.append((pid, proc_start(pid)))

    def started_by_us(self, pid: int) -> int:
        self.started.append((pid, proc_start(pid)))
        return pid

    def resume(self) -> None:
        for pid, start in self.stopped:
            if alive(pid, start):
                os.kill(pid, signal.SIGCONT)

    def end(self, env: Any) -> None:
        """Resume what we stopped, close the environment, then SIGKILL whatever of ours is left."""
        self.resume()
        for pid, start in self.started:
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        try:
            env.close()
        finally:
            for pid, start in self.stopped + self.started:
                def gone(pid: int = pid, start: int | None = start) -> bool:
                    return not alive(pid, start)

                if wait_until(gone, 5.0):
                    continue
                os.kill(pid, signal.SIGKILL)


def runner_now(env: Any, procs: Processes) -> Owner | None:
    """The runner of ``env`` (from a background ``sleep MARKER`` and its parents); None in exec mode."""
    marker = unique_marker()
    run(env, f"sleep {marker} </dev/null >/dev/null 2>&1 &")
    sleeper = procs.started_by_us(find_host_pid(marker))
    owner = owner_of(sleeper)
    os.kill(sleeper, signal.SIGKILL)
    return owner


def mode_of(env: Any) -> str:
    return "exec" if env.info.get("mode") == "exec" else "runner"


def execute_outcome(env: Any, command: str, **kwargs: Any) -> tuple[Any, float]:
    """``(result dict or the SweSandbox exception it raised, seconds it took)``."""
    started = time.monotonic()
    try:
        outcome: Any = env.execute({"command": command}, **kwargs)
    except (swe_sandbox.Submitted, SandboxDied, ProtocolError) as exc:
        outcome = exc
    return outcome, time.monotonic() - started


class Background:
    """``execute`` in a thread, so the test can act on the host while the command runs."""

    def __init__(self, env: Any, command: str, **kwargs: Any):
        self.outcome: Any = None
        self.elapsed = 0.0
        self.thread = threading.Thread(target=self._run, args=(env, command), kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, env: Any, command: str, **kwargs: Any) -> None:
        started = time.monotonic()
        try:
            self.outcome = env.execute({"command": command}, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.outcome = exc
        self.elapsed = time.monotonic() - started

    def join(self, within: float = 120.0) -> Any:
        self.thread.join(within)
        assert not self.thread.is_alive(), f"execute did not return within {within} s"
        return self.outcome


#: A process that blocks SIGUSR1, says so in its name, and waits for it (at most 60 s): the host
#: acts while it waits, then lets it go on. Its argv holds the marker, so the host finds it.
WAITER = r"""
import ctypes, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
ctypes.CDLL(None).prctl(15, b"swe-attack-wait", 0, 0, 0)
signal.sigtimedwait([signal.SIGUSR1], 60)
"""


def python_command(script: str, *args: str) -> str:
    """A shell command running ``script`` with python3 (through a quoted heredoc, any text safe)."""
    return f"python3 - {shlex.join(args)} <<'SWE_ATTACK_PY'\n{script}\nSWE_ATTACK_PY"


def wait_for_name(pid: int, names: set[str], within: float = 30.0) -> str:
    """Wait until process ``pid`` renamed itself to one of ``names`` (or ended); its last name."""
    wait_until(lambda: proc_comm(pid) in names or proc_state(pid) in ("", "Z", "X"), within)
    return proc_comm(pid) or "(gone)"


# -- 1. kernel interfaces -----------------------------------------------------------------------

PRINTK_BURST = "/proc/sys/kernel/printk_ratelimit_burst"
KERNEL_FILES = [PRINTK_BURST, "/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger",
                "/sys/kernel/profiling", "/sys/power/state", "/sys/kernel/mm/transparent_hugepage/enabled",
                "/sys/kernel/uevent_helper"]

#: Opens each file for writing; writes only where the test gave a value (``path=value``).
KERNEL_PROBE = r"""
import os, stat, sys
for item in sys.argv[1:]:
    path, _, value = item.partition("=")
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        print("REFUSED", path, exc.errno)
        continue
    try:
        if stat.S_ISCHR(os.fstat(fd).st_mode):
            print("MASKED", path)
        elif value:
            try:
                os.write(fd, value.encode() + b"\n")
                print("WROTE", path)
            except OSError as exc:
                print("WRITE-FAILED", path, exc.errno)
        else:
            print("OPENED", path)
    finally:
        os.close(fd)
print("PROBE_DONE")
"""


@requires(NOT_HOST_ROOT)
def test_kernel_interfaces_are_not_writable(env):
    """``echo 11 > /proc/sys/kernel/printk_ratelimit_burst`` and friends: refused, or the host's value
    stays as it was. On a variant that runs on this host only an open for writing is tried (no write)."""
    before = _read(PRINTK_BURST)
    plan = list(KERNEL_FILES)
    if before is not None and not on_the_host(env):
        plan[0] = f"{PRINTK_BURST}={int(before) + 1}"
    try:
        result = run(env, python_command(KERNEL_PROBE, *plan), timeout=30)
    finally:
        after = _read(PRINTK_BURST)
        if before is not None and after != before:
            with open(PRINTK_BURST, "wb") as f:  # the attack reached the host: put the value back
                f.write(before)
    assert "PROBE_DONE" in result["output"], result
    opened = [line for line in result["output"].splitlines() if line.startswith("OPENED")]
    assert after == before, (f"the sandbox changed the HOST's {PRINTK_BURST} from {before!r} to {after!r} "
                             f"(restored); probe: {result['output']}")
    assert not opened, f"kernel interfaces open for writing inside the sandbox: {opened}; probe: {result['output']}"


# -- 2. the runner's channel --------------------------------------------------------------------

#: Waits for the host's go (SIGUSR1), then lists every pipe any process's fd shows, as seen from here.
CHANNEL_SCAN = WAITER + r"""
import os
me = os.getpid()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
        comm = open("/proc/%s/comm" % pid).read().strip()
    except OSError:
        continue
    for fd in fds:
        try:
            link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith(("pipe:", "socket:")):
            print("FD", pid, comm, fd, link)
print("SCAN_DONE")
"""


@requires(UNREACHABLE_RUNNER_CHANNEL)
def test_runner_channel_is_reachable_from_no_other_process(env):
    """From inside, scan every /proc/*/fd: no process shows a pipe of the channel (the runner's
    stdin/stdout, or the exec wrapper's streams), nor the direct channel's socket, identified on the
    host while the scan runs."""
    marker = unique_marker()
    scan = Background(env, python_command(CHANNEL_SCAN, marker), timeout=60)
    try:
        scanner = find_host_pid(marker)
        wait_for_name(scanner, {"swe-attack-wait"})
        owner = owner_of(scanner)
        assert owner is not None and owner.pipes, f"no runner or exec wrapper above the scanner: {owner}"
    finally:
        for line in host_processes_with(marker):
            os.kill(int(line.split()[0]), signal.SIGUSR1)
    result = scan.join()
    assert isinstance(result, dict) and "SCAN_DONE" in result["output"], result
    reachable = [line for line in result["output"].splitlines()
                 if line.startswith("FD ") and line.split()[-1] in owner.pipes]
    assert not reachable, (f"the channel of {owner} is reachable from inside the sandbox "
                           f"(pid comm fd pipe, as seen inside): {reachable}")


# -- 3. forging results from inside ---------------------------------------------------------------

#: The forger, started as a background job by a command. It waits for the host's go (SIGUSR1, only
#: to make the race deterministic), then:
#: - runner mode: finds every /proc/*/fd holding the channel's pipes (their names are given), stops
#:   the runner, reads the host's next request from the stdin pipe (or guesses its id), answers it
#:   with a forged result on the stdout pipe;
#: - exec mode: waits for the next exec wrapper of this run, stops it, writes forged output to its
#:   stdout and (unless it only injects a submission) a forged status line to its stderr, then kills
#:   the wrapper and what it started; to inject a submission it may instead write into the FIFO the
#:   next command's output goes through (only in a container: on this host other runs have theirs).
#: It renames itself to say how far it got (the host reads /proc/<pid>/comm).
FORGER = r"""
import ctypes, glob, json, os, signal, struct, sys, time
marker, mode, runner, pipes, guess_id, case, forged, fifo_ok = sys.argv[1:9]

def name(text):
    ctypes.CDLL(None).prctl(15, text.encode(), 0, 0, 0)

def holders(wanted):
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            path = "/proc/%s/fd/%s" % (pid, fd)
            try:
                link = os.readlink(path)
            except OSError:
                continue
            if link in wanted:
                found.setdefault(link, []).append(path)
    return found

def open_any(paths, flags):
    for path in paths:
        try:
            return os.open(path, flags)
        except OSError:
            pass
    return None

def read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

def reply(rid):
    return {"op": "result", "id": rid, "output": forged, "returncode": 0, "exception_info": "",
            "extra": {"timed_out": False, "truncated": False, "output_bytes": len(forged.encode()),
                      "dropped_bytes": 0, "duration_s": 0.01}}

def fresh_wrappers(run_id, seen):
    # exec wrappers of this run among the processes that appeared in the last half second (their
    # argv is read again until then: a new process shows its parent's argv until it execs)
    now, found = time.monotonic(), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or now - seen.setdefault(pid, now) > 0.5:
            continue
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[3] == b"swe-sandbox-exec" and run_id in b"\0".join(argv):
            found.append(int(pid))
    return found

def parent(pid):
    try:
        stat = open("/proc/%d/stat" % pid, "rb").read()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2:].split()[1])

def tree(root):
    kids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open("/proc/%s/stat" % pid, "rb").read()
        except OSError:
            continue
        kids.setdefault(int(stat[stat.rfind(b")") + 2:].split()[1]), []).append(int(pid))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out

os.unlink(sys.argv[0])  # read already; on local and ssh it was in this host's /tmp
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
name("forger-waiting")
if signal.sigtimedwait([signal.SIGUSR1], 60) is None:
    name("forger-nogo")
    sys.exit()
if mode == "runner":
    stdin_pipe, stdout_pipe = pipes.split(",")
    found = holders({stdin_pipe, stdout_pipe})
    out = open_any(found.get(stdout_pipe, []), os.O_WRONLY)
    if out is None:
        name("forger-noholder")
        sys.exit()
    try:
        os.kill(int(runner), signal.SIGSTOP)
    except OSError:
        name("forger-nostop")
        sys.exit()
    inp = open_any(found.get(stdin_pipe, []), os.O_RDONLY)
    name("forger-armed")
    if inp is not None:
        size = struct.unpack(">I", read_exact(inp, 4))[0]
        rid = json.loads(read_exact(inp, size).decode())["id"]
    else:
        rid = int(guess_id)
    data = json.dumps(reply(rid)).encode()
    os.write(out, struct.pack(">I", len(data)) + data)
    name("forger-done")
else:
    run_id = os.environ.get("SWE_SANDBOX_RUN", "").encode()
    if not run_id:  # never touch wrappers of other runs
        name("forger-norunid")
        sys.exit()
    seen = dict.fromkeys((p for p in os.listdir("/proc") if p.isdigit()), float("-inf"))
    fifos = set(glob.glob("/tmp/swe-sandbox-exec.*/out")) if fifo_ok == "1" else None
    name("forger-armed")
    deadline = time.monotonic() + 60
    victim = out = err = None
    while time.monotonic() < deadline and out is None:
        if victim is None:
            found = fresh_wrappers(run_id, seen)
            found = [p for p in found if parent(p) not in found]  # not a subshell of one
            victim = min(found) if found else None
            if victim is not None:
                os.kill(victim, signal.SIGSTOP)  # before its command can print anything
                give_up = time.monotonic() + 0.5
                while out is None or err is None:  # a fresh exec may not be open to us for a moment
                    try:
                        out = out if out is not None else os.open("/proc/%d/fd/1" % victim, os.O_WRONLY)
                        err = err if err is not None else os.open("/proc/%d/fd/2" % victim, os.O_WRONLY)
                    except OSError:
                        if time.monotonic() > give_up:
                            out = err = None
                            os.kill(victim, signal.SIGCONT)
                            break
                        time.sleep(0.001)
        if out is None and fifos is not None and case == "sentinel":  # the FIFO its command writes to
            for fifo in set(glob.glob("/tmp/swe-sandbox-exec.*/out")) - fifos:
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # only once its reader is there
                except OSError:
                    continue
                os.write(fd, forged.encode())
                os.close(fd)
                name("forger-done")
                sys.exit()
        if out is None and victim is not None and (fifos is None or case != "sentinel"):
            break  # no way left in
        time.sleep(0.0005)
    if out is None:
        name("forger-nowrapper" if victim is None else "forger-noaccess")
        sys.exit()
    os.write(out, forged.encode())
    os.close(out)
    if case == "sentinel":  # only put the sentinel first: the command runs on and exits 0 itself
        os.close(err)
        os.kill(victim, signal.SIGCONT)
    else:
        os.write(err, b"swe-sandbox-status rc=0 timed_out=0\n")
        os.close(err)
        for pid in tree(victim):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    name("forger-done")
"""

#: case -> (the victim command, its execute kwargs, what the forged reply says)
#: (A short timeout everywhere: a host that drops the forged frame waits for the stopped runner.)
FORGERY_CASES = {
    "exit7": ("exit 7", {"timeout": 2}, "FORGED-{marker}\n"),
    "timeout": ("sleep 30", {"timeout": 2}, "FORGED-{marker}\n"),
    "sentinel": ("echo honest-output", {"timeout": 2}, SENTINEL + "\nFORGED-{marker}\n"),
}


#: The forged submission lands in a later command's output: only that case needs it kept private.
FORGERY_NEEDS = {"sentinel": requires(PRIVATE_COMMAND_OUTPUT)}


@pytest.mark.parametrize("case", [pytest.param(case, marks=FORGERY_NEEDS.get(case, ())) for case in FORGERY_CASES])
def test_a_command_cannot_forge_a_later_result(make_env, case):
    """A background job stops the runner (or whatever holds the channel) and answers the host's
    next frame itself through /proc/<pid>/fd of any process holding the pipes; the next command
    (``exit 7``, a 2 s timeout, a non-submitting ``echo``) still gets its own result, or an error."""
    env = make_env()
    procs = Processes()
    try:
        env.start()
        owner = runner_now(env, procs) if mode_of(env) == "runner" else None
        if owner is not None:
            procs.watch(owner.pid)  # the forger stops it (on ssh nothing else would end it)
        marker = unique_marker()
        victim, kwargs, forged = FORGERY_CASES[case]
        forged = forged.format(marker=marker)
        pipes = ",".join(str(end) for end in owner.channel) if owner else "-"
        args = [marker, "runner" if owner else "exec", str(owner.sandbox_pid) if owner else "0", pipes,
                str(getattr(env, "_seq", 2) + 2), case, forged, "0" if on_the_host(env) else "1"]
        script = f"/tmp/swe-attack-forger-{marker}.py"
        run(env, f"cat > {script} <<'SWE_ATTACK_PY'\n{FORGER}\nSWE_ATTACK_PY\n"
                 f"setsid python3 {script} {shlex.join(args)} </dev/null >/dev/null 2>&1 &")
        forger = procs.started_by_us(find_host_pid(marker))
        assert wait_for_name(forger, {"forger-waiting"}) == "forger-waiting"
        os.kill(forger, signal.SIGUSR1)
        reached = wait_for_name(forger, {"forger-armed", "forger-noholder", "forger-nostop", "forger-norunid",
                                         "forger-done"})
        outcome, elapsed = execute_outcome(env, victim, **kwargs)
        reached = proc_comm(forger) or reached
    finally:
        procs.end(env)
    what = f"forger reached {reached!r}; channel {owner}; {victim!r} gave {outcome!r} after {elapsed:.2f} s"
    if isinstance(outcome, (SandboxDied, ProtocolError)):
        return  # the host saw that something was wrong: no result, no submission
    if isinstance(outcome, swe_sandbox.Submitted):
        pytest.fail(f"a forged submission was accepted ({outcome.submission!r}): {what}")
    assert forged.strip().splitlines()[-1] not in outcome["output"], f"the forged output was returned: {what}"
    if case == "exit7":
        assert outcome["returncode"] == 7, f"exit 7 returned {outcome['returncode']}: {what}"
    elif case == "timeout":
        assert outcome["extra"].get("timed_out") and elapsed >= kwargs["timeout"] - 0.05, \
            f"the 2 s timeout did not take its time: {what}"
    else:
        assert outcome["output"] == "honest-output\n", what


# -- 4. a forged reply on the real pipe, from the host side -------------------------------------


def _runner_frame(env: Any, rid: int, kind: str) -> bytes:
    """A result frame as the runner would send it; the wrong-types one signed with the host's own key
    where the host has one (white-box: then only the host's checks of the types stand in its way)."""
    if kind == "unauthenticated":
        reply = {"op": "result", "id": rid, "output": "forged-by-host\n", "returncode": 0, "exception_info": "",
                 "extra": {"timed_out": False, "truncated": False, "output_bytes": 15, "dropped_bytes": 0,
                           "duration_s": 0.01}}
    else:
        reply = {"op": "result", "id": rid, "output": 5, "returncode": "0", "exception_info": None, "extra": []}
    data = json.dumps(reply).encode()
    frame = struct.pack(">I", len(data)) + data
    host_auth = getattr(getattr(env, "_channel", None), "_auth", None)
    if kind == "wrong-types" and host_auth is not None:
        auth = FrameAuth(host_auth.key, host_auth.labels[1], host_auth.labels[0])
        auth.counts[0] = host_auth.counts[1]  # the next frame the host expects from the runner
        frame += auth.sign(frame)
    return frame


@pytest.mark.parametrize("kind", ["unauthenticated", "wrong-types"])
def test_a_forged_reply_on_the_real_pipe_is_rejected(make_env, kind):
    """Root on the host writes a well-formed but unauthenticated reply (or one with wrong types,
    ``"output": 5``, signed with the host's key) on the runner's real stdout pipe (exec fallback: a
    status line and output on the running exec's streams): execute raises ProtocolError or SandboxDied."""
    env = make_env()
    procs = Processes()
    try:
        env.start()
        if mode_of(env) == "runner":
            owner = runner_now(env, procs)
            assert owner is not None, "no runner found"
            fd = steal_fd(owner.pid, owner.socket_fd) if owner.direct else \
                os.open(f"/proc/{owner.pid}/fd/1", os.O_WRONLY)
            try:
                os.write(fd, _runner_frame(env, getattr(env, "_seq", 1) + 1, kind))
            finally:
                os.close(fd)
            outcome, _ = execute_outcome(env, "echo real; exit 3")
        else:
            marker = unique_marker()
            job = Background(env, python_command(WAITER, marker) + "\necho real; exit 3")
            waiter = find_host_pid(marker)
            wait_for_name(waiter, {"swe-attack-wait"})
            owner = owner_of(waiter)
            assert owner is not None and owner.kind == "exec", owner
            status = b"swe-sandbox-status rc=0 timed_out=0\n" if kind == "unauthenticated" else \
                b"swe-sandbox-status rc=zero timed_out=maybe\n"
            for fd_no, data in ((1, b"forged-by-host\n"), (2, status)):
                fd = os.open(f"/proc/{owner.pid}/fd/{fd_no}", os.O_WRONLY)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            os.kill(waiter, signal.SIGUSR1)
            outcome = job.join()
    finally:
        procs.end(env)
    assert isinstance(outcome, (ProtocolError, SandboxDied)), \
        f"a forged reply ({kind}) on the real channel of {owner} was not rejected: {outcome!r}"


# -- 5. a stopped runner --------------------------------------------------------------------------


def test_a_stopped_runner_is_a_dead_sandbox(make_env):
    """The host SIGSTOPs the runner (exec fallback: the command's wrapper) during a command with a
    2 s timeout: execute raises SandboxDied within timeout + HOST_GRACE_S (+ the close), no result."""
    env = make_env()
    procs = Processes()
    timeout = 2.0
    try:
        env.start()
        marker = unique_marker()
        job = Background(env, python_command(WAITER, marker), timeout=timeout)
        waiter = procs.started_by_us(find_host_pid(marker))
        owner = owner_of(waiter)
        assert owner is not None, "no runner or exec wrapper above the command"
        procs.stop(owner.pid)
        outcome = job.join(timeout + HOST_GRACE_S + 60)
        elapsed = job.elapsed
    finally:
        procs.end(env)
    assert isinstance(outcome, SandboxDied), f"a stopped {owner} gave {outcome!r} after {elapsed:.1f} s"
    assert elapsed <= timeout + HOST_GRACE_S + 3.0, f"SandboxDied came after {elapsed:.1f} s"


# -- 6. setuid / setgid files --------------------------------------------------------------------

#: Setuid and setgid entries made every way a command would (empty files: harmless anywhere).
SETID_TREE = r"""
mkdir -p setid/sub setid/sgid-dir
: > setid/u && chmod 755 setid/u && chmod u+s setid/u || echo REFUSED u
: > setid/g && chmod 755 setid/g && chmod g+s setid/g || echo REFUSED g
: > setid/sub/ug && chmod 6755 setid/sub/ug || echo REFUSED sub/ug
install -m 4755 /dev/null setid/installed || echo REFUSED installed
python3 -c 'import os; os.close(os.open("setid/opened", os.O_CREAT | os.O_WRONLY, 0o6755))' || echo REFUSED opened
chmod g+s setid/sgid-dir || echo REFUSED sgid-dir
stat -c '%a %n' setid/* setid/sub/*
"""


def setid_entries(root: Path) -> list[str]:
    """Entries under ``root`` (on the host, not following links) with a setuid or setgid bit."""
    found = []
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISLNK(mode):
                found.append(f"{oct(stat.S_IMODE(mode))} {path}")
    return found


def strip_setid(root: Path) -> None:
    for entry in setid_entries(root):
        path = entry.split(" ", 1)[1]
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & 0o777)


@requires(SETID_FREE_WORKSPACE)
def test_no_setid_file_reaches_a_host_workspace(workspace_env, tmp_path):
    """Commands make setuid/setgid files in a host workspace (bind-mounted by bwrap, the cwd of
    local): on the host none has those bits, checked while the sandbox still runs and after."""
    try:
        run(workspace_env, SETID_TREE)  # any step may be refused: what reaches the host counts
        running = setid_entries(tmp_path)
        workspace_env.close()
        closed = setid_entries(tmp_path)
    finally:
        strip_setid(tmp_path)
    assert not running, f"setuid/setgid files on the host while the sandbox runs: {running}"
    assert not closed, f"setuid/setgid files on the host after close: {closed}"


def _fresh_env(make_env: Callable[..., Any], environment_class: type, tmp_path: Path, **overrides: Any) -> Any:
    """A fresh environment; one without a ``workspace`` field (``local``) runs in ``tmp_path/ws``
    (never in the repository)."""
    if not hosts_its_workspace(environment_class):
        workspace = tmp_path / "ws"
        workspace.mkdir()
        return make_env(cwd=str(workspace), **overrides)
    return make_env(**overrides)


def test_no_setid_file_reaches_a_download(make_env, backend_under_test, tmp_path):
    """``download()`` of a tree (and of single files) with setuid/setgid entries: none keeps its
    bits on the host, checked at once, while the sandbox still runs."""
    env = _fresh_env(make_env, backend_under_test.environment_class, tmp_path)
    host = tmp_path / "host"
    try:
        result = run(env, SETID_TREE)  # any step may be refused: what reaches the host counts
        env.download("setid", host / "tree")
        for name in ("u", "g", "installed", "opened", "sub/ug"):
            if (host / "tree" / name).exists():
                env.download(f"setid/{name}", host / "single" / name.replace("/", "-"))
        found = setid_entries(host)
    finally:
        if host.exists():
            strip_setid(host)
    assert not found, f"setuid/setgid bits reached the host through download(): {found}; inside: {result['output']}"


# -- 7. a sparse download ------------------------------------------------------------------------

DOWNLOAD_LIMIT = 1 << 20
#: The test's own guard: no file the test process writes may grow past this (RLIMIT_FSIZE); a
#: download that hits it was not bounded by swe-sandbox.
FILE_SIZE_GUARD = 8 << 20


def _hit_guard(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG or "File too large" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _allocated(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            total += max(st.st_size if stat.S_ISREG(st.st_mode) else 0, st.st_blocks * 512)
    return total


def test_a_sparse_download_is_bounded(make_env, backend_under_test, tmp_path):
    """``truncate -s 64G big`` (or the largest the sandbox allows) then ``download("big")``: an
    error, and little written on the host
    (``max_download_bytes`` when the backend has it). The test caps every file it writes at 8 MiB
    (RLIMIT_FSIZE, temporary files in tmp_path): hitting that cap means the download was unbounded."""
    environment_class = backend_under_test.environment_class
    fields = environment_class.config_class.model_fields
    overrides = {"max_download_bytes": DOWNLOAD_LIMIT} if "max_download_bytes" in fields else {}
    env = _fresh_env(make_env, environment_class, tmp_path, **overrides)
    # as big as the sandbox lets a file be (bwrap caps file sizes): still far past the limit
    result = run(env, "for size in 64G 8G 1G; do truncate -s $size big 2>/dev/null && break; done; ls -ls big")
    assert result["returncode"] == 0, result
    spool, dst = tmp_path / "spool", tmp_path / "dst"
    spool.mkdir()
    dst.mkdir()
    try:
        error, hit_guard, written = _bounded_download(env, spool, dst)
    finally:
        if not hosts_its_workspace(environment_class):  # there the sparse file is on this host
            (tmp_path / "ws" / "big").unlink(missing_ok=True)
    assert not hit_guard, (f"the download wrote past the test's {FILE_SIZE_GUARD >> 20} MiB file-size cap "
                           f"(unbounded; max_download_bytes {'set' if overrides else 'not available'}): {error}")
    assert error is not None, f"downloading a 64 GiB sparse file succeeded ({written} bytes on the host)"
    assert written <= 2 * DOWNLOAD_LIMIT, f"{written} bytes left on the host after a refused download ({error})"


def _bounded_download(env: Any, spool: Path, dst: Path) -> tuple[str | None, bool, int]:
    """``download("big")`` with every file this process writes capped at ``FILE_SIZE_GUARD``:
    ``(repr of the error or None, whether it was the cap, bytes left on the host)``. The exception
    itself is not kept: its frames would hold the engine's archive stream open."""
    import gc
    import resource

    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_tempdir = tempfile.tempdir
    error, hit_guard = None, False
    try:
        tempfile.tempdir = str(spool)
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_GUARD, old_limit[1]))
        try:
            env.download("big", dst / "big")
        except Exception as exc:  # noqa: BLE001 - which error is the backend's choice
            error, hit_guard = repr(exc), _hit_guard(exc)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
        tempfile.tempdir = old_tempdir
    gc.collect()
    return error, hit_guard, _allocated(dst) + _allocated(spool)


# -- 8. the container's lifetime guard and launcher ----------------------------------------------

#: Replace `sleep` (what the lifetime guard runs) with a script that first starts `REAL MARKER`,
#: kill the guard's current sleep so it runs ours, wait for the payload, then hang until the timeout.
GUARD_ATTACK = r"""
real=$(command -v sleep)
keep=/tmp/swe-attack-real-sleep
cp "$real" "$keep"
if rm -f "$real" 2>/dev/null && printf '#!/bin/sh\n%s %s </dev/null >/dev/null 2>&1 &\nexec %s "$@"\n' \
     "$keep" "$M" "$keep" >"$real" && chmod 755 "$real"; then
  echo REPLACED
  python3 - <<'SWE_ATTACK_PY'
import os, signal, time
marker = os.environ["M"].encode()
for pid in os.listdir("/proc"):
    try:
        argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
    except (OSError, ValueError):
        continue
    if os.path.basename(argv[0]) == b"sleep" and len(argv) > 1 and argv[1].isdigit():
        os.kill(int(pid), signal.SIGKILL)  # the guard's nap: it runs `sleep` again, i.e. ours
        print("KILLED-GUARD-SLEEP", pid)
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    if any(marker in open("/proc/%s/cmdline" % p, "rb").read() for p in os.listdir("/proc")
           if p.isdigit() and os.path.exists("/proc/%s/cmdline" % p)):
        print("PAYLOAD-RUNNING")
        break
    time.sleep(0.02)
SWE_ATTACK_PY
fi
exec "$keep" 30
"""

#: On this host itself: only whether `sleep` could be replaced (it is not).
GUARD_PROBE = r"""
real=$(command -v sleep)
if [ -w "$real" ] || [ -w "$(dirname "$real")" ]; then echo HOST-SLEEP-WRITABLE; fi
exec sleep 30
"""


@requires(TAMPERPROOF_TIMEOUT)
def test_nothing_outlives_a_timeout_through_the_guard(make_env):
    """A command replaces `sleep` with a payload starter and kills the lifetime guard's nap, so the
    guard (outside the runner's tree) starts `sleep MARKER`; the command then times out. After the
    timeout no process with the marker is alive (seen from the host). On a variant that runs on
    this host, the host's own `sleep` must not be replaceable (only tested, never replaced)."""
    env = make_env()
    marker = unique_marker()
    try:
        if on_the_host(env):
            result = run(env, GUARD_PROBE, timeout=2)
            assert "HOST-SLEEP-WRITABLE" not in result["output"], \
                f"commands can replace the host's own `sleep` (not attempted): {result}"
        else:
            result = run(env, f"export M={marker}\n{GUARD_ATTACK}", timeout=6)
        left = wait_host_gone(marker, grace=2.0)
    finally:
        env.close()
        for line in wait_host_gone(marker, grace=5.0):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert result["extra"]["timed_out"], result
    assert not left, f"a payload outlived the timeout: {left}; the command said: {result['output']!r}"


# -- 9. the sandbox's uid --------------------------------------------------------------------------


@requires(NOT_HOST_ROOT)
def test_sandbox_uid_is_not_host_root(env):
    """A command's process (and its parents inside the sandbox's pid namespace) seen from the host:
    none runs as the host's uid 0."""
    marker = unique_marker()
    run(env, f"sleep {marker} </dev/null >/dev/null 2>&1 &")
    sleeper = find_host_pid(marker)
    start = proc_start(sleeper)
    try:
        rows = [(pid, proc_comm(pid), proc_status(pid).get("Uid", "")) for pid in sandbox_chain(sleeper)]
    finally:
        if alive(sleeper, start):
            os.kill(sleeper, signal.SIGKILL)
    host_root = [row for row in rows if "0" in row[2].split()]
    assert not host_root, f"sandbox processes running as the host's root (pid, comm, Uid): {host_root}"


# -- 10. the direct channel ------------------------------------------------------------------------

#: ``env.info["channel"]`` of a channel that no engine or daemon relays (``Session.kind``).
DIRECT_KINDS = ("pipe", "socket")

#: From inside: every way at the direct channel's socket (``direct.SANDBOX_CHANNEL_DIR``): connect
#: to it (and to anything else in its directory), replace it (a file, a socket of our own, a
#: rename), then 300 connects in a row; prints what worked, then PROBE_DONE.
CHANNEL_PROBE = r"""
import os, socket, sys
folder = sys.argv[1]
path = os.path.join(folder, "runner.sock")
try:
    names = os.listdir(folder)
except OSError as exc:
    names = []
print("LISTED", sorted(names))
def connect(target):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(target)
        s.sendall(b"\0\0\0\x02{}" * 64)
        return True
    except OSError:
        return False
    finally:
        s.close()
for target in [path] + [os.path.join(folder, n) for n in names]:
    if connect(target):
        print("REACHED", target)
for what, act in (("file", lambda: open(path + ".new", "w").close()),
                  ("rename", lambda: os.rename(folder, folder + ".old")),
                  ("bound", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind(path))):
    try:
        act()
        print("REPLACED", what)
    except OSError:
        pass
print("FLOOD", sum(connect(path) for _ in range(300)))
print("PROBE_DONE")
"""


def own_socket_peers() -> set[int]:
    """Host pids at the other end of this process's unix sockets (``SO_PEERCRED``)."""
    import socket as socket_module

    peers = set()
    for fd, link in fd_links(os.getpid()).items():
        if not link.startswith("socket:"):
            continue
        try:
            sock = socket_module.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if sock.family == socket_module.AF_UNIX:
                creds = sock.getsockopt(socket_module.SOL_SOCKET, socket_module.SO_PEERCRED, struct.calcsize("3i"))
                peers.add(struct.unpack("3i", creds)[0])
        except OSError:
            pass
        finally:
            sock.close()
    return peers


@requires(DIRECT_RUNNER_CHANNEL)
def test_no_engine_relays_the_runner_channel(make_env):
    """The runner's frames travel on ends this process holds itself: its direct channel's socket
    has the runner as its peer, or the runner's stdout is a pipe whose other end is ours; no engine
    attach, conmon or sshd in between."""
    env = make_env()
    procs = Processes()
    try:
        env.start()
        kind = env.info.get("channel")
        assert kind in DIRECT_KINDS, f"the channel is {kind!r}: frames are relayed"
        owner = runner_now(env, procs)
        assert owner is not None, "no runner found"
        if owner.direct:
            assert owner.pid in own_socket_peers(), f"no socket of this process has the runner {owner} as its peer"
        else:
            ours = set(fd_links(os.getpid()).values())
            assert owner.links[1] in ours, f"the runner's stdout ({owner.links[1]}) is not a pipe of this process"
    finally:
        procs.end(env)


@requires(DIRECT_RUNNER_CHANNEL)
def test_the_direct_channel_is_gone_once_the_runner_connected(env):
    """A command cannot connect to, replace or flood the direct channel's socket: it was unlinked
    (and its host directory removed) as the runner connected, and the directory bound in is
    read-only; after the attempts the sandbox answers as before, and no channel directory of this
    process still holds a socket."""
    from swe_sandbox.environments.direct import CHANNEL_DIR_PREFIX, SANDBOX_CHANNEL_DIR

    env.start()
    assert env.info.get("channel") in DIRECT_KINDS, f"the channel is {env.info.get('channel')!r}"
    result = run(env, python_command(CHANNEL_PROBE, SANDBOX_CHANNEL_DIR), timeout=120)
    assert "PROBE_DONE" in result["output"], result
    found = [line for line in result["output"].splitlines() if line.startswith(("REACHED", "REPLACED"))]
    assert not found, f"the direct channel was reached or replaced from inside: {found}\n{result['output']}"
    assert "FLOOD 0" in result["output"], result["output"]
    assert run(env, "echo still; exit 7")["returncode"] == 7
    assert run(env, "echo still")["output"] == "still\n"
    left = [str(path) for path in Path(tempfile.gettempdir()).glob(f"{CHANNEL_DIR_PREFIX}{os.getpid()}-*/*")]
    assert not left, f"channel sockets still on the host: {left}"
