"""The direct channel of the docker and podman backends (``swe_sandbox.environments.direct``).

What the kit cannot say about one backend: a process of this host connecting before the runner
(the race) is never trusted; a runner that cannot reach the socket falls back to the attach (or is
refused with ``channel: socket``); ``channel: attach`` is declared and really relayed; the socket's
directory is gone from the host once connected, also for an image without python; the channel
works under ``read_only`` and a non-root ``user``; the owner's ``kill -9`` still ends the container.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

import swe_sandbox
from swe_sandbox.capabilities import DIRECT_RUNNER_CHANNEL, missing_capabilities
from swe_sandbox.environments import direct, environment_class
from swe_sandbox.testing import test_attacks
from swe_sandbox.testing.kit import wait_until


def channel_dirs() -> list[Path]:
    """This process's channel directories still on the host."""
    return sorted(Path(tempfile.gettempdir()).glob(f"{direct.CHANNEL_DIR_PREFIX}{os.getpid()}-*"))


def channel_sockets() -> list[Path]:
    """What those directories hold (the socket, until the runner connects)."""
    return [entry for folder in channel_dirs() for entry in folder.iterdir()]


def works(env) -> None:
    result = env.execute({"command": "echo hi; exit 3"})
    assert (result["output"], result["returncode"]) == ("hi\n", 3)
    chunks = [event.text for event in env.stream({"command": "echo a; sleep 0.2; echo b"}) if not event.done]
    assert "".join(chunks) == "a\nb\n"


def test_the_default_is_the_socket_and_nothing_is_left_on_the_host(make):
    env = make()
    env.start()
    assert env.info["channel"] == "socket"
    assert channel_sockets() == [], "the socket outlived the connection"
    works(env)
    out = env.execute({"command": f"ls -A {direct.SANDBOX_CHANNEL_DIR}; echo rc=$?"})["output"]
    assert out == "rc=0\n", out
    env.close()
    assert channel_dirs() == [], "the channel's directory outlived the sandbox"


@pytest.mark.parametrize("overrides", [{"read_only": True}, {"user": "1000:1000"}], ids=["read_only", "user"])
def test_read_only_and_non_root_use_the_socket(make, overrides):
    env = make(**overrides)
    env.start()
    assert env.info["channel"] == "socket"
    works(env)


def test_attach_is_declared_and_relayed(make, engine):
    config = environment_class(engine).config_class(channel="attach")
    assert DIRECT_RUNNER_CHANNEL in missing_capabilities(environment_class(engine), config)
    env = make(channel="attach")
    env.start()
    assert env.info["channel"] == "attach"
    works(env)
    # the kit's check fails here, as its strict xfail says it must
    with pytest.raises(AssertionError, match="channel is 'attach'"):
        test_attacks.test_no_engine_relays_the_runner_channel(lambda: make(channel="attach"))


def test_socket_with_a_remote_engine_is_a_config_error(engine):
    with pytest.raises(swe_sandbox.ConfigError, match="environment.channel"):
        swe_sandbox.get_environment(engine, channel="socket", url="tcp://127.0.0.1:1")
    env = swe_sandbox.get_environment(engine, url="tcp://127.0.0.1:1")
    assert DIRECT_RUNNER_CHANNEL in missing_capabilities(type(env), env.config)


def test_a_runner_that_cannot_reach_the_socket_falls_back_or_is_refused(make, monkeypatch):
    monkeypatch.setattr(direct.ChannelSocket, "sandbox_path", property(lambda self: "/nonexistent/runner.sock"))
    env = make()
    env.start()
    assert env.info["channel"] == "attach"
    works(env)
    strict = make(channel="socket")
    with pytest.raises(swe_sandbox.SandboxStartError, match="did not reach the direct channel"):
        strict.start()
    env.close()
    assert channel_dirs() == []


@pytest.mark.parametrize("rogue", ["silent", "forged-ready"])
def test_a_host_process_connecting_first_is_never_trusted(make, monkeypatch, rogue):
    """A process of this host connects to the socket before the runner: the host takes that
    connection, finds no authentic ready frame on it, and refuses the sandbox (removed)."""
    made = []
    real_init = direct.ChannelSocket.__init__

    def init_and_race(self):
        real_init(self)
        made.append(self)
        thief = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        thief.connect(str(self.dir / direct.CHANNEL_SOCKET_NAME))
        if rogue == "forged-ready":
            frame = b'{"op": "ready", "protocol": 7, "pid": 1, "run_id": "x", "python": "3", "cwd": "/"}'
            thief.sendall(len(frame).to_bytes(4, "big") + frame + b"\0" * 32)
        threading.Timer(30, thief.close).start()

    monkeypatch.setattr(direct.ChannelSocket, "__init__", init_and_race)
    env = make(start_timeout=5)
    with pytest.raises(swe_sandbox.SandboxStartError):
        env.start()
    assert made and channel_dirs() == []
    assert env.container_id is None


def test_an_image_without_python_leaves_no_socket(make):
    env = make(image="swe-sandbox/nopython")
    env.start()
    assert env.info["channel"] == "exec"
    assert channel_sockets() == []
    assert env.execute({"command": "echo hi"})["output"] == "hi\n"


def test_kill_9_of_the_owner_ends_the_container(engine):
    """The attach is only a tether now: the owner's death still ends the runner and its container."""
    script = textwrap.dedent(f"""
        import os, swe_sandbox
        env = swe_sandbox.get_environment({engine!r})
        env.start()
        assert env.info["channel"] == "socket"
        print(env.container_id, flush=True)
        os.kill(os.getpid(), 9)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    cid = out.stdout.strip()
    assert cid, out.stderr
    engine_obj = environment_class(engine).engine_class()
    assert wait_until(lambda: engine_obj.inspect(cid) is None, 30), f"container {cid[:12]} outlived its owner"


def test_gc_removes_the_channel_directories_of_dead_owners(tmp_path):
    stale = tmp_path / f"{direct.CHANNEL_DIR_PREFIX}999999999-abc"
    live = tmp_path / f"{direct.CHANNEL_DIR_PREFIX}{os.getpid()}-abc"
    stale.mkdir()
    live.mkdir()
    (stale / direct.CIDFILE_NAME).write_text("0123abcd")  # a CLI run's id, its owner killed before reading it
    assert direct.gc(str(tmp_path)) == 1
    assert not stale.exists() and live.exists()


def test_close_without_waiting_leaves_neither_container_nor_directory(make, engine):
    """``close(wait=False)`` (the one-shot ``exec``): the engine removes the container by itself and
    the channel's directory is gone at once."""
    env = make()
    env.execute({"command": "sleep 100 &"})
    cid = env.container_id
    env.close(wait=False)
    assert channel_dirs() == []
    engine_obj = environment_class(engine).engine_class()
    assert wait_until(lambda: engine_obj.inspect(cid) is None, 30), f"container {cid[:12]} left after close(wait=False)"


def test_the_one_shot_exec_leaves_no_directory(engine):
    before = set(Path(tempfile.gettempdir()).glob(f"{direct.CHANNEL_DIR_PREFIX}*"))
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "exec", "--env", engine, "--", "echo hi"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr
    assert set(Path(tempfile.gettempdir()).glob(f"{direct.CHANNEL_DIR_PREFIX}*")) <= before
