"""Docker sandboxes start with one ``docker run -i`` (``container.cli_run``), the SDK path kept as fallback.

The two paths must make the same container: the same spec is created both ways and every field
the spec sets is compared in ``docker inspect`` (what differs by nature, the name, the channel
directory, the run id, is normalised). Then: the start path imports no SDK; a spec the CLI
cannot say (``create_args``) and a failed ``docker run`` (an image the CLI does not find) take the
SDK path, which pulls or says why; environment values never reach a host command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import swe_sandbox
import swe_sandbox.errors
from swe_sandbox.environments.container import cli_run
from swe_sandbox.environments.container.engine import LABEL_CREATED, LABEL_RUN_ID
from swe_sandbox.environments.direct import CHANNEL_DIR_PREFIX

from helpers.variants import require_backend

pytestmark = pytest.mark.docker

#: Spec-driven fields of ``docker inspect`` (``Config``, ``HostConfig``) both paths must agree on.
CONFIG_KEYS = ("Cmd", "Entrypoint", "Env", "Hostname", "Image", "OpenStdin", "Tty", "User", "WorkingDir")
HOST_KEYS = ("AutoRemove", "CapAdd", "CapDrop", "CpuPeriod", "CpuQuota", "Init", "LogConfig", "Memory",
             "MemorySwap", "NanoCpus", "NetworkMode", "PidsLimit", "Privileged", "ReadonlyRootfs",
             "SecurityOpt", "Tmpfs", "UsernsMode")


def facts(env) -> dict:
    """What the spec decided about ``env``'s container, from the engine's inspect data."""
    data = env.engine.inspect(env.container_id)
    labels = {k: v for k, v in data["Config"]["Labels"].items() if k not in (LABEL_RUN_ID, LABEL_CREATED)}
    config = {key: data["Config"].get(key) for key in CONFIG_KEYS}
    config["Env"] = sorted(config["Env"] or [])
    host = {key: data["HostConfig"].get(key) for key in HOST_KEYS}
    for key in ("CapAdd", "CapDrop"):  # the CLI writes CAP_CHOWN where the SDK sends CHOWN: the same to the engine
        host[key] = sorted(name.removeprefix("CAP_") for name in host[key] or [])
    mounts = sorted((m["Type"], m["Destination"], m["RW"]) for m in data["Mounts"])
    return {"config": config, "host": host, "labels": labels, "mounts": mounts}


def sdk_only(monkeypatch) -> None:
    """Make this process's docker engine say its CLI cannot run the spec: the SDK path creates."""
    from swe_sandbox.environments.container.docker import DockerEngine

    monkeypatch.setattr(DockerEngine, "run_argv", lambda self, spec, cidfile: None)


@pytest.fixture(autouse=True)
def docker_here():
    require_backend("docker")


@pytest.mark.parametrize("overrides", [
    {},
    {"read_only": True, "memory": "256m", "cpus": 0.5, "pids_limit": 64, "env": {"A": "1", "B": "x y\nz"}},
    {"user": "1000:1000", "network": "on", "tmpfs": {"/cache": "rw,size=16m"}},
], ids=["default", "limits", "user-network"])
def test_the_cli_and_the_sdk_make_the_same_container(monkeypatch, overrides):
    with swe_sandbox.get_environment("docker", **overrides) as by_cli:
        assert by_cli.execute("echo ok")["output"] == "ok\n"
        cli_facts = facts(by_cli)
    sdk_only(monkeypatch)
    with swe_sandbox.get_environment("docker", **overrides) as by_sdk:
        assert by_sdk.execute("echo ok")["output"] == "ok\n"
        sdk_facts = facts(by_sdk)
    assert cli_facts == sdk_facts


def test_the_start_path_imports_no_sdk():
    """A start, a command and a close without waiting (``swe-sandbox exec``'s path) in a fresh
    interpreter: the docker SDK (and requests) never imported."""
    code = textwrap.dedent("""
        import sys, swe_sandbox
        env = swe_sandbox.get_environment("docker")
        assert env.execute("echo hi")["output"] == "hi\\n"
        assert env.info["channel"] == "socket", env.info
        env.close(wait=False)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("docker", "requests", "paramiko")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_create_args_take_the_sdk_path():
    with swe_sandbox.get_environment("docker", create_args={"shm_size": "64m"}) as env:
        assert env.execute("echo ok")["output"] == "ok\n"
        assert env.engine.inspect(env.container_id)["HostConfig"]["ShmSize"] == 64 << 20


def test_a_missing_image_takes_the_sdk_path_which_says_why(tmp_path):
    """``docker run --pull never`` of an image the engine lacks fails; the SDK path then says why in
    its own words (an ``ImagePullError`` under ``image_pull: never``), and neither a container of
    that name nor a cid file is left."""
    env = swe_sandbox.get_environment("docker", image="swe-sandbox-test/no-such-image:1", image_pull="never")
    with pytest.raises(swe_sandbox.errors.ImagePullError):
        env.execute("true")
    env.close()
    assert _containers_named(env.container_name) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"{CHANNEL_DIR_PREFIX}{os.getpid()}-*"))


def test_a_cli_run_that_fails_once_is_retried_through_the_sdk(monkeypatch):
    """The CLI's run fails (here: a bad flag), the SDK path creates the same sandbox and it works."""
    original = cli_run.docker_run_argv

    def broken(cli, spec, cidfile):
        argv, values = original(cli, spec, cidfile)
        return [*argv[:2], "--no-such-flag", *argv[2:]], values

    from swe_sandbox.environments.container import docker as docker_backend

    monkeypatch.setattr(docker_backend, "docker_run_argv", broken)
    with swe_sandbox.get_environment("docker") as env:
        assert env.execute("echo ok")["output"] == "ok\n"
        assert env.info["channel"] == "socket"
        assert len(_containers_named(env.container_name)) == 1


def test_a_cli_that_closes_its_output_before_it_exits_is_retried_through_the_sdk(monkeypatch):
    """A process's pipes close before its exit status exists: the end of file alone means the CLI
    gave up (CI once saw ``poll()`` still None there and reported a start error, not a retry)."""
    from swe_sandbox.environments.container import docker as docker_backend

    def lingering(cli, spec, cidfile):
        return ["bash", "-c", "exec >&- 2>&-; sleep 1; exit 125"], {}

    monkeypatch.setattr(docker_backend, "docker_run_argv", lingering)
    with swe_sandbox.get_environment("docker") as env:
        assert env.execute("echo ok")["output"] == "ok\n"
        assert env.info["channel"] == "socket"


def test_environment_values_stay_off_host_command_lines():
    secret = "s3cr3t-value-for-the-cli-test"
    with swe_sandbox.get_environment("docker", env={"MY_SECRET": secret}) as env:
        result = env.execute("echo $MY_SECRET; sleep 0.5 & ps >/dev/null; wait")
        assert result["output"].startswith(secret)
        lines = "\n".join(command_lines())
        assert "--env MY_SECRET" in lines  # the CLI that holds the attach names it ...
        assert secret not in lines  # ... but its value is in no command line


def command_lines() -> list[str]:
    """Every host process's command line (NULs as spaces)."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
        except OSError:
            pass  # gone meanwhile
    return lines


def _containers_named(name: str) -> list[str]:
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{name}$"], capture_output=True, text=True)
    return done.stdout.split()


def test_no_first_frame_in_time_is_a_start_error_not_a_second_container():
    """The CLI still waiting when ``start_timeout`` runs out: the sandbox was slow, not refused;
    it is a ``SandboxStartError`` at once (no SDK retry doubling the wait) and nothing is left."""
    env = swe_sandbox.get_environment("docker", start_timeout=0.05)
    with pytest.raises(swe_sandbox.errors.SandboxStartError, match="did not start"):
        env.execute("true")
    env.close()
    assert _containers_named(env.container_name) == []


def test_variables_that_would_change_the_cli_process_stay_out_of_its_environment():
    """The loader's variables (``LD_LIBRARY_PATH`` here; ``LD_PRELOAD`` alike) and ``GODEBUG`` reach the
    sandbox, but the ``docker`` CLI process runs with its own environment."""
    sandbox_env = {"LD_LIBRARY_PATH": "/nonexistent-lib", "GODEBUG": "http2debug=2", "PLAIN": "p"}
    with swe_sandbox.get_environment("docker", env=sandbox_env) as env:
        result = env.execute("echo $LD_LIBRARY_PATH $GODEBUG $PLAIN")
        assert result["output"] == "/nonexistent-lib http2debug=2 p\n", result
        cli = env._channel.proc  # the `docker run` process holding the attach
        environ = Path(f"/proc/{cli.pid}/environ").read_bytes().split(b"\0")
        assert b"PLAIN=p" in environ  # taken from the CLI's environment (--env PLAIN) ...
        assert not [item for item in environ if item.startswith((b"LD_LIBRARY_PATH=", b"GODEBUG="))]  # ... not these
