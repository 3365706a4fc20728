"""Parsing of model replies into actions, format errors and observation messages.

Every reply goes through the real litellm client to the strict scripted server on loopback; a
history that comes back from a FormatError is sent again, so the server proves it stays valid.
"""

from __future__ import annotations

import json

import pytest

from swe_sandbox.errors import ConfigError, FormatError
from swe_sandbox.models import get_model
from swe_sandbox.models.actions import parse_bash_block, parse_tool_calls
from swe_sandbox.models.litellm_model import LitellmModel
from swe_sandbox.models.text_model import LitellmTextModel

from helpers.openai_server import ScriptedOpenAIServer, call, text, tool_call, tool_calls

TASK = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Do the task."}]


def make_model(server: ScriptedOpenAIServer, cls: type = LitellmModel, **config) -> LitellmModel:
    return cls(model_name="openai/scripted", model_kwargs=server.model_kwargs(), cost_tracking="ignore_errors",
               **config)


def format_error(server: ScriptedOpenAIServer, reply, cls: type = LitellmModel) -> FormatError:
    """Query once with ``reply`` scripted; return the FormatError, after checking its history is valid."""
    server.add(reply)
    model = make_model(server, cls)
    with pytest.raises(FormatError) as info:
        model.query(TASK)
    server.add(text("```bash\nls\n```") if cls is LitellmTextModel else tool_call("ls"))
    model.query(TASK + info.value.messages)  # the strict server rejects an invalid history (HTTP 400)
    assert server.log[-1].status == 200
    return info.value


@pytest.fixture
def server():
    with ScriptedOpenAIServer(require_tools=True) as srv:
        yield srv


@pytest.fixture
def text_server():
    with ScriptedOpenAIServer() as srv:
        yield srv


def test_good_tool_call_gives_one_action(server):
    server.add(tool_call("ls -la", id="call_a", content="Let me look."))
    message = make_model(server).query(TASK)
    assert message["role"] == "assistant" and message["content"] == "Let me look."
    assert message["extra"]["actions"] == [{"command": "ls -la", "tool_call_id": "call_a"}]
    assert message["tool_calls"] == [{"id": "call_a", "type": "function",
                                      "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}]
    assert {"cost", "timestamp", "finish_reason", "usage", "model", "response_id"} <= set(message["extra"])
    assert "response" not in message["extra"]  # the raw response is kept only with format errors
    json.dumps(message)


def test_several_tool_calls_in_one_turn(server):
    server.add(tool_calls(call("ls", id="c1"), call("pwd", id="c2"), call("echo 'é \\n'", id="c3")))
    message = make_model(server).query(TASK)
    assert message["extra"]["actions"] == [
        {"command": "ls", "tool_call_id": "c1"}, {"command": "pwd", "tool_call_id": "c2"},
        {"command": "echo 'é \\n'", "tool_call_id": "c3"}]


def test_request_carries_the_bash_tool_and_no_retry_fields(server):
    server.add(tool_call("ls"))
    make_model(server).query(TASK)
    body = server.requests[-1]
    assert [t["function"]["name"] for t in body["tools"]] == ["bash"]
    assert body["tools"][0]["function"]["parameters"]["required"] == ["command"]
    assert body["messages"] == TASK
    assert not {"num_retries", "max_retries"} & set(body)


def test_unknown_tool_is_a_format_error_answered_per_tool_call(server):
    err = format_error(server, tool_calls(call("ls", id="c1"), call("print(1)", name="python", id="c2")))
    assistant, *answers = err.messages
    assert assistant["role"] == "assistant" and [tc["id"] for tc in assistant["tool_calls"]] == ["c1", "c2"]
    assert [(m["role"], m["tool_call_id"]) for m in answers] == [("tool", "c1"), ("tool", "c2")]
    assert "unknown tool 'python'" in answers[0]["content"]
    assert assistant["extra"]["actions"] == []  # nothing of that turn executes
    json.dumps(err.messages)


def test_raw_response_is_kept_json_safe_with_a_format_error(server):
    err = format_error(server, tool_call(arguments="{not json", id="c1"))
    raw = err.messages[0]["extra"]["response"]
    assert raw["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{not json"
    assert "not valid JSON" in err.messages[0]["extra"]["format_error"]
    assert json.loads(json.dumps(raw)) == raw


@pytest.mark.parametrize("arguments, expected", [
    ("{not json", "not valid JSON"),
    ('{"cmd": "ls"}', 'no "command" field'),
    ('["ls"]', 'no "command" field'),
    ('{"command": 42}', "not a string"),
    ('{"command": null}', "not a string"),
])
def test_bad_arguments_are_format_errors(server, arguments, expected):
    err = format_error(server, tool_call(arguments=arguments, id="c1"))
    assert [m["role"] for m in err.messages] == ["assistant", "tool"]
    assert expected in err.messages[1]["content"]


def test_tool_call_without_id_is_dropped_from_history_and_answered_by_a_user_message(server):
    err = format_error(server, tool_calls(call("ls", id=""), content="thinking"))
    assistant, answer = err.messages
    assert "tool_calls" not in assistant and assistant["content"] == "thinking"
    assert answer["role"] == "user" and "has no id" in answer["content"]


def test_missing_id_mixed_with_good_call(server):
    err = format_error(server, tool_calls(call("ls", id="c1"), call("pwd", id="")))
    assert [tc["id"] for tc in err.messages[0]["tool_calls"]] == ["c1"]
    assert [m["role"] for m in err.messages[1:]] == ["tool", "user"]


def test_parser_rejects_none_and_duplicate_ids():
    """litellm invents an id when a provider sends none, so this case is checked on plain dicts."""
    good = {"id": "x", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    actions, problems = parse_tool_calls([{**good, "id": None}])
    assert actions == [] and "has no id" in problems[0]
    assert parse_tool_calls([good]) == ([{"command": "ls", "tool_call_id": "x"}], [])


def test_no_tool_call_is_a_format_error(server):
    err = format_error(server, text("I think we are done."))
    assert [m["role"] for m in err.messages] == ["assistant", "user"]
    assert err.messages[0]["content"] == "I think we are done."
    assert "no tool call" in err.messages[1]["content"]


def test_truncated_reply_is_called_truncated(server):
    err = format_error(server, tool_call(arguments='{"command": "cat <<EOF\\nlong', id="c1", finish_reason="length"))
    assert "truncated at the token limit" in err.messages[1]["content"]
    assert err.messages[0]["extra"]["finish_reason"] == "length"
    err = format_error(server, text("Let me write a long", finish_reason="length"))
    assert "truncated at the token limit" in err.messages[-1]["content"]


def test_format_error_template_is_configurable(server):
    server.add(text("no call"))
    model = make_model(server, format_error_template="BAD {{ error }} {{ truncated }}")
    with pytest.raises(FormatError) as info:
        model.query(TASK)
    assert info.value.messages[-1]["content"] == "BAD it contains no tool call False"


def test_bad_templates_and_retry_kwargs_are_config_errors():
    with pytest.raises(ConfigError, match="observation_template"):
        LitellmModel(model_name="x", observation_template="{% if %}")
    with pytest.raises(ConfigError, match="num_retries"):
        LitellmModel(model_name="x", model_kwargs={"num_retries": 3})
    with pytest.raises(ConfigError, match="unknown field"):
        LitellmModel(model_name="x", temprature=0)


# -- observations --------------------------------------------------------------------------------


def test_observations_answer_each_tool_call_and_keep_history_valid(server):
    server.add(tool_calls(call("ls", id="c1"), call("false", id="c2"), call("never", id="c3")))
    model = make_model(server)
    message = model.query(TASK)
    outputs = [
        {"output": "a\nb\n", "returncode": 0, "exception_info": "", "extra": {"truncated": False, "duration_s": 0.1}},
        {"output": "x" * 10, "returncode": 124, "exception_info": "timed out after 5 seconds",
         "extra": {"truncated": True, "dropped_bytes": 1234}},
    ]  # the third never ran
    observations = model.format_observation_messages(message, outputs, {"cwd": "/repo"})
    assert [(m["role"], m["tool_call_id"]) for m in observations] == [("tool", "c1"), ("tool", "c2"), ("tool", "c3")]
    assert "<returncode>0</returncode>" in observations[0]["content"] and "a\nb\n" in observations[0]["content"]
    assert "timed out after 5 seconds" in observations[1]["content"] and "1234 bytes" in observations[1]["content"]
    assert "not executed" in observations[2]["content"]
    assert observations[1]["extra"]["returncode"] == 124 and observations[1]["extra"]["dropped_bytes"] == 1234
    server.add(tool_call("ls"))
    model.query(TASK + [message, *observations])
    assert server.log[-1].status == 200
    assert all("extra" not in m for m in server.requests[-1]["messages"])  # our fields never leave


def test_observation_template_gets_result_and_template_vars(server):
    server.add(tool_call("ls", id="c1"))
    model = make_model(server, observation_template="{{ cwd }}|{{ output.returncode }}|{{ output.output }}")
    message = model.query(TASK)
    [obs] = model.format_observation_messages(message, [{"output": "hi", "returncode": 0}], {"cwd": "/w"})
    assert obs["content"] == "/w|0|hi"


def test_strict_template_names_an_unknown_variable(server):
    server.add(tool_call("ls", id="c1"))
    model = make_model(server, observation_template="{{ nope }}")
    message = model.query(TASK)
    with pytest.raises(ConfigError, match="model.observation_template.*nope"):
        model.format_observation_messages(message, [{"output": "", "returncode": 0}])


# -- text model ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fence", ["bash", "sh", "mswea_bash_command"])
def test_text_model_one_block(text_server, fence):
    text_server.add(text(f"I will list.\n```{fence}\nls -la\ncat <<'EOF'\n```x\nEOF\n```\nDone."))
    model = make_model(text_server, LitellmTextModel)
    message = model.query(TASK)
    assert message["extra"]["actions"] == [{"command": "ls -la\ncat <<'EOF'\n```x\nEOF", "tool_call_id": None}]
    assert "tool_calls" not in message and "tools" not in text_server.requests[-1]
    [obs] = model.format_observation_messages(message, [{"output": "x", "returncode": 0}])
    assert obs["role"] == "user" and "tool_call_id" not in obs


@pytest.mark.parametrize("content, expected", [
    ("no block at all", "no ```bash blocks"),
    ("```bash\nls\n```\nand\n```bash\npwd\n```", "2 ```bash blocks"),
    ("```python\nprint(1)\n```", "no ```bash blocks"),
    ("```bash\n\n```", "empty"),
])
def test_text_model_zero_or_several_blocks_are_format_errors(text_server, content, expected):
    err = format_error(text_server, text(content), LitellmTextModel)
    assert [m["role"] for m in err.messages] == ["assistant", "user"]
    assert expected in err.messages[1]["content"] and "```bash" in err.messages[1]["content"]


def test_text_model_truncated_reply(text_server):
    err = format_error(text_server, text("```bash\nfor i in", finish_reason="length"), LitellmTextModel)
    assert "truncated at the token limit" in err.messages[1]["content"]


def test_parse_bash_block_strips_one_trailing_newline_only():
    actions, problems = parse_bash_block("```bash\n  echo hi  \n\n```")
    assert actions == [{"command": "  echo hi  \n", "tool_call_id": None}] and problems == []


def test_registry_builds_both_models():
    assert type(get_model({"model_name": "openai/x"})) is LitellmModel
    assert type(get_model({"model_class": "litellm_text", "model_name": "openai/x"})) is LitellmTextModel
