"""The template method of ``Environment``: backends fill hooks, the base owns start/execute/close."""

from __future__ import annotations

import time

import pytest

from swe_sandbox import runner
from swe_sandbox.config import EnvironmentConfig
from swe_sandbox.environments.base import Environment
from swe_sandbox.errors import ConnectionLost, SandboxDied, SandboxError


class FakeSession:
    """A ``Session`` answering every command with ``replies`` in turn (an exception is raised)."""

    kind = "fake"

    def __init__(self, replies):
        self.replies, self.closed = list(replies), False

    def ready(self, timeout, unauthenticated=()):
        return {"op": "ready", "cwd": "/"}

    def frames(self, req, timeout):
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        buf = runner.OutputBuffer(1 << 20)
        yield {**runner.make_result(reply, 0, "", time.monotonic(), buf), "id": req["id"]}

    def cancel(self, request_id):
        pass

    def diagnose(self):
        return ""

    def interrupt(self):
        pass

    def close(self, wait=2.0):
        self.closed = True


class FakeEnvironment(Environment):
    def __init__(self, sessions, lose_connection=False):
        super().__init__(EnvironmentConfig(backend="fake"))
        self.sessions, self.lose_connection, self.calls = list(sessions), lose_connection, []

    def _open_channel(self):
        return self.sessions.pop(0)

    def _after_start(self):
        self.calls.append("after_start")

    def _check_result(self, result):
        result["extra"]["checked"] = True

    def _lost_connection(self, exc):
        return ConnectionLost(f"{exc} (lost)") if self.lose_connection else None

    def _drop_connection(self):
        self.calls.append("drop_connection")

    def _explain_death(self, exc):
        return SandboxDied(f"{exc} (explained)")

    def _stop(self):
        self.calls.append("stop")


def test_hooks_run_once_per_start_and_per_result():
    env = FakeEnvironment([FakeSession(["a", "b"])])
    assert env.execute({"command": "x"})["output"] == "a"
    assert env.execute({"command": "x"})["extra"]["checked"] is True
    env.close()
    assert env.calls == ["after_start", "stop"]


def test_a_dead_sandbox_closes_the_environment_and_is_explained():
    session = FakeSession([SandboxDied("gone")])
    env = FakeEnvironment([session])
    with pytest.raises(SandboxDied, match=r"^gone \(explained\)$") as info:
        env.execute({"command": "x"})
    assert not isinstance(info.value, ConnectionLost) and session.closed
    with pytest.raises(SandboxError, match="closed"):
        env.execute({"command": "x"})


def test_a_lost_connection_keeps_the_environment_open_and_the_next_command_reconnects():
    first, second = FakeSession([SandboxDied("gone")]), FakeSession(["again"])
    env = FakeEnvironment([first, second], lose_connection=True)
    with pytest.raises(ConnectionLost, match=r"^gone \(lost\)$"):
        env.execute({"command": "x"})
    assert first.closed and env.calls == ["after_start", "drop_connection"]
    assert env.execute({"command": "x"})["output"] == "again"
    assert env.calls == ["after_start", "drop_connection", "after_start"]
    env.close()


def test_no_backend_overrides_start_execute_or_close():
    from swe_sandbox.environments import environment_class

    pytest.importorskip("minisweagent")
    from swe_sandbox import minisweagent

    classes = [environment_class(name) for name in ("local", "bwrap", "docker", "podman", "ssh")]
    classes += [getattr(minisweagent, name) for name in minisweagent.__all__ if name.endswith("Environment")]
    for cls in classes:
        for method in ("start", "execute", "close"):
            assert getattr(cls, method) is getattr(Environment, method), (cls.__name__, method)


def test_each_sdk_has_one_list_of_its_errors():
    docker = pytest.importorskip("docker")
    podman = pytest.importorskip("podman")
    paramiko = pytest.importorskip("paramiko")
    from swe_sandbox.environments import environment_class
    from swe_sandbox.environments.ssh.link import ssh_errors

    assert issubclass(docker.errors.NotFound, environment_class("docker").engine_class().errors)
    assert issubclass(podman.errors.NotFound, environment_class("podman").engine_class().errors)
    assert issubclass(paramiko.SSHException, ssh_errors()) and issubclass(EOFError, ssh_errors())
