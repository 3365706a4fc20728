"""What mini-swe-agent's own environment tests (v2.4.6 ``tests/environments``, ``tests/run``) expect
of its classes, on ours: mini's defaults, ``extra["exception_type"]`` of a timeout, ``executable``
(and ``MSWEA_DOCKER_EXECUTABLE``) choosing the engine, ``config.executable`` and ``container_id``
for mini's programbench ``copy_submission``, and bwrap's host-directory ``cwd`` and ``working_dir``.
"""

from __future__ import annotations

import os
import subprocess
import tarfile

import pytest

from swe_sandbox.testing.kit import shareable_workspace

from helpers.mini import IMAGE, backend_params, environment_fields, quiet_mini

quiet_mini()
from minisweagent.run.benchmarks.programbench import copy_submission  # noqa: E402

import swe_sandbox  # noqa: E402
from swe_sandbox import minisweagent as ours  # noqa: E402

CLASSES = {"local": ours.LocalEnvironment, "bwrap": ours.BwrapEnvironment, "docker": ours.DockerEnvironment,
           "podman": ours.PodmanEnvironment, "ssh": ours.SshEnvironment}


def make(backend: str, tmp_path, **fields):
    return CLASSES[backend](**{**environment_fields(backend, tmp_path), **fields})


# -- defaults ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", list(CLASSES))
def test_the_default_timeout_is_mini_s(backend):
    base = {"host": "203.0.113.1"} if backend == "ssh" else {}
    assert CLASSES[backend].mini_config(**base).timeout == 30
    assert CLASSES[backend].mini_config(**base, timeout=7).timeout == 7


@pytest.mark.parametrize("backend", ["docker", "podman"])
def test_container_defaults_are_mini_s(backend):
    config = CLASSES[backend].mini_config()
    assert (config.cwd, config.pull_timeout, config.executable) == ("/", 120, backend)
    # a workspace of ours: commands start in it, as with our own classes
    assert CLASSES[backend].mini_config(workspace="/tmp").cwd == ""
    assert CLASSES[backend].mini_config(mount_point="/src").cwd == ""
    assert CLASSES[backend].mini_config(pull_timeout=900).pull_timeout == 900


@pytest.mark.parametrize("backend", backend_params(["docker", "podman"]))
def test_a_container_starts_when_built_and_commands_start_in_root(backend, tmp_path):
    environment_fields(backend, tmp_path)  # skips (fails under CI) without the engine
    env = CLASSES[backend](image=IMAGE)
    try:
        assert env.container_id  # mini's DockerEnvironment starts its container in its constructor
        assert env.execute({"command": "pwd"})["output"] == "/\n"
    finally:
        env.cleanup()


# -- timeouts ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", backend_params())
def test_a_timeout_says_timeout_expired_as_mini_s_do(backend, tmp_path):
    env = make(backend, tmp_path, timeout=1)
    try:
        result = env.execute({"command": "sleep 10"})
        assert result["returncode"] == -1 and "timed out" in result["exception_info"]
        assert result["extra"]["exception_type"] == ours.TIMEOUT_EXCEPTION_TYPE == "TimeoutExpired"
        assert result["extra"]["exception"] == result["exception_info"] == "Command timed out after 1 seconds"
        assert "exception_type" not in env.execute({"command": "exit 3"})["extra"]
    finally:
        env.cleanup()


# -- executable -------------------------------------------------------------------------------------
def test_executable_variables_of_mini(monkeypatch):
    monkeypatch.setenv("MSWEA_DOCKER_EXECUTABLE", "/opt/bin/docker")
    monkeypatch.setenv("MSWEA_BUBBLEWRAP_EXECUTABLE", "/opt/bin/bwrap")
    assert ours.DockerEnvironment.mini_config().executable == "/opt/bin/docker"
    assert ours.DockerEnvironment.mini_config(executable="docker").executable == "docker"  # a field wins
    assert ours.PodmanEnvironment.mini_config().executable == "podman"  # mini's variable is its docker class's
    assert ours.BwrapEnvironment.mini_config().executable == ours.BwrapEnvironment.mini_config().bwrap_path \
        == "/opt/bin/bwrap"


@pytest.mark.parametrize(("cls", "fields", "engine"), [
    ("DockerEnvironment", {"executable": "podman"}, "podman"),
    ("DockerEnvironment", {"executable": "/usr/bin/podman"}, "podman"),
    ("DockerEnvironment", {"MSWEA_DOCKER_EXECUTABLE": "podman"}, "podman"),
    ("PodmanEnvironment", {"executable": "docker"}, "docker"),
    ("DockerEnvironment", {"executable": "docker"}, "docker"),
], ids=["docker-executable-podman", "docker-executable-path", "docker-variable-podman", "podman-executable-docker",
        "docker-executable-docker"])
def test_the_executable_picks_the_engine(cls, fields, engine, tmp_path, monkeypatch):
    environment_fields(engine, tmp_path)  # skips (fails under CI) without the engine
    fields = dict(fields)
    if "MSWEA_DOCKER_EXECUTABLE" in fields:
        monkeypatch.setenv("MSWEA_DOCKER_EXECUTABLE", fields.pop("MSWEA_DOCKER_EXECUTABLE"))
    env = getattr(ours, cls)(image=IMAGE, **fields)
    try:
        assert isinstance(env, CLASSES[engine]) and env.config.backend == engine
        assert env.execute({"command": "echo hi"})["output"] == "hi\n"
        # the container is that engine's: its own client reaches it by the id mini reads
        done = subprocess.run([engine, "exec", env.container_id, "true"], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
    finally:
        env.cleanup()


@pytest.mark.parametrize("backend", backend_params(["docker", "podman"]))
def test_mini_programbench_copy_submission_reads_executable_and_container_id(backend, tmp_path):
    environment_fields(backend, tmp_path)
    env = CLASSES[backend](image=IMAGE, executable=backend)
    try:
        assert env.config.executable == backend
        env.execute({"command": "mkdir -p /workspace && echo hello > /workspace/file.txt"})
        copy_submission(env, tmp_path / "submission.tar.gz")
        with tarfile.open(tmp_path / "submission.tar.gz", "r:gz") as tar:
            assert tar.extractfile("./file.txt").read() == b"hello\n"  # type: ignore[union-attr]
    finally:
        env.cleanup()


# -- bwrap: a host directory as cwd, working_dir ----------------------------------------------------
@pytest.mark.parametrize("cwd", ["/testbed-not-on-this-host", "/tmp", "/usr", "/"])
def test_a_bwrap_cwd_that_is_no_host_directory_of_its_own_is_a_path_inside(cwd):
    config = ours.BwrapEnvironment.mini_config(cwd=cwd)
    assert (config.cwd, config.workspace, config.mount_point) == (cwd, None, "/workspace")


def test_a_bwrap_cwd_with_a_workspace_is_where_commands_start_in_it(tmp_path):
    config = ours.BwrapEnvironment.mini_config(cwd=str(tmp_path), workspace=str(tmp_path), mount_point="/w")
    assert (config.cwd, config.mount_point) == (str(tmp_path), "/w")


@pytest.mark.bwrap
def test_a_bwrap_cwd_that_is_a_host_directory_is_bound_there(tmp_path):
    environment_fields("bwrap", tmp_path)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "given.txt").write_text("from the host\n")
    host = shareable_workspace(tmp_path / "repo")  # root: the sandbox runs as its (unprivileged) owner
    env = ours.BwrapEnvironment(cwd=str(host))
    try:
        assert (env.config.workspace, env.config.mount_point, env.working_dir) == (str(host), str(host), host)
        result = env.execute({"command": "pwd; cat given.txt; echo made > made.txt"})
        assert result["output"] == f"{host}\nfrom the host\n"
        assert (host / "made.txt").read_text() == "made\n"
        other = tmp_path / "other"
        other.mkdir()
        # one long-lived sandbox: a directory cannot be bound after it started
        assert env.execute({"command": "pwd"}, cwd=str(other))["returncode"] != 0
    finally:
        env.cleanup()
    assert host.is_dir()  # the caller's directory stays


@pytest.mark.bwrap
def test_a_bwrap_cwd_only_root_may_write_is_refused_naming_cwd_when_root(tmp_path):
    """Run by root, the sandbox is never host root: a directory only root may write is refused
    (mini's runs bwrap as root there); run by a user, the sandbox is that user and binds it."""
    environment_fields("bwrap", tmp_path)
    host = tmp_path / "private"
    host.mkdir(mode=0o700)
    if os.geteuid() == 0:
        with pytest.raises(swe_sandbox.ConfigError, match=rf"^environment\.cwd: {host} is a host directory, which "
                                                           r"is bound read-write at the same path .* never as root"):
            ours.BwrapEnvironment(cwd=str(host))
        return
    env = ours.BwrapEnvironment(cwd=str(host))
    try:
        assert env.execute({"command": "pwd"})["output"] == f"{host}\n"
    finally:
        env.cleanup()


@pytest.mark.bwrap
def test_bwrap_working_dir_is_the_host_directory_of_the_workspace(tmp_path):
    environment_fields("bwrap", tmp_path)
    env = ours.BwrapEnvironment()
    working_dir = env.working_dir
    try:
        assert working_dir.is_dir()
        env.execute({"command": "echo x > f"})
        assert (working_dir / "f").read_text() == "x\n"
    finally:
        env.cleanup()
    assert not working_dir.exists()
