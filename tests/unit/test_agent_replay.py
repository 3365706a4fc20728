"""ReplayModel: re-run recorded trajectories (ours, mini-swe-agent's tool-call and text formats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import swe_sandbox
from swe_sandbox.agent import DefaultAgent, load_run_config
from swe_sandbox.errors import ConfigError
from swe_sandbox.models import get_model
from swe_sandbox.models.replay import ReplayModel, recorded_turns
from swe_sandbox.models.test_models import DeterministicModel
from swe_sandbox.testing.kit import read_in_sandbox

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
SYSTEM = "You are a helpful assistant that can interact with a computer."
TASK = "Please solve this issue: add() in calc.py subtracts instead of adding."
TRY = "'import calc; print(calc.add(2, 3))'"


@pytest.fixture
def sandbox(workspace_env, tmp_path):
    """A fresh environment of the backend under test, working on ``tmp_path`` holding the buggy calc.py."""
    (tmp_path / "calc.py").write_text(BUGGY)
    return workspace_env


def replay(path: Path, env) -> DefaultAgent:
    agent = DefaultAgent(ReplayModel(trajectory=str(path)), env, **load_run_config()["agent"])
    agent.run(TASK)
    return agent


def tool_outputs(agent: DefaultAgent) -> list[str]:
    return [m["content"] for m in agent.messages if m["role"] == "tool"]


# -- mini-swe-agent trajectories, written as mini-swe-agent v2 / v1 write them ------------------
def mini_toolcall_trajectory() -> dict:
    """mini-swe-agent v2 with LitellmToolcallModel (``trajectory_format: mini-swe-agent-1.1``)."""
    def call(call_id: str, command: str) -> dict:
        return {"id": call_id, "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})}}

    def assistant(content, calls, cost, ts):
        return {"content": content, "role": "assistant", "tool_calls": calls, "function_call": None,
                "provider_specific_fields": {}, "extra": {
                    "actions": [{"command": json.loads(c["function"]["arguments"])["command"], "tool_call_id": c["id"]}
                                for c in calls],
                    "response": {"id": "chatcmpl-x", "object": "chat.completion", "usage": {"total_tokens": 1200}},
                    "cost": cost, "timestamp": ts}}

    def tool(call_id, returncode, output, ts):
        return {"role": "tool", "tool_call_id": call_id,
                "content": f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>",
                "extra": {"raw_output": output, "returncode": returncode, "timestamp": ts}}

    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py"
    return {
        "info": {
            "model_stats": {"instance_cost": 0.0117, "api_calls": 3},
            "config": {
                "agent": {"system_template": SYSTEM, "instance_template": "{{task}}", "step_limit": 250,
                          "cost_limit": 3.0, "output_path": None},
                "agent_type": "minisweagent.agents.default.DefaultAgent",
                "model": {"model_name": "anthropic/claude-sonnet-4-5-20250929", "model_kwargs": {"drop_params": True},
                          "cost_tracking": "default", "format_error_template": "{{ error }}",
                          "observation_template": "<returncode>{{output.returncode}}</returncode>..."},
                "model_type": "minisweagent.models.litellm_toolcall_model.LitellmToolcallModel",
                "environment": {"cwd": "", "env": {"PAGER": "cat"}, "timeout": 60},
                "environment_type": "minisweagent.environments.local.LocalEnvironment",
            },
            "mini_version": "2.0.0",
            "exit_status": "Submitted",
            "submission": FIXED,
        },
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
            assistant("Let me look at the code and try it.",
                      [call("toolu_01A", "cat calc.py"), call("toolu_01B", f"python3 -B -c {TRY}")],
                      0.0041, 1760000000.1),
            tool("toolu_01A", 0, BUGGY, 1760000001.2),
            tool("toolu_01B", 0, "-1\n", 1760000001.3),
            assistant(None, [call("toolu_02A", f"sed -i 's/a - b/a + b/' calc.py && python3 -B -c {TRY}")],
                      0.0038, 1760000005.0),
            tool("toolu_02A", 0, "5\n", 1760000005.4),
            assistant("Fixed; submitting.", [call("toolu_03A", submit)], 0.0038, 1760000009.0),
            tool("toolu_03A", 0, "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + FIXED, 1760000009.2),
            {"role": "exit", "content": FIXED, "extra": {"exit_status": "Submitted", "submission": FIXED}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }


def mini_text_trajectory(version: int) -> dict:
    """mini-swe-agent's text format: v2 (```mswea_bash_command) or v1 (```bash, ``mini-swe-agent-1``)."""
    fence = "mswea_bash_command" if version == 2 else "bash"

    def assistant(thought: str, *commands: str) -> dict:
        blocks = "\n\n".join(f"```{fence}\n{c}\n```" for c in commands)
        message = {"role": "assistant", "content": f"THOUGHT: {thought}\n\n{blocks}"}
        if version == 2:
            message["extra"] = {"actions": [{"command": c} for c in commands], "cost": 0.002, "timestamp": 1.0}
        return message

    def observation(returncode: int, output: str) -> dict:
        message = {"role": "user", "content": f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"}
        if version == 2:
            message["extra"] = {"raw_output": output, "returncode": returncode, "timestamp": 2.0}
        return message

    format_error = "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
        assistant("Let me look at the file.", "cat calc.py"),
        observation(0, BUGGY),
    ]
    if version == 1:  # v1 kept the malformed reply in the history, then the format error
        messages += [assistant("Fix and test at once.", "sed -i 's/a - b/a + b/' calc.py", "python3 -c 'import calc'"),
                     {"role": "user", "content": format_error}]
    else:  # v2 drops the malformed reply and keeps the format error message
        messages += [{"role": "user", "content": format_error,
                      "extra": {"interrupt_type": "FormatError", "n_actions": 2, "model_response": "..."}}]
    messages += [
        assistant("Replace the subtraction.", "sed -i 's/a - b/a + b/' calc.py"),
        observation(0, ""),
        assistant("Done, submitting.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py"),
    ]
    if version == 1:
        messages.append({"role": "user", "content": FIXED})
        return {"info": {"exit_status": "Submitted", "submission": FIXED,
                         "model_stats": {"instance_cost": 0.006, "api_calls": 4}, "mini_version": "1.9.0"},
                "messages": messages, "trajectory_format": "mini-swe-agent-1"}
    messages.append({"role": "exit", "content": FIXED, "extra": {"exit_status": "Submitted", "submission": FIXED}})
    return {"info": {"exit_status": "Submitted", "submission": FIXED, "mini_version": "2.0.0",
                     "model_stats": {"instance_cost": 0.006, "api_calls": 4}},
            "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}


def test_replays_a_mini_swe_agent_toolcall_trajectory(sandbox, tmp_path):
    path = tmp_path / "mini.traj.json"
    path.write_text(json.dumps(mini_toolcall_trajectory(), indent=2))
    agent = replay(path, sandbox)
    assert (agent.exit_status, agent.submission) == ("Submitted", FIXED)
    assert agent.n_steps == 3
    assert len(agent.messages[2]["tool_calls"]) == 2  # the parallel calls stay one turn
    assert [o.split("<output>\n")[1] for o in tool_outputs(agent)[:3]] == [BUGGY + "</output>", "-1\n</output>",
                                                                          "5\n</output>"]
    assert read_in_sandbox(sandbox, "calc.py") == FIXED


@pytest.mark.parametrize("version", [2, 1], ids=["text-v2", "text-v1"])
def test_replays_a_mini_swe_agent_text_trajectory(sandbox, tmp_path, version):
    path = tmp_path / "mini.traj.json"
    path.write_text(json.dumps(mini_text_trajectory(version)))
    agent = replay(path, sandbox)
    assert (agent.exit_status, agent.submission) == ("Submitted", FIXED)
    assert agent.n_steps == 3  # the malformed turn (two blocks) was skipped
    assert all(m["role"] == "tool" for m in agent.messages if m["role"] not in ("system", "user", "assistant", "exit"))


# -- our own trajectories, across backends -----------------------------------------------------
RECORDED = [
    "printf 'b\\na\\nc\\n' > letters.txt && sort letters.txt",
    ["echo $((6 * 7))", "wc -l < letters.txt", "cat missing.txt; echo rc=$?"],
    "sh -c 'echo to stderr >&2; exit 3'",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && sort -r letters.txt && cat calc.py",
]


@pytest.fixture(scope="module")
def recorded_on_local(tmp_path_factory) -> Path:
    """A trajectory of ours, recorded with DeterministicModel on the local backend."""
    work = tmp_path_factory.mktemp("record")
    (work / "calc.py").write_text(BUGGY)
    out = work / "ours.traj.json"
    with swe_sandbox.get_environment("local", cwd=str(work), timeout=30) as env:
        agent = DefaultAgent(DeterministicModel(outputs=RECORDED), env, **load_run_config()["agent"], output_path=out)
        assert agent.run(TASK)[0] == "Submitted"
    return out


def test_replays_our_trajectory_with_the_same_outputs(sandbox, recorded_on_local):
    recorded = json.loads(recorded_on_local.read_text())
    agent = replay(recorded_on_local, sandbox)
    assert agent.exit_status == "Submitted"
    assert agent.submission == recorded["info"]["submission"] == "c\nb\na\n" + BUGGY
    expected = [m["content"] for m in recorded["messages"] if m["role"] == "tool"]
    assert tool_outputs(agent) == expected
    assert "No such file or directory\nrc=1" in expected[3] and "<returncode>3</returncode>" in expected[4]


def test_replay_through_the_model_registry(sandbox, recorded_on_local):
    model = get_model({"model_class": "replay", "trajectory": str(recorded_on_local)})
    assert isinstance(model, ReplayModel)
    assert [len(commands) for _, commands in model.turns] == [1, 3, 1, 1]


def test_replay_that_runs_out_ends_with_a_clear_limit(sandbox, tmp_path):
    data = mini_toolcall_trajectory()
    data["messages"] = data["messages"][:7]  # the recording stopped before it submitted
    path = tmp_path / "short.traj.json"
    path.write_text(json.dumps(data))
    agent = replay(path, sandbox)
    assert agent.exit_status == "LimitsExceeded"
    assert agent.messages[-1]["content"] == "ReplayModel(short.traj.json): no reply left (all 2 used)"


def test_replay_of_a_trajectory_without_commands_is_a_config_error(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"messages": [{"role": "system", "content": "x"}], "info": {}}))
    with pytest.raises(ConfigError, match="no recorded command"):
        ReplayModel(trajectory=str(path))
    with pytest.raises(ConfigError, match="model.trajectry: unknown field"):
        ReplayModel(trajectry=str(path))


def test_recorded_turns_ignores_malformed_tool_calls():
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
                                                            "function": {"name": "bash", "arguments": "not json"}}]},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "```bash\nnot an action\n```"},
    ]
    assert recorded_turns(messages) == [("```bash\nls\n```", ["ls"])]
