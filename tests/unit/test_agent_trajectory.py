"""Trajectories: mini-swe-agent's format and keys, saved atomically after every step, no secrets."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from swe_sandbox.agent import DefaultAgent, load_run_config
from swe_sandbox.errors import ConfigError
from swe_sandbox.files import atomic_write_text
from swe_sandbox.models.test_models import DeterministicModel
from swe_sandbox.trajectory import TRAJECTORY_FORMAT, load_trajectory, write_trajectory

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: Run inside the sandbox: parse the trajectory the agent is writing, print what it holds.
READ_TRAJECTORY = ("python3 -c \"import json; d = json.load(open('traj.json')); "
                   "print(len(d['messages']), d['trajectory_format'], d['info']['exit_status'] or '-')\"")


@pytest.fixture
def sandbox(workspace_env):
    """A fresh environment of the backend under test, working on ``tmp_path``."""
    return workspace_env


def agent_for(model, env, **config) -> DefaultAgent:
    return DefaultAgent(model, env, **{**load_run_config()["agent"], **config})


def test_trajectory_is_saved_after_every_step_and_always_valid(tmp_path):
    """Each command reads the trajectory file (on the host) while the agent runs: local backend,
    whose commands see the host's files (what is tested is the agent's writing, not a backend)."""
    import swe_sandbox

    out = tmp_path / "traj.json"
    model = DeterministicModel(outputs=[READ_TRAJECTORY, READ_TRAJECTORY, [READ_TRAJECTORY, READ_TRAJECTORY],
                                        f"{SUBMIT} && {READ_TRAJECTORY}"])
    with swe_sandbox.get_environment("local", cwd=str(tmp_path)) as sandbox:
        agent = agent_for(model, sandbox, output_path=out)
        status, submission = agent.run("t")
    assert status == "Submitted"
    seen = [m["content"].split("<output>\n")[1].split("\n")[0] for m in agent.messages if m["role"] == "tool"]
    # saved at the start (system + user), then after each step (+ assistant + tool messages)
    assert seen[:4] == [f"2 {TRAJECTORY_FORMAT} -", f"4 {TRAJECTORY_FORMAT} -",
                        f"6 {TRAJECTORY_FORMAT} -", f"6 {TRAJECTORY_FORMAT} -"]
    assert submission == f"9 {TRAJECTORY_FORMAT} -\n"
    final = json.loads(out.read_text())
    assert final["messages"] == json.loads(json.dumps(agent.messages))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".traj.json")] == []  # no temp files left


def test_trajectory_has_mini_swe_agent_keys(sandbox, tmp_path):
    out = tmp_path / "t.traj.json"
    model = DeterministicModel(outputs=["echo hi", f"{SUBMIT} && echo patch"], cost_per_call=0.25)
    agent_for(model, sandbox, output_path=out).run("the task")
    data = json.loads(out.read_text())
    assert set(data) == {"info", "messages", "trajectory_format"}
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    info = data["info"]
    assert {"exit_status", "submission", "model_stats", "config", "swe_sandbox_version"} <= set(info)
    assert info["exit_status"] == "Submitted" and info["submission"] == "patch\n"
    assert info["model_stats"] == {"instance_cost": 0.5, "api_calls": 2}
    config = info["config"]
    assert set(config) == {"agent", "agent_type", "model", "model_type", "environment", "environment_type"}
    assert config["agent_type"] == "swe_sandbox.agent.default.DefaultAgent"
    assert config["model_type"] == "swe_sandbox.models.test_models.DeterministicModel"
    assert config["environment_type"].startswith("swe_sandbox.environments.")
    assert config["agent"]["cost_limit"] == 3.0
    messages = data["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "exit"]
    assert messages[2]["extra"]["actions"] == [{"command": "echo hi", "tool_call_id": "call_1_0"}]
    assert messages[-1]["extra"]["exit_status"] == "Submitted"
    # lean: the raw output is not stored twice
    assert "raw_output" not in messages[3]["extra"] and "hi" in messages[3]["content"]


def test_secrets_never_reach_the_trajectory(make_env, backend, tmp_path, monkeypatch):
    secret = "sk-test-SECRET-1234567890"
    monkeypatch.setenv("DEMO_API_KEY", "env-secret-value-0987654321")
    env = make_env(env={"OPENAI_API_KEY": secret}, **({"cwd": str(tmp_path)} if backend == "local" else {}))
    out = tmp_path / "t.json"
    model = DeterministicModel(outputs=["echo $OPENAI_API_KEY", "echo env-secret-value-0987654321",
                                        f"{SUBMIT} && echo {secret}"])
    agent_for(model, env, output_path=out).run("t")
    text = out.read_text()
    assert secret not in text and "env-secret-value-0987654321" not in text
    assert "***" in text


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    atomic_write_text(path, '{"old": true}')

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, '{"new": true}')
    assert json.loads(path.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_readers_never_see_a_partial_trajectory(tmp_path):
    path = tmp_path / "t.json"
    big = {"messages": [{"role": "tool", "content": "x" * 200_000}] * 10, "info": {}}
    write_trajectory(path, big)
    stop = threading.Event()
    errors: list[str] = []

    def read_loop() -> None:
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except ValueError as exc:
                errors.append(str(exc))

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        for i in range(40):
            write_trajectory(path, {**big, "info": {"i": i}})
    finally:
        stop.set()
        reader.join()
    assert errors == []


def test_load_trajectory_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read trajectory"):
        load_trajectory(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"info": {}}')
    with pytest.raises(ConfigError, match="'messages' list"):
        load_trajectory(bad)
    listed = tmp_path / "list.json"
    listed.write_text('[{"role": "user", "content": "x"}]')
    assert load_trajectory(listed)["messages"] == [{"role": "user", "content": "x"}]


def test_default_config_loads_and_overrides(tmp_path):
    config = load_run_config(None, ["agent.step_limit=7", "model.model_kwargs.api_base=http://127.0.0.1:1/v1",
                                    "environment.timeout=5"])
    assert config["agent"]["step_limit"] == 7
    assert config["model"] == {"model_class": "litellm", "model_kwargs": {"api_base": "http://127.0.0.1:1/v1"}}
    assert config["environment"] == {"timeout": 5}
    small = tmp_path / "run.yaml"
    small.write_text("agent:\n  step_limit: 3\nmodel:\n  model_name: x\n")
    config = load_run_config(small)
    assert config["agent"]["step_limit"] == 3 and "COMPLETE_TASK" in config["agent"]["instance_template"]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("agents: {}\n")
    with pytest.raises(ConfigError, match="unknown section.*agents"):
        load_run_config(wrong)
    with pytest.raises(ConfigError, match="must start with one of"):
        load_run_config(None, ["step_limit=3"])


def test_shipped_default_config_is_package_data():
    from swe_sandbox.agent.config import default_config_path

    assert default_config_path().is_file()
    assert Path(default_config_path()).parent.name == "config"


# -- text UTF-8 cannot encode ----------------------------------------------------------------------
def test_lone_surrogates_are_written_as_valid_json(tmp_path):
    """A lone surrogate (a model may send "\\ud800" in its JSON) never breaks the writer."""
    path = tmp_path / "t.json"
    data = {"messages": [{"role": "assistant", "content": "bad \ud800 and \udcff, fine \u00e9 \U0001f600"}],
            "info": {"odd \udfff name": "x"}}
    write_trajectory(path, data)
    raw = path.read_bytes()
    text = raw.decode("utf-8")  # strict: valid UTF-8
    assert json.loads(text) == data  # read back to the same strings
    assert "\\ud800" in text and "\u00e9" in text  # escaped only where needed
    atomic_write_text(tmp_path / "s.txt", "sub \ud800 mission")
    assert (tmp_path / "s.txt").read_bytes() == b"sub ? mission"


def test_a_command_with_a_lone_surrogate_ends_the_run_with_a_status(sandbox, tmp_path):
    out = tmp_path / "traj.json"
    model = DeterministicModel(outputs=["echo a\ud800b", f"{SUBMIT} && echo done"])
    status, submission = agent_for(model, sandbox, output_path=out).run("t")
    data = json.loads(out.read_bytes().decode("utf-8"))
    assert data["info"]["exit_status"] == status != ""
    assert data["messages"][-1]["role"] == "exit"
    assert data["messages"][2]["extra"]["actions"][0]["command"] == "echo a\ud800b"
