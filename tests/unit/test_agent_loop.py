"""DefaultAgent's loop on real sandboxes (local and bwrap) with DeterministicModel.

Covers: the submission flow, several tool calls in one turn (the submitting one in the middle),
the limits (steps, cost, wall time, consecutive format errors), failures that stop the run
(ModelError, SandboxDied, Ctrl-C), the approve hook, and that every history the agent builds is
one a strict provider accepts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from swe_sandbox.agent import ActionRejected, DefaultAgent, load_run_config
from swe_sandbox.errors import ConfigError, ModelError
from swe_sandbox.models.test_models import DeterministicModel
from swe_sandbox.testing.kit import kill_server_when_running, read_in_sandbox, unique_marker

from helpers.openai_server import validate_request
from helpers.variants import variant_spec

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@pytest.fixture
def sandbox(workspace_env):
    """A fresh environment of the backend under test, working on ``tmp_path``."""
    return workspace_env


def make_agent(model: Any, env: Any, **config: Any) -> DefaultAgent:
    """An agent with the shipped default templates and ``config`` on top."""
    agent_config = {**load_run_config()["agent"], **config}
    return DefaultAgent(model, env, **agent_config)


def roles(agent: DefaultAgent) -> list[str]:
    return [m["role"] for m in agent.messages]


def assert_valid_for_provider(messages: list[dict[str, Any]]) -> None:
    """What a provider would get for the next query: provider fields only, no exit message."""
    sent = [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id")}
            for m in messages if m["role"] != "exit"]
    problem = validate_request({"model": "m", "messages": sent, "tools": [{"type": "function", "function": {
        "name": "bash", "parameters": {}}}]})
    assert problem is None, problem


# -- the normal flow ---------------------------------------------------------------------------
def test_submission_flow(sandbox, tmp_path):
    model = DeterministicModel(outputs=[
        "echo hello > greeting.txt",
        "cat greeting.txt",
        f"{SUBMIT} && cat greeting.txt",
    ])
    agent = make_agent(model, sandbox)
    status, submission = agent.run("Write a greeting")
    assert (status, submission) == ("Submitted", "hello\n")
    assert roles(agent) == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "exit"]
    assert "Write a greeting" in agent.messages[1]["content"]
    assert agent.messages[5]["content"].endswith("<output>\nhello\n</output>")
    assert agent.messages[-1]["extra"] == {"exit_status": "Submitted", "submission": "hello\n"}
    assert read_in_sandbox(sandbox, "greeting.txt") == "hello\n"
    assert_valid_for_provider(agent.messages)


def test_instance_template_knows_the_sandbox(sandbox, backend, tmp_path):
    agent = make_agent(DeterministicModel(outputs=[SUBMIT]), sandbox)
    agent.run("t")
    where = str(tmp_path) if variant_spec(backend)[0] in ("local", "ssh") else "/workspace"  # ssh: a remote dir
    assert f"started in `{where}`" in agent.messages[1]["content"]
    assert "killed after 30 seconds" in agent.messages[1]["content"]
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached" in agent.messages[1]["content"]


def test_submitting_call_in_the_middle_of_a_turn(sandbox):
    model = DeterministicModel(outputs=[
        ["echo first > first.txt", f"{SUBMIT} && cat first.txt", "touch never_run.txt"],
    ])
    agent = make_agent(model, sandbox)
    assert agent.run("t") == ("Submitted", "first\n")
    assert roles(agent) == ["system", "user", "assistant", "tool", "tool", "tool", "exit"]
    calls = [c["id"] for c in agent.messages[2]["tool_calls"]]
    answers = agent.messages[3:6]
    assert [m["tool_call_id"] for m in answers] == calls
    assert answers[0]["extra"]["returncode"] == 0
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nfirst\n" in answers[1]["content"]
    assert answers[2]["extra"]["not_run"] is True
    assert "Not run: an earlier command of this turn submitted" in answers[2]["content"]
    assert sandbox.execute({"command": "test -e never_run.txt"})["returncode"] == 1
    assert_valid_for_provider(agent.messages)


def test_failed_sentinel_command_does_not_submit(sandbox):
    model = DeterministicModel(outputs=[f"{SUBMIT} && false", f"{SUBMIT} && echo ok"])
    agent = make_agent(model, sandbox)
    assert agent.run("t") == ("Submitted", "ok\n")
    assert agent.n_steps == 2


# -- limits ------------------------------------------------------------------------------------
def test_step_limit(sandbox):
    agent = make_agent(DeterministicModel(outputs=["echo step"] * 10), sandbox, step_limit=3)
    assert agent.run("t") == ("LimitsExceeded", "")
    assert roles(agent).count("assistant") == 3
    assert "Step limit reached (3" in agent.messages[-1]["content"]
    assert_valid_for_provider(agent.messages)


def test_cost_limit_with_a_fake_cost(sandbox):
    model = DeterministicModel(outputs=["echo step"] * 10, cost_per_call=1.0)
    agent = make_agent(model, sandbox, cost_limit=2.5)
    assert agent.run("t") == ("LimitsExceeded", "")
    assert model.n_calls == 3 and model.cost == 3.0
    assert "Cost limit reached" in agent.messages[-1]["content"]
    assert agent.serialize()["info"]["model_stats"] == {"instance_cost": 3.0, "api_calls": 3}


def test_wall_time_limit_cuts_a_long_command(sandbox):
    agent = make_agent(DeterministicModel(outputs=["sleep 20", "echo never"]), sandbox, wall_time_limit_s=2)
    started = time.monotonic()
    assert agent.run("t") == ("TimeExceeded", "")
    assert time.monotonic() - started < 8
    observation = agent.messages[3]
    assert observation["role"] == "tool" and observation["extra"]["timed_out"] is True
    assert "Wall-time limit reached (2 seconds)" in agent.messages[-1]["content"]
    assert roles(agent).count("assistant") == 1


def test_repeated_format_errors(sandbox):
    no_tool = {"content": "I think I should look around."}
    agent = make_agent(DeterministicModel(outputs=[no_tool] * 5), sandbox, max_consecutive_format_errors=3)
    assert agent.run("t") == ("RepeatedFormatError", "")
    assert agent.n_steps == 3
    assert roles(agent) == ["system", "user", "user", "user", "user", "exit"]
    assert all("the reply has no tool call" in m["content"] for m in agent.messages[2:5])
    assert "3 times in a row" in agent.messages[-1]["content"]


def test_format_errors_that_are_not_consecutive_do_not_stop_the_run(sandbox):
    bad = {"content": "no tool", "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "python", "arguments": "{}"}}]}
    model = DeterministicModel(outputs=[bad, bad, "echo ok", bad, bad, f"{SUBMIT} && echo done"])
    agent = make_agent(model, sandbox, max_consecutive_format_errors=3)
    assert agent.run("t") == ("Submitted", "done\n")
    assert "unknown tool 'python'" in agent.messages[2]["content"]


# -- failures that stop the run ----------------------------------------------------------------
def test_model_error_ends_the_run_with_its_class_name(sandbox):
    agent = make_agent(DeterministicModel(outputs=["echo ok", ModelError("provider said no")]), sandbox)
    assert agent.run("t") == ("ModelError", "")
    exit_message = agent.messages[-1]
    assert exit_message["content"] == "provider said no"
    assert "Traceback" in exit_message["extra"]["traceback"]


def test_sandbox_death_mid_turn_answers_every_call(sandbox):
    # The in-sandbox runner is killed (from the host: no command can) during the 2nd command.
    marker = unique_marker()
    kill_server_when_running(marker)
    agent = make_agent(DeterministicModel(outputs=[["echo before", f"sleep {marker}", "echo after"]]), sandbox)
    assert agent.run("t") == ("SandboxDied", "")
    assert roles(agent) == ["system", "user", "assistant", "tool", "tool", "tool", "exit"]
    assert "did not finish: SandboxDied" in agent.messages[4]["content"]
    assert agent.messages[5]["extra"]["not_run"] is True
    assert_valid_for_provider(agent.messages)


def test_keyboard_interrupt_saves_the_trajectory_and_propagates(sandbox, tmp_path):
    out = tmp_path / "traj.json"
    agent = make_agent(DeterministicModel(outputs=["echo one", KeyboardInterrupt()]), sandbox, output_path=out)
    with pytest.raises(KeyboardInterrupt):
        agent.run("t")
    data = json.loads(out.read_text())
    assert data["info"]["exit_status"] == "KeyboardInterrupt"
    assert data["messages"][-1]["role"] == "exit"


class InterruptingEnv:
    """Wraps an environment; the ``n``-th execute raises KeyboardInterrupt (Ctrl-C mid-command)."""

    def __init__(self, env: Any, n: int):
        self.env, self.n, self.calls = env, n, 0

    def execute(self, action, cwd="", *, timeout=None):
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt
        return self.env.execute(action, cwd, timeout=timeout)

    def get_template_vars(self):
        return self.env.get_template_vars()

    def serialize(self):
        return self.env.serialize()


def test_keyboard_interrupt_mid_turn_still_answers_every_call(sandbox):
    agent = make_agent(DeterministicModel(outputs=[["echo a", "sleep 1", "echo c"]]), InterruptingEnv(sandbox, 2))
    with pytest.raises(KeyboardInterrupt):
        agent.run("t")
    assert roles(agent) == ["system", "user", "assistant", "tool", "tool", "tool", "exit"]
    assert agent.exit_status == "KeyboardInterrupt"
    assert_valid_for_provider(agent.messages)


# -- hooks and config --------------------------------------------------------------------------
def test_approve_hook_can_reject_and_edit(sandbox):
    class Reviewing(DefaultAgent):
        def approve(self, action):
            if "rm -rf" in action["command"]:
                raise ActionRejected("do not delete things")
            if action["command"] == "echo draft":
                return {**action, "command": "echo edited"}
            return action

    config = {**load_run_config()["agent"]}
    model = DeterministicModel(outputs=[["rm -rf /tmp/x", "echo draft"], f"{SUBMIT} && echo fine"])
    agent = Reviewing(model, sandbox, **config)
    assert agent.run("t") == ("Submitted", "fine\n")
    rejected, edited = agent.messages[3], agent.messages[4]
    assert rejected["extra"]["rejected"] is True
    assert "The user rejected this command: do not delete things" in rejected["content"]
    assert "It ran as:\necho edited\n]\nedited\n</output>" in edited["content"]
    assert edited["extra"]["edited_command"] == "echo edited"


def test_agent_config_is_strict():
    with pytest.raises(ConfigError, match="agent.step_limt: unknown field"):
        DefaultAgent(DeterministicModel(), None, system_template="s", instance_template="i", step_limt=3)


def test_unknown_template_variable_is_a_config_error(sandbox):
    agent = DefaultAgent(DeterministicModel(outputs=[SUBMIT]), sandbox, system_template="{{ nope }}",
                         instance_template="{{ task }}")
    with pytest.raises(ConfigError, match="nope"):
        agent.run("t")


def test_deterministic_model_config_is_strict():
    with pytest.raises(ConfigError, match="model.output: unknown field"):
        DeterministicModel(output=["ls"])


def test_deterministic_model_runs_out_with_a_clear_limit(sandbox):
    agent = make_agent(DeterministicModel(outputs=["echo only"]), sandbox)
    assert agent.run("t") == ("LimitsExceeded", "")
    assert agent.messages[-1]["content"] == "DeterministicModel: no reply left (all 1 used)"


def test_environment_that_cannot_start_ends_the_run(tmp_path):
    import swe_sandbox

    env = swe_sandbox.get_environment("local", python=str(tmp_path / "no-such-python"), start_timeout=5)
    try:
        agent = make_agent(DeterministicModel(outputs=[SUBMIT]), env, output_path=tmp_path / "t.json")
        status, _ = agent.run("t")
    finally:
        env.close()
    assert status == "SandboxStartError"
    assert json.loads(Path(tmp_path / "t.json").read_text())["info"]["exit_status"] == "SandboxStartError"
