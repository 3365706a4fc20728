"""Lifecycle of the docker and podman backends: labels, workspace and files, close, owner death,
gc, the lifetime guard, a vanished container, the exec fallback, and the SDK traps.

Needs the engines (``sudo scripts/setup-engines.sh``); skipped when one is unavailable, except
under CI, where that is a failure (``helpers.variants.require_backend``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import swe_sandbox
from swe_sandbox.environments import environment_class
from swe_sandbox.environments.container.engine import (
    LABEL_BACKEND,
    LABEL_MANAGED,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_RUN_ID,
)
from swe_sandbox.testing.kit import wait_until

MODES = {"runner": {}, "exec": {"runner": "exec"}, "nopython": {"image": "swe-sandbox/nopython"}}


def run(env, command, **kwargs):
    return env.execute({"command": command}, **kwargs)


def exists(env_or_engine, cid) -> bool:
    engine = env_or_engine.engine if hasattr(env_or_engine, "engine") else env_or_engine
    return engine.inspect(cid) is not None


def wait_gone(engine, cid, within=10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if engine.inspect(cid) is None:
            return True
        time.sleep(0.1)
    return False


# -- creation, labels, modes ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_modes_run_commands(make, mode):
    env = make(**MODES[mode])
    result = run(env, "echo out; echo err >&2; exit 3")
    assert result["output"] == "out\nerr\n" and result["returncode"] == 3
    assert env.info["mode"] == ("runner" if mode == "runner" else "exec")
    assert run(env, "pwd")["output"] == "/workspace\n"


def test_labels_and_name(make, engine):
    env = make()
    env.start()
    attrs = env.engine.inspect(env.container_id)
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL_MANAGED] == "1" and labels[LABEL_BACKEND] == engine
    assert labels[LABEL_OWNER_PID] == str(os.getpid()) and labels[LABEL_OWNER_HOST]
    assert labels[LABEL_RUN_ID] == env.run_id and attrs["Name"].lstrip("/") == f"swe-sandbox-{env.run_id}"


def test_runner_forced_on_an_image_without_python_fails_clearly(make):
    env = make(image="swe-sandbox/nopython", runner="python")
    with pytest.raises(swe_sandbox.SandboxStartError, match="has no python3"):
        env.start()
    assert env.container_id is None


def test_missing_image_says_how_to_build(make):
    env = make(image="swe-sandbox/does-not-exist")
    with pytest.raises(swe_sandbox.SandboxStartError, match="swe-sandbox image build"):
        env.start()


def test_unreachable_engine_is_backend_unavailable(engine):
    cls = type(swe_sandbox.get_environment(engine))
    reason = cls.unavailable_reason(url="unix:///nonexistent/engine.sock")
    assert reason and "does not answer" in reason
    env = swe_sandbox.get_environment(engine, url="unix:///nonexistent/engine.sock")
    with pytest.raises(swe_sandbox.BackendUnavailable):
        env.start()
    env.close()


# -- files -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["runner", "exec"])
def test_workspace_is_copied_in(make, tmp_path, mode):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "mod ü.py").write_text("print('hi')\n")
    (tmp_path / "src" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tmp_path / "src" / "run.sh").chmod(0o755)
    os.symlink("pkg/mod ü.py", tmp_path / "src" / "link.py")
    env = make(workspace=str(tmp_path / "src"), **MODES[mode])
    result = run(env, "find . | sort; ./run.sh; readlink link.py; stat -c '%u %a' run.sh; echo x >> run.sh")
    assert result["output"] == ".\n./link.py\n./pkg\n./pkg/mod ü.py\n./run.sh\nran\npkg/mod ü.py\n0 755\n"
    assert (tmp_path / "src" / "run.sh").read_text().endswith("echo ran\n"), "the host copy must not change"


def test_upload_and_download_round_trip(make, tmp_path):
    env = make()
    (tmp_path / "f.txt").write_bytes(b"\x00\xffbinary\n")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "a").write_text("A")
    env.upload(tmp_path / "f.txt", "copied.txt")                   # relative: under the workspace
    env.upload(tmp_path / "tree", "/opt/new/parent/tree")           # missing parents are created
    result = run(env, "od -An -c copied.txt | tr -s ' '; cat /opt/new/parent/tree/sub/a")
    assert "\\0 377 b i n a r y \\n" in result["output"] and result["output"].endswith("A")
    run(env, "mkdir -p out/d && echo made > out/d/x && printf z > out/z")
    env.download("out", tmp_path / "back")
    env.download("/workspace/out/z", tmp_path / "z.txt")
    assert (tmp_path / "back" / "d" / "x").read_text() == "made\n" and (tmp_path / "z.txt").read_text() == "z"
    with pytest.raises(FileNotFoundError, match="/no/such/file"):
        env.download("/no/such/file", tmp_path / "nothing")
    env.close()
    with pytest.raises(swe_sandbox.SweSandboxError):  # a closed sandbox is not a missing file
        env.download("out", tmp_path / "after-close")


# -- close, owner death, gc --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["runner", "exec"])
def test_close_removes_at_once_and_is_idempotent(make, mode):
    env = make(**MODES[mode])
    run(env, "sleep 300 & echo started")
    cid = env.container_id
    started = time.monotonic()
    env.close()
    assert time.monotonic() - started < 2.0, "close() must not wait for a stop timeout"
    assert not exists(env, cid)
    env.close()
    with pytest.raises(swe_sandbox.SweSandboxError):
        run(env, "true")


OWNER = textwrap.dedent("""
    import sys, time
    import swe_sandbox
    env = swe_sandbox.get_environment(sys.argv[1], image=sys.argv[2])
    env.execute({"command": "sleep 300 >/dev/null 2>&1 & true"})
    print(env.container_id, flush=True)
    time.sleep(300)
""")


@pytest.mark.parametrize("image", ["swe-sandbox/base", "swe-sandbox/nopython"])
def test_kill_9_of_the_owner_ends_the_container(engine, image):
    """The attach is the tether: when its owner dies (even kill -9), the container ends and goes."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, engine, image], stdout=subprocess.PIPE, text=True)
    try:
        cid = owner.stdout.readline().strip()
        assert cid, "the owner did not start its sandbox"
        owner.kill()
        owner.wait()
        env_engine = swe_sandbox.get_environment(engine).engine
        assert wait_gone(env_engine, cid, within=10), "the container outlived its owner"
    finally:
        owner.kill()
        owner.stdout.close()


def test_gc_removes_containers_of_dead_owners_only(make, engine):
    live = make()
    live.start()
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    orphan_env = swe_sandbox.get_environment(engine)
    spec = orphan_env.container_spec()
    spec.labels[LABEL_OWNER_PID] = str(dead_pid.pid)
    orphan = orphan_env.engine.create(spec)  # created, never attached: what a crash between the two leaves
    try:
        report = environment_class(engine).gc()
        actions = {r["id"]: r["action"] for r in report}
        assert actions[orphan[:12]] == "removed"
        assert actions[live.container_id[:12]] == "kept (owner alive)"
        assert not exists(orphan_env, orphan) and exists(live, live.container_id)
        assert all(r["action"] != "removed" for r in environment_class(engine).gc()), "a second gc has nothing to remove"
    finally:
        orphan_env.engine.remove(orphan)


# -- the lifetime guard and a vanished container --------------------------------------------------


@pytest.mark.parametrize("init", [True, False], ids=["init", "no-init"])
@pytest.mark.parametrize("mode", ["runner", "nopython"])
def test_lifetime_guard_ends_the_container(make, mode, init):
    env = make(max_lifetime=2, init=init, **MODES[mode])
    assert run(env, "echo hi")["output"] == "hi\n"
    cid = env.container_id
    assert wait_gone(env.engine, cid, within=8), "the container outlived max_lifetime"
    with pytest.raises(swe_sandbox.SandboxDied, match="max_lifetime"):
        run(env, "echo again")


@pytest.mark.parametrize("mode", list(MODES))
def test_killing_sleeps_or_signalling_pid_1_spares_the_sandbox(make, mode):
    """Agents clean up with `pkill sleep`; the lifetime guard's nap is cut short, nothing more."""
    env = make(**MODES[mode])
    kill_sleeps = 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && kill ${p#/proc/}; done'
    result = run(env, f"sleep 1000 & sleep 0.2; {kill_sleeps}; kill 1; sleep 0.5; echo cleaned")
    assert result["output"] == "cleaned\n", result
    time.sleep(1)
    assert run(env, "echo alive")["output"] == "alive\n"


@pytest.mark.parametrize("mode", ["runner", "exec"])
def test_container_removed_during_a_command_raises_sandbox_died(make, mode):
    env = make(**MODES[mode])
    run(env, "true")
    removed: list[float] = []

    def remove() -> None:
        env.engine.remove(env.container_id)
        removed.append(time.monotonic())

    remover = threading.Timer(0.5, remove)
    remover.start()
    with pytest.raises(swe_sandbox.SandboxDied, match="no longer exists|is gone"):
        run(env, "sleep 20", timeout=30)
    noticed = time.monotonic()
    remover.join()
    # Seen within seconds of the engine's removal (which alone took ~5 s in a loaded CI run), long
    # before the command's own 20 s.
    assert noticed - removed[0] < 3


def test_container_removed_between_commands_raises_sandbox_died(make):
    env = make(runner="exec")
    run(env, "true")
    env.engine.remove(env.container_id)
    with pytest.raises(swe_sandbox.SandboxDied):
        run(env, "echo hello")


def test_busybox_image_timeout_kills_the_whole_tree(make):
    """On the busybox image (ash, busybox setsid/grep/sleep) the fallback still kills every escapee."""
    env = make(image="swe-sandbox/nopython")
    marker = f"{os.getpid()}{int(time.monotonic() * 1000) % 10**6}"
    command = (f"echo start; setsid sleep 7{marker} & ( setsid env -i sleep 8{marker} & ); "
               f"sleep 9{marker} & exec >/dev/null 2>&1; sleep 6{marker}")
    started = time.monotonic()
    result = run(env, command, timeout=1)
    assert result["extra"]["timed_out"] and result["output"] == "start\n"
    assert time.monotonic() - started < 3  # the contract's 1 s + 1 s, plus slack for a loaded host
    survivors = f"ps -o pid,args | grep '[{marker[0]}]{marker[1:]}' || true"
    assert wait_until(lambda: run(env, survivors)["output"] == "", within=1.0), run(env, survivors)
    assert run(env, "echo alive")["output"] == "alive\n"


# -- the SDK traps ----------------------------------------------------------------------------------------


def test_trap_sdk_socket_timeout_does_not_cut_commands(make, engine):
    """The SDK clients get ``api_timeout`` (docker-py's default is 60 s); commands never ride on it."""
    env = make(api_timeout=2)
    assert getattr(env.engine.client.api, "timeout", None) == 2
    result = run(env, "sleep 3; echo done", timeout=10)
    assert result["output"] == "done\n" and result["returncode"] == 0
    fallback = make(api_timeout=2, runner="exec")
    assert run(fallback, "sleep 3; echo done", timeout=10)["output"] == "done\n"


@pytest.mark.parametrize("mode", ["runner", "exec"])
def test_trap_stream_headers_are_not_in_the_output(make, mode):
    """Bytes that look like the engines' 8-byte stream headers pass through verbatim, in order."""
    env = make(**MODES[mode])
    command = ("printf '\\001\\000\\000\\000\\000\\000\\000\\005hello'; printf '\\002\\000\\000\\000' >&2; "
               "for i in 1 2 3; do echo o$i; echo e$i >&2; done; head -c 300000 /dev/zero | tr '\\0' x")
    result = run(env, command)
    assert result["output"].startswith("\x01\x00\x00\x00\x00\x00\x00\x05hello\x02\x00\x00\x00o1\ne1\no2\ne2\no3\ne3\n")
    assert result["output"].endswith("x" * 300000) and result["extra"]["output_bytes"] == 13 + 4 + 18 + 300000


@pytest.mark.parametrize("mode", ["runner", "exec"])
def test_empty_output_is_an_empty_string(make, mode):
    """No output at all (the SDK's demux would give None for the stream) is "" here."""
    env = make(**MODES[mode])
    result = run(env, "true")
    assert result["output"] == "" and result["extra"]["output_bytes"] == 0
