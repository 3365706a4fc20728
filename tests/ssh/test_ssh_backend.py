"""The ssh backend against a real OpenSSH server on loopback (tests/ssh/sshd.py).

What the conformance suite cannot show: host-key policy, inline environment, SFTP, a connection
that drops or freezes mid-command (SandboxDied in bounded time, then a reconnect), the channel
window under large output, login shells whose startup files print, the remote bwrap sandbox, and
`swe-sandbox check`. The agent end to end over ssh is in test_ssh_e2e.py.
The execute contract itself runs in tests/conformance (entries "ssh" and "ssh-exec").
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ssh.sshd import TEST_USER, Sshd, server_or_skip

import swe_sandbox
from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxDied, SandboxStartError

pytestmark = pytest.mark.ssh
RUNNERS = ["python", "exec"]


@pytest.fixture
def shared():
    """The process-wide test sshd (never killed or frozen)."""
    return server_or_skip()


@pytest.fixture
def server():
    """A private sshd, for tests that kill, freeze or restart it."""
    sshd = server_or_skip(lambda: Sshd().start())
    try:
        yield sshd
    finally:
        sshd.close()


@pytest.fixture
def make_ssh():
    """Factory of ssh environments (closed after the test)."""
    made = []

    def factory(spec):
        environment = swe_sandbox.get_environment({"timeout": 30, **spec})
        made.append(environment)
        return environment

    yield factory
    for environment in made:
        environment.close()


def run(environment, command, **kwargs):
    return environment.execute({"command": command}, **kwargs)


# -- host keys ---------------------------------------------------------------------------------


def fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]


def test_unknown_host_key_is_refused_with_its_fingerprint(shared, make_ssh, tmp_path):
    environment = make_ssh(shared.spec(known_hosts=str(tmp_path / "known_hosts")))
    with pytest.raises(SandboxStartError) as info:
        run(environment, "echo never")
    message = str(info.value)
    assert "unknown host key" in message and "accept_new_host_keys" in message
    assert fingerprint(shared.dir / "host_ed25519.pub") in message
    assert not (tmp_path / "known_hosts").exists()


def test_accept_new_host_keys_saves_the_key_then_it_is_known(shared, make_ssh, tmp_path):
    known = tmp_path / "sub" / "known_hosts"
    first = make_ssh(shared.spec(known_hosts=str(known), accept_new_host_keys=True))
    assert run(first, "echo hi")["output"] == "hi\n"
    assert f"[127.0.0.1]:{shared.port} ssh-ed25519 " in known.read_text()
    second = make_ssh(shared.spec(known_hosts=str(known)))
    assert run(second, "echo again")["output"] == "again\n"


def test_changed_host_key_is_refused_even_when_accepting_new_ones(shared, make_ssh, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{shared.port} " + " ".join(Path(f"{other}.pub").read_text().split()[:2]) + "\n")
    environment = make_ssh(shared.spec(known_hosts=str(known), accept_new_host_keys=True))
    with pytest.raises(SandboxStartError, match="CHANGED"):
        run(environment, "true")


def test_wrong_key_and_closed_port_fail_clearly(shared, make_ssh, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with pytest.raises(SandboxStartError, match="cannot connect .*Authentication"):
        run(make_ssh(shared.spec(key_filename=str(stranger))), "true")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(SandboxStartError, match="cannot connect"):
        run(make_ssh(shared.spec(port=port)), "true")
    assert time.monotonic() - started < 5


def test_host_is_required():
    with pytest.raises(swe_sandbox.ConfigError, match="environment.host"):
        swe_sandbox.get_environment("ssh")


# -- environment, workspace, runners -------------------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_env_values_travel_inline_and_exact(shared, make_ssh, monkeypatch, runner):
    tricky = {"SWE_Q": "it's \"quoted\" $HOME `id` \\ ; & | *", "SWE_NL": "line1\nline2", "SWE_U": "ü 😀 中",
              "SWE_EMPTY": ""}
    monkeypatch.setenv("SWE_HOST_ONLY", "host-secret-value")
    monkeypatch.setenv("SWE_FWD", "forwarded")
    environment = make_ssh(shared.spec(runner, env=tricky, forward_env=["SWE_FWD"]))
    script = "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('SWE_')}))"
    result = run(environment, f"python3 -c \"{script}\"")
    import json

    seen = json.loads(result["output"])
    assert {k: seen.get(k) for k in tricky} == tricky
    assert seen["SWE_FWD"] == "forwarded" and "SWE_HOST_ONLY" not in seen
    assert "host-secret-value" not in run(environment, "env")["output"]
    assert run(environment, 'echo "$PAGER $TERM"')["output"] == "cat dumb\n"


@pytest.mark.parametrize("runner", RUNNERS)
def test_temporary_workspace_is_the_cwd_and_removed_at_close(shared, make_ssh, runner):
    environment = make_ssh(shared.spec(runner))
    workspace = environment.workspace
    assert run(environment, "pwd; stat -c %a .")["output"] == f"{workspace}\n700\n"
    run(environment, "echo kept > f.txt")
    assert run(environment, "cat f.txt")["output"] == "kept\n"
    environment.close()
    assert not os.path.exists(workspace)  # loopback: the remote is this host


def test_given_workspace_is_created_and_kept(shared, make_ssh, tmp_path):
    workspace = tmp_path / "remote" / "ws"
    environment = make_ssh(shared.spec(workspace=str(workspace)))
    assert run(environment, "pwd; touch made-here")["output"] == f"{workspace}\n"
    environment.close()
    assert (workspace / "made-here").exists()


def test_runner_auto_falls_back_without_python_and_python_refuses(shared, make_ssh):
    auto = make_ssh(shared.spec("auto", python="/nonexistent/python3"))
    assert run(auto, "echo via-fallback")["output"] == "via-fallback\n"
    assert auto.info["mode"] == "exec"
    with_python = make_ssh(shared.spec("auto"))
    assert run(with_python, "true")["returncode"] == 0 and with_python.info["python"]
    forced = make_ssh(shared.spec("python", python="/nonexistent/python3"))
    with pytest.raises(SandboxStartError, match="runner: auto or exec"):
        run(forced, "true")


@pytest.fixture
def chatty_server(tmp_path):
    """A private sshd whose login shells print on both streams, and take time, before any command."""
    startup = tmp_path / "chatty-startup.sh"
    startup.write_text('[ -n "$CHATTY_DONE" ] || { echo "welcome to the box"; echo "startup warning" >&2; sleep 0.3; }\n'
                       "export CHATTY_DONE=1\n")
    sshd = server_or_skip(lambda: Sshd(session_env={"BASH_ENV": str(startup)}).start())
    try:
        yield sshd
    finally:
        sshd.close()


@pytest.mark.parametrize("runner", RUNNERS)
def test_login_shell_startup_output_is_dropped(chatty_server, make_ssh, runner):
    """What startup files print before the command reaches neither results nor the runner's frames."""
    environment = make_ssh(chatty_server.spec(runner))
    first = run(environment, "echo clean; echo err >&2; exit 4")
    assert (first["output"], first["returncode"]) == ("clean\nerr\n", 4)
    assert run(environment, "echo again")["output"] == "again\n"
    environment.upload(__file__, "copied.py")
    assert run(environment, "test -s copied.py && echo copied")["output"] == "copied\n"


def test_runner_mode_uses_one_channel_for_every_command(shared, make_ssh):
    environment = make_ssh(shared.spec("python"))
    pids = {run(environment, "echo $PPID")["output"] for _ in range(5)}
    assert len(pids) == 1  # the same runner answered every command
    assert environment.info["op"] == "ready" and environment.info["python"]


# -- files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_upload_download_round_trip(shared, make_ssh, tmp_path, runner):
    src = tmp_path / "src"
    (src / "sub dir ü").mkdir(parents=True)
    (src / "sub dir ü" / "data.bin").write_bytes(os.urandom(300_000))
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "link").symlink_to("run.sh")
    environment = make_ssh(shared.spec(runner))
    environment.upload(src, "project")  # relative: in the workspace
    assert run(environment, "cd project && ./run.sh && readlink link")["output"] == "ran\nrun.sh\n"
    environment.upload(src / "run.sh", "single/copy.sh")
    assert run(environment, "single/copy.sh")["output"] == "ran\n"
    back = tmp_path / "back"
    environment.download(f"{environment.workspace}/project", back)
    assert (back / "sub dir ü" / "data.bin").read_bytes() == (src / "sub dir ü" / "data.bin").read_bytes()
    assert os.access(back / "run.sh", os.X_OK) and os.readlink(back / "link") == "run.sh"


# -- a connection that drops or freezes ----------------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_killed_sshd_mid_command_raises_fast_then_reconnects(server, make_ssh, runner):
    environment = make_ssh(server.spec(runner, timeout=900))
    marker = unique_marker()
    assert run(environment, "echo state > kept.txt")["returncode"] == 0
    killer = _later(1.0, server.kill)
    started = time.monotonic()
    with pytest.raises(SandboxDied, match="reconnects"):
        run(environment, f"sleep {marker}", timeout=None)
    took = time.monotonic() - started
    killer.join()
    assert took < 5, f"noticed the dead connection after {took:.1f} s"
    with pytest.raises(SandboxStartError, match="cannot connect"):  # the host is still down
        run(environment, "true")
    server.start()
    assert run(environment, "cat kept.txt")["output"] == "state\n"  # same workspace
    assert wait_gone(environment, marker), "the old command outlived its connection"


@pytest.mark.parametrize("runner", RUNNERS)
def test_frozen_sshd_mid_command_raises_within_30s_then_reconnects(server, make_ssh, runner):
    environment = make_ssh(server.spec(runner, timeout=900))  # default keepalives: 5 s x 3
    marker = unique_marker()
    assert run(environment, "true")["returncode"] == 0
    freezer = _later(1.0, server.freeze)
    started = time.monotonic()
    try:
        with pytest.raises(SandboxDied, match="did not answer"):
            run(environment, f"sleep {marker}", timeout=None)
        took = time.monotonic() - started
    finally:
        freezer.join()
        server.thaw()
    assert took < 30, f"noticed the frozen connection after {took:.1f} s"
    assert run(environment, "echo back")["output"] == "back\n"
    assert wait_gone(environment, marker), "the old command outlived its connection"


def test_quick_keepalive_detects_a_frozen_server_fast(server, make_ssh):
    environment = make_ssh(server.spec(keepalive_interval=0.5, keepalive_count_max=2))
    assert run(environment, "true")["returncode"] == 0
    server.freeze()
    try:
        started = time.monotonic()
        with pytest.raises(SandboxDied):
            run(environment, "echo never")
        assert time.monotonic() - started < 3
    finally:
        server.thaw()
    assert run(environment, "echo again")["output"] == "again\n"


def test_runner_death_on_a_healthy_connection_closes_the_environment(shared, make_ssh):
    environment = make_ssh(shared.spec("python"))
    with pytest.raises(SandboxDied):
        run(environment, "kill -9 $PPID; sleep 5")
    with pytest.raises(swe_sandbox.SweSandboxError, match="closed"):
        run(environment, "true")


def unique_marker() -> str:
    return f"{secrets.randbelow(10**6) + 10**6}.{secrets.randbelow(10**6):06d}"


def wait_gone(environment, marker: str, grace: float = 5.0) -> bool:
    """No process runs ``sleep MARKER`` any more (seen on this host: the remote is loopback)."""
    pattern = f"[s]leep {marker}"
    deadline = time.monotonic() + grace
    while run(environment, f"pgrep -f '{pattern}' >/dev/null && echo alive || echo gone")["output"] != "gone\n":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _later(delay, fn):
    import threading

    thread = threading.Thread(target=lambda: (time.sleep(delay), fn()), daemon=True)
    thread.start()
    return thread


# -- large output, both streams ------------------------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_large_output_on_both_streams_does_not_deadlock(shared, make_ssh, runner):
    environment = make_ssh(shared.spec(runner, max_output_bytes=1 << 20))
    command = ("python3 -c \"import sys, threading\n"
               "def w(s):\n    for _ in range(400): s.write('x' * 65536); s.flush()\n"
               "t = threading.Thread(target=w, args=(sys.stderr,)); t.start(); w(sys.stdout); t.join()\"; echo END")
    result = run(environment, command, timeout=120)
    assert result["returncode"] == 0 and result["output"].endswith("END\n")
    assert result["extra"]["output_bytes"] == 2 * 400 * 65536 + 4 and result["extra"]["truncated"]


def test_runner_stderr_flood_does_not_stall_the_channel(shared, make_ssh, tmp_path):
    """The runner's own stderr (a separate SSH stream) is drained, so it never closes the window."""
    python = tmp_path / "noisy-python3"  # the remote is this host
    python.write_text("#!/bin/sh\nhead -c 30000000 /dev/zero >&2\nexec python3 \"$@\"\n")
    python.chmod(0o755)
    environment = make_ssh(shared.spec("python", python=str(python)))
    assert run(environment, "echo done", timeout=60)["output"] == "done\n"
    assert run(environment, "echo alive")["output"] == "alive\n"


# -- remote bwrap --------------------------------------------------------------------------------


def _require_bwrap():
    from swe_sandbox.environments import environment_class

    reason = environment_class("bwrap").unavailable_reason()
    if reason:
        if "CI" in os.environ:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.mark.bwrap
@pytest.mark.parametrize("runner", RUNNERS)
def test_remote_bwrap_runs_commands_under_the_bwrap_policy(shared, make_ssh, tmp_path, runner):
    _require_bwrap()
    environment = make_ssh(shared.spec(runner, remote_sandbox="bwrap", username=TEST_USER))
    assert environment.isolation.startswith("bwrap on the remote host")
    result = run(environment, "pwd; hostname; cat /etc/shadow 2>/dev/null | grep -c root:; touch /usr/x 2>/dev/null || echo ro; "
                              "echo $HOME; echo w > in-ws")
    assert result["output"] == "/workspace\nswe-sandbox\n0\nro\n/tmp\n", result
    assert (Path(environment.workspace) / "in-ws").read_text() == "w\n"
    probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {shared.port}), 2)\""
    assert run(environment, probe + " 2>/dev/null || echo no-net")["output"] == "no-net\n"
    environment.upload(tmp_path, "/workspace/up")
    with pytest.raises(ValueError, match="/workspace"):
        environment.upload(tmp_path, "/etc/x")
    result = run(environment, "sleep 30", timeout=1)
    assert result["extra"]["timed_out"] and result["returncode"] == -1


def test_remote_bwrap_missing_is_backend_unavailable(shared, make_ssh):
    environment = make_ssh(shared.spec(remote_sandbox="bwrap", username=TEST_USER,
                                       bwrap={"bwrap_path": "/nonexistent/bwrap"}))
    with pytest.raises(BackendUnavailable, match="bubblewrap does not work"):
        run(environment, "true")


@pytest.mark.bwrap
def test_remote_bwrap_refuses_a_root_login(shared, make_ssh, tmp_path):
    """As root there, the sandbox's root would be the remote's root, and (no seccomp filter remotely)
    a command could leave a setuid-root file in the workspace (hostile review): refused before anything runs."""
    _require_bwrap()
    environment = make_ssh(shared.spec(remote_sandbox="bwrap", username="root", workspace=str(tmp_path / "ws")))
    with pytest.raises(ConfigError, match=r"environment\.username: .* as root"):
        run(environment, "cp /bin/true suid && chmod 4755 suid")
    assert not (tmp_path / "ws" / "suid").exists()


# -- the command line ----------------------------------------------------------------------------


def test_check_says_ssh_alone_is_no_sandbox(shared, tmp_path):
    spec = shared.write_spec(tmp_path / "ssh.yaml")
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "check", "--env", str(spec)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"}, stdin=subprocess.DEVNULL)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in text and "SSH alone is not a sandbox" in text


def test_exec_with_the_preset_and_overrides(shared):
    spec = shared.spec()
    overrides = [a for k in ("host", "port", "username", "key_filename", "known_hosts")
                 for a in ("-c", f"environment.{k}={spec[k]}")]
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "exec", "--env", "ssh", *overrides, "--json", "--",
                           "echo via-preset; exit 3"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    import json

    result = json.loads(done.stdout)
    assert (done.returncode, result["output"], result["returncode"]) == (3, "via-preset\n", 3)
