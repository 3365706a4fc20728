"""mini-swe-agent's ``DefaultAgent``, from Python, on our environments, with mini's stock configs
(``mini.yaml``: JSON observations; ``default.yaml``: XML-ish ones): a failing command, a timeout
and a submission render as mini renders its own environments' results. And what mini never does:
close an environment (garbage collection must end it) or read the host's ``uname``.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import uuid

import pytest

from swe_sandbox.testing.kit import host_processes_with, unique_marker, wait_host_gone, wait_until

from helpers.mini import (
    IMAGE,
    MINI_CLASSES,
    SENTINEL,
    TEST_LABEL,
    backend_params,
    deterministic_outputs,
    environment_fields,
    quiet_mini,
    wait_no_containers,
)

quiet_mini()
import minisweagent.exceptions  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.environments import get_environment  # noqa: E402
from minisweagent.models.test_models import DeterministicModel  # noqa: E402

from swe_sandbox.errors import SandboxError  # noqa: E402

TIMEOUT_S = 2


def make(backend: str, tmp_path, **fields):
    """Our environment for ``backend``, built by mini's own ``get_environment`` from a config dict."""
    return get_environment({"environment_class": MINI_CLASSES[backend], **environment_fields(backend, tmp_path),
                            **fields})


@pytest.mark.parametrize("config_name", ["mini.yaml", "default.yaml"])
@pytest.mark.parametrize("backend", backend_params())
def test_default_agent_renders_our_results_with_mini_stock_templates(backend, config_name, tmp_path):
    config = get_config_from_spec(config_name)
    env = make(backend, tmp_path, **config["environment"], timeout=TIMEOUT_S)
    model = DeterministicModel(outputs=deterministic_outputs(
        "echo to-stdout; echo to-stderr >&2; exit 7", "sleep 30", f"echo {SENTINEL}; printf 'my answer\\n'",
    ), observation_template=config["model"]["observation_template"])
    agent = DefaultAgent(model, env, **config["agent"], output_path=tmp_path / "t.json")
    try:
        info = agent.run("Fail once, time out once, then submit.")
        assert info == {"exit_status": "Submitted", "submission": "my answer\n"}
        observations = [m["content"] for m in agent.messages if m["role"] == "user"][1:]
        assert len(observations) == 2
        if config_name == "mini.yaml":
            failed, timed_out = map(json.loads, observations)
            assert failed == {"returncode": 7, "output": "to-stdout\nto-stderr\n"}
            assert timed_out["returncode"] == -1
            assert timed_out["exception_info"] == f"Command timed out after {TIMEOUT_S} seconds"
        else:
            assert observations[0] == "<returncode>7</returncode>\n<output>\nto-stdout\nto-stderr\n</output>"
            assert observations[1].startswith(
                f"<exception>Command timed out after {TIMEOUT_S} seconds</exception>\n<returncode>-1</returncode>")
        assert agent.messages[-1] == {"role": "exit", "content": "my answer\n",
                                      "extra": {"exit_status": "Submitted", "submission": "my answer\n"}}
        saved = json.loads((tmp_path / "t.json").read_text())
        assert saved["info"]["exit_status"] == "Submitted"
        assert saved["info"]["config"]["environment_type"] == MINI_CLASSES[backend]
        # the instance template shows the sandbox's uname, as read inside the sandbox
        inside = {key: env.execute({"command": f"uname -{flag}"}, "/")["output"].strip()
                  for key, flag in (("system", "s"), ("node", "n"), ("release", "r"), ("version", "v"),
                                    ("machine", "m"))}
        assert {k: v for k, v in env.get_template_vars().items() if k in inside} == inside
        line = " ".join(inside[k] for k in ("system", "release", "version", "machine"))
        assert f"<system_information>\n{line}\n</system_information>" in agent.messages[1]["content"]
        if backend != "local" and backend != "ssh":
            assert inside["node"] == "swe-sandbox" != platform.node()
    finally:
        env.cleanup()


@pytest.mark.parametrize("backend", backend_params())
def test_the_sentinel_raises_mini_submitted(backend, tmp_path):
    env = make(backend, tmp_path)
    try:
        with pytest.raises(minisweagent.exceptions.Submitted) as caught:
            env.execute({"command": f"echo {SENTINEL}; printf 'a\\nb'"})
        assert caught.value.messages[0] == {"role": "exit", "content": "a\nb",
                                            "extra": {"exit_status": "Submitted", "submission": "a\nb"}}
        assert caught.value.result["returncode"] == 0
        assert env.execute({"command": f"echo {SENTINEL}; exit 1"})["returncode"] == 1  # a failure never submits
    finally:
        env.cleanup()
    with pytest.raises(SandboxError, match="closed"):
        env.execute({"command": "true"})


def gc_fields(backend: str, tmp_path, label: str) -> dict:
    """Fields with everything the backend makes on its own: bwrap and ssh a temporary workspace."""
    fields = environment_fields(backend, tmp_path)
    if backend in ("docker", "podman"):
        fields["labels"] = {TEST_LABEL: label}
    if backend in ("bwrap", "ssh"):
        fields.pop("workspace", None)
    return fields


@pytest.mark.parametrize("how", ["garbage-collected", "cleanup"])
@pytest.mark.parametrize("backend", backend_params())
def test_an_environment_nobody_closes_ends_when_garbage_collected(backend, how, tmp_path):
    label, marker = uuid.uuid4().hex, unique_marker()
    env = get_environment({"environment_class": MINI_CLASSES[backend], **gc_fields(backend, tmp_path, label)})
    assert env.execute({"command": f"sleep {marker} >/dev/null 2>&1 & echo started"})["output"] == "started\n"
    # polled: the job's fork may not have exec'd sleep yet when the command's result arrives
    assert wait_until(lambda: [p for p in host_processes_with(marker) if "swe_sandbox" not in p]), "the job runs"
    workspace = str(env.workspace) if backend in ("bwrap", "ssh") else None
    if workspace:
        assert os.path.isdir(workspace)  # ssh: the test server is this host
    if how == "cleanup":
        env.cleanup()
    del env
    gc.collect()
    assert [p for p in wait_host_gone(marker, grace=10) if "swe_sandbox" not in p] == []
    if workspace:
        assert not os.path.exists(workspace)
    if backend in ("docker", "podman"):
        assert wait_no_containers(backend, label) == []


@pytest.mark.parametrize("backend", backend_params(["docker", "podman"]))
def test_mini_docker_fields_work_on_containers(backend, tmp_path):
    """mini's ``swebench.yaml`` environment section (``interpreter: [bash, -c]``, ``BASH_ENV``) and
    mini's docker fields that have a meaning here, on a real container."""
    environment_fields(backend, tmp_path)
    config = get_config_from_spec("swebench.yaml")["environment"]
    config.pop("environment_class")
    env = get_environment({**config, "environment_class": MINI_CLASSES[backend], "image": IMAGE, "cwd": "/",
                           "executable": backend, "container_timeout": "2h", "run_args": ["--rm"]})
    try:
        assert env.config.cli == backend and env.config.max_lifetime == 7200
        result = env.execute({"command": "echo $BASH_ENV; pwd"})
        assert (result["returncode"], result["output"]) == (0, "/root/.bashrc\n/\n")
    finally:
        env.cleanup()
