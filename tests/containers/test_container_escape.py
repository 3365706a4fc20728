"""Escape tests for the docker and podman backends (DESIGN.md §5), in runner and fallback modes.

What a command inside must not reach or do: the network, the host's processes, the host's
environment, the host's root (a user namespace: seen from the host, no process of the container
is uid or gid 0), capabilities beyond the documented minimum, privilege gains, unbounded processes
(fork bomb) or memory (a clear out-of-memory result), the host's files and the engine's socket.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import swe_sandbox
from swe_sandbox.environments.container.environment import DEFAULT_CAP_ADD
from swe_sandbox.testing.kit import host_processes_with, unique_marker

from helpers.variants import require_backend

ENGINES = ("docker", "podman")
MODES = {"runner": {}, "exec": {"runner": "exec"}}
#: linux/capability.h numbers of the capabilities the backends keep by default.
CAP_NUMBERS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7}
DEFAULT_CAP_MASK = sum(1 << CAP_NUMBERS[c] for c in DEFAULT_CAP_ADD)

CASES = [pytest.param((engine, mode), marks=getattr(pytest.mark, engine), id=f"{engine}-{mode}")
         for engine in ENGINES for mode in MODES]


@pytest.fixture(scope="module", params=CASES)
def sandbox(request):
    """One environment per engine and mode, shared by the read-only checks of this module."""
    engine, mode = request.param
    require_backend(engine)
    env = swe_sandbox.get_environment(engine, timeout=30, **MODES[mode])
    try:
        yield env
    finally:
        env.close()


@pytest.fixture(params=CASES)
def fresh(request):
    """Factory of fresh environments (config changes) of one engine and mode; closed after."""
    engine, mode = request.param
    require_backend(engine)
    made = []

    def factory(**overrides):
        env = swe_sandbox.get_environment(engine, **{"timeout": 30, **MODES[mode], **overrides})
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()


def run(env, command, **kwargs):
    return env.execute({"command": command}, **kwargs)


# -- network ------------------------------------------------------------------------------------------


def test_no_network_interfaces_but_loopback(sandbox):
    result = run(sandbox, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; cat /proc/net/route | wc -l")
    assert result["output"] == "lo\n1\n", result  # route: only the header line


@pytest.mark.parametrize("target", ["1.1.1.1/53", "8.8.8.8/443", "172.17.0.1/2375", "10.0.2.2/22"])
def test_no_connection_leaves_the_sandbox(sandbox, target):
    started = time.monotonic()
    result = run(sandbox, f"timeout 5 bash -c 'echo > /dev/tcp/{target}' 2>&1; echo rc=$?", timeout=10)
    assert "rc=0" not in result["output"], result
    assert "unreachable" in result["output"].lower() or "rc=124" in result["output"], result
    assert time.monotonic() - started < 6


def test_no_name_resolution(sandbox):
    result = run(sandbox, "getent hosts deb.debian.org pypi.org; echo rc=$?", timeout=20)
    assert result["output"].strip().endswith("rc=2"), result


# -- processes, environment, files ----------------------------------------------------------------------


def test_host_processes_are_invisible(sandbox):
    marker = unique_marker()
    host = subprocess.Popen(["sleep", marker])
    try:
        pattern = f"[{marker[0]}]{marker[1:]}"  # the grep's own command line does not match it
        result = run(sandbox, f"grep -l '{pattern}' /proc/[0-9]*/cmdline 2>/dev/null | wc -l; "
                              "ls -d /proc/[0-9]* 2>/dev/null | wc -l; cat /proc/1/comm")  # a pid may vanish mid-listing
        count, total, init = result["output"].split("\n", 2)
        assert count == "0", "a host process is visible inside"
        assert int(total) < 30, f"{total} processes visible: the host's pid namespace?"
        # PID 1: the runner itself (nothing else may hold its pipes), or the fallback's init
        expected = ("swe-sandbox-run",) if sandbox.mode == "runner" else ("docker-init", "podman-init", "catatonit")
        assert init.strip() in expected, init
    finally:
        host.kill()
        host.wait()


def test_host_environment_never_enters(fresh, monkeypatch):
    secret = f"sk-escape-{unique_marker()}"
    monkeypatch.setenv("SWE_ESCAPE_SECRET", secret)
    monkeypatch.setenv("DOCKER_SECRET_TEST", secret)  # reaches the CLI process on the host, not the container
    env = fresh()
    result = run(env, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u; env")
    assert result["returncode"] == 0 and "PATH=" in result["output"]
    assert secret not in result["output"]


def test_host_files_and_engine_sockets_are_absent(sandbox):
    here = os.path.dirname(os.path.abspath(__file__))
    result = run(sandbox, f"for p in '{here}' /var/run/docker.sock /run/docker.sock /run/podman/podman.sock "
                          "/var/lib/docker /var/lib/containers /root/.ssh; do test -e \"$p\" && echo \"LEAK $p\"; done; "
                          "echo checked")
    assert result["output"] == "checked\n", result


# -- privileges ----------------------------------------------------------------------------------------


def _pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def _host_ids(pid: int) -> dict[str, list[int]]:
    """Real, effective, saved and filesystem uids and gids of a host process, from the host's /proc."""
    with open(f"/proc/{pid}/status") as f:
        return {k: [int(v) for v in rest.split()] for k, _, rest in (line.partition(":") for line in f)
                if k in ("Uid", "Gid")}


def test_container_processes_are_not_host_root(sandbox):
    """DESIGN.md §5: the sandbox's root is never the host's root, seen from the host. Every process
    of the container (the runner or the fallback's init and wrapper, and a root command) has only
    unprivileged host uids and gids, though it is root inside."""
    marker = unique_marker()
    result = run(sandbox, f"sleep {marker} >/dev/null 2>&1 </dev/null & id -u; id -g")
    assert result["output"] == "0\n0\n", result  # root inside
    try:
        ours, deadline = _pid_namespace(os.getpid()), time.monotonic() + 20
        while not (found := [pid for pid in (int(p.split()[0]) for p in host_processes_with(marker))
                             if _pid_namespace(pid) != ours]):
            assert time.monotonic() < deadline, f"no sandbox process with {marker} appeared on the host"
            time.sleep(0.05)
        namespace = _pid_namespace(found[0])
        members = []
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and _pid_namespace(int(entry)) == namespace:
                    members.append((int(entry), _host_ids(int(entry))))
            except OSError:
                continue  # ended meanwhile
        assert len(members) >= 2, members  # at least PID 1 of the container and the sleep
        as_root = [(pid, ids) for pid, ids in members if 0 in ids["Uid"] or 0 in ids["Gid"]]
        assert not as_root, f"container processes run as the host's root: {as_root}"
        with open(f"/proc/{found[0]}/uid_map") as f:
            inside, outside, _count = f.readline().split()
        assert inside == "0" and outside != "0", "uid 0 inside is not mapped to an unprivileged host uid"
    finally:
        run(sandbox, f"pkill -f 'sleep {marker}'; true")


#: create_args that undo the remapping behind the backend's back (an engine that cannot remap).
HOST_USERNS_ARGS = {"docker": {"userns_mode": "host"}, "podman": {"userns_mode": {"nsmode": "host"}, "idmappings": None}}


def test_an_engine_that_does_not_remap_is_refused_not_run_as_host_root(fresh):
    """userns: remap and a container whose user namespace maps the host's root (a Docker daemon
    without userns-remap, a Podman without ranges; here forced through create_args): the sandbox
    does not start, nothing of it remains, and the error says how to enable remapping or opt out."""
    engine = fresh().engine_class.name  # (never started)
    env = fresh(create_args=HOST_USERNS_ARGS[engine])
    with pytest.raises(swe_sandbox.BackendUnavailable) as caught:
        env.start()
    message = str(caught.value)
    assert "root would be the host's root" in message and "userns: host" in message, message
    assert ("--userns-remap=default" if engine == "docker" else "/etc/subuid") in message, message
    assert env.container_id is None
    assert not [c for c in env.engine.list_managed() if c["labels"].get("org.swe-sandbox.run-id") == env.run_id]


def test_userns_host_opts_out_and_says_so(fresh):
    """userns: host, explicitly: root inside is the host's root (as before user namespaces), and
    the environment's isolation (shown by `swe-sandbox check`) says so."""
    env = fresh(userns="host")
    assert run(env, "cat /proc/self/uid_map")["output"].split() == ["0", "0", "4294967295"]
    assert "root inside IS the host's root" in env.isolation and env.info["userns"] == "host"


def _status(env):
    out = run(env, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")["output"]
    return {k: v.strip() for k, v in (line.split(":", 1) for line in out.splitlines())}


def test_capabilities_are_the_documented_minimum(sandbox):
    status = _status(sandbox)
    assert int(status["CapEff"], 16) == DEFAULT_CAP_MASK, status
    assert int(status["CapBnd"], 16) == DEFAULT_CAP_MASK, status
    assert int(status["CapAmb"], 16) == 0 and int(status["CapInh"], 16) == 0
    assert status["NoNewPrivs"] == "1"


@pytest.mark.parametrize("command", [
    "mknod /tmp/swe-null c 1 3",                      # CAP_MKNOD
    "chroot / true",                                  # CAP_SYS_CHROOT
    "mount -t tmpfs none /mnt",                       # CAP_SYS_ADMIN
    "ip link set lo down 2>&1 || echo 1 > /proc/sys/net/ipv4/ip_forward",  # CAP_NET_ADMIN
    "echo 1 > /proc/sys/kernel/sysrq",                # read-only /proc/sys
], ids=["mknod", "chroot", "mount", "net-admin", "proc-sys"])
def test_privileged_operations_fail(sandbox, command):
    result = run(sandbox, command)
    assert result["returncode"] != 0, result


def test_non_root_user_has_no_capabilities(fresh, tmp_path):
    (tmp_path / "f.txt").write_text("x")
    env = fresh(user="65534:65534", workspace=str(tmp_path))
    status = _status(env)
    assert int(status["CapEff"], 16) == 0 and status["NoNewPrivs"] == "1"
    result = run(env, "id -u; stat -c %u f.txt; echo more >> f.txt && echo writable; touch new && echo created")
    assert result["output"] == "65534\n65534\nwritable\ncreated\n", result


def test_non_root_uid_without_passwd_entry_has_the_same_writable_home_on_both_engines(fresh):
    """Docker says HOME=/ for a uid its passwd lacks, Podman the working directory: both get the workspace."""
    env = fresh(user="1000")
    result = run(env, "echo $HOME; touch ~/x && echo home-writable")
    assert result["output"] == "/workspace\nhome-writable\n", result


def test_missing_upload_parents_belong_to_the_non_root_user(fresh, tmp_path):
    """The engine would create them as root's: the user could not write next to the file it got."""
    (tmp_path / "c.txt").write_text("c")
    env = fresh(user="1000")
    env.upload(tmp_path / "c.txt", "a/b/c.txt")
    result = run(env, "stat -c %u a a/b a/b/c.txt; touch a/b/new && echo writable")
    assert result["output"] == "1000\n1000\n1000\nwritable\n", result


def test_read_only_root_keeps_workspace_and_tmp_writable(fresh, tmp_path):
    (tmp_path / "in.txt").write_text("copied")
    env = fresh(read_only=True, workspace=str(tmp_path))
    result = run(env, "touch /usr/swe-x 2>/dev/null || echo ro-usr; touch /swe-x 2>/dev/null || echo ro-root; "
                      "cat in.txt; echo; touch /workspace/new /tmp/new /var/tmp/new && echo writable")
    assert result["output"] == "ro-usr\nro-root\ncopied\nwritable\n", result


# -- resource limits ---------------------------------------------------------------------------------


def test_fork_bomb_is_contained_by_the_pids_limit(fresh):
    env = fresh(pids_limit=128)
    assert run(env, "true")["returncode"] == 0
    started = time.monotonic()
    result = run(env, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout=4)
    assert time.monotonic() - started < 8
    assert result["extra"]["timed_out"] is True, result
    # SIGKILLed bomb processes take a moment to be reaped by PID 1; until then the next command may
    # itself fail to fork (the exec fallback's wrapper prints "Cannot fork" once; CI saw it)
    deadline = time.monotonic() + 20
    while True:
        after = run(env, "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; "
                         "ls -d /proc/[0-9]* | wc -l", timeout=20)
        words = after["output"].split()
        if len(words) == 2 and words[0] == "128" and int(words[1]) < 20:
            break
        assert time.monotonic() < deadline, f"the bomb outlived its timeout: {after}"
        time.sleep(0.5)
    assert subprocess.run(["true"]).returncode == 0, "the host still forks"
    assert run(env, "echo alive", timeout=20)["output"] == "alive\n"


#: Fills the process limit with a filler that retries every failed fork at once (so it takes any pid
#: that frees), then, with builtins only, SIGTERMs every `sleep` in the sandbox (the exec fallback's
#: watchdog nap included), so the watchdog wakes while forks fail.
BOMB_THEN_WAKE = (
    "mkfifo /tmp/nap && exec 7<>/tmp/nap; "
    "sh -c 'while :; do command eval \"{ read x <&7; } &\"; done' 2>/dev/null & read -t 2 -u 7; "
    "for p in /proc/[0-9]*; do read -r c <$p/comm && [ \"$c\" = sleep ] && kill ${p#/proc/}; done 2>/dev/null; "
    "read -t 30 -u 7")


@pytest.mark.parametrize("fresh", [case for case in CASES if case.id.endswith("-exec")], indirect=True)
def test_a_watchdog_woken_while_nothing_can_fork_still_ends_the_command(fresh):
    """The exec fallback's watchdog naps with `sleep`, re-napping when woken early. Under a fork bomb
    its fork can fail, and `sh` exits where a fork fails: the timeout must hold all the same (CI saw
    a bomb outlive its timeout, its watchdog started after the bomb had taken every pid)."""
    env = fresh(pids_limit=128)
    assert run(env, "true")["returncode"] == 0
    started = time.monotonic()
    result = run(env, BOMB_THEN_WAKE, timeout=4)
    assert time.monotonic() - started < 8
    assert result["extra"]["timed_out"] is True, result
    deadline = time.monotonic() + 20
    while int(run(env, "ls -d /proc/[0-9]* | wc -l", timeout=20)["output"] or 0) >= 20:
        assert time.monotonic() < deadline, "the bomb outlived its timeout"
        time.sleep(0.5)
    assert run(env, "echo alive", timeout=20)["output"] == "alive\n"


@pytest.mark.parametrize("engine", [pytest.param(e, marks=getattr(pytest.mark, e)) for e in ENGINES])
def test_fork_bomb_at_the_default_pids_limit_leaves_the_runner_working(engine):
    """At the default limit (1024) the bomb also takes every thread the runner could start: the
    timeout still kills all of it (the runner polls instead of starting a waiter thread), and the
    sandbox goes on. (Runner mode; the exec fallback is shown with a lower limit above.)"""
    require_backend(engine)
    with swe_sandbox.get_environment(engine, timeout=30) as env:
        assert run(env, "true")["returncode"] == 0
        started = time.monotonic()
        result = run(env, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout=4)
        assert time.monotonic() - started < 8 and result["extra"]["timed_out"] is True, result
        assert "runner error" not in result["exception_info"], result
        deadline = time.monotonic() + 20  # SIGKILLed processes of a bomb take a moment to go
        while int(run(env, "ls -d /proc/[0-9]* | wc -l", timeout=20)["output"] or 0) >= 20:
            assert time.monotonic() < deadline, "the bomb outlived its timeout"
            time.sleep(0.5)
        assert run(env, "echo alive")["output"] == "alive\n"


def test_memory_hog_gives_a_clear_out_of_memory_result(fresh):
    env = fresh(memory="128m")
    result = run(env, "python3 -c 'x = bytearray(1 << 30); print(len(x))'", timeout=60)
    assert result["returncode"] == 137, result
    assert "out-of-memory" in result["exception_info"] and "128m" in result["exception_info"]
    assert result["extra"].get("oom_killed") is True
    assert run(env, "echo still-usable")["output"] == "still-usable\n"
    killed_by_hand = run(env, "kill -9 $$")
    assert killed_by_hand["returncode"] == 137 and killed_by_hand["exception_info"] == "", "not an OOM"


def test_cpu_limit_is_applied(fresh):
    env = fresh(cpus=0.5)
    result = run(env, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us "
                      "2>/dev/null || cat /sys/fs/cgroup/cpu.max")
    numbers = [int(n) for n in result["output"].split() if n.isdigit()]
    assert numbers[0] * 2 == numbers[1], result
