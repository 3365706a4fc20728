"""What goes on the wire: the strict server itself, provider-only fields, cache-control markers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from swe_sandbox.errors import FormatError, ModelError
from swe_sandbox.models.litellm_model import LitellmModel, _litellm, add_cache_control

from helpers.openai_server import ScriptedOpenAIServer, call, text, tool_call, tool_calls

CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
USER = {"role": "user", "content": "task"}


def post(server: ScriptedOpenAIServer, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(server.url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


@pytest.fixture
def server():
    with ScriptedOpenAIServer(require_tools=True) as srv:
        yield srv


TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("messages, expected", [
    ([USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}], "did not have response messages: c1"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}, USER], "did not have response messages"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "c2"}]},
      {"role": "tool", "tool_call_id": "c1", "content": "x"}], "c2"),
    ([USER, {"role": "tool", "tool_call_id": "c9", "content": "x"}], "unknown tool_call_id 'c9'"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [CALL]},
      {"role": "tool", "tool_call_id": "c2", "content": "x"}], "unknown tool_call_id 'c2'"),
    ([{**USER, "extra": {"cost": 0}}], "'extra'"),
    ([{**USER, "cache_control": {"type": "ephemeral"}}], "'cache_control'"),
    ([{"role": "user", "content": [{"type": "text", "text": "x", "extra": 1}]}], "'extra'"),
    ([{"role": "robot", "content": "x"}], "role"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": None}]}], "id"),
    ([], "non-empty"),
])
def test_server_rejects_malformed_histories(server, messages, expected):
    server.add(tool_call("ls"))
    status, body = post(server, {"model": "m", "messages": messages, "tools": TOOLS})
    assert status == 400 and expected in body["error"]["message"], body
    assert body["error"]["type"] == "invalid_request_error"
    assert server.replies, "a rejected request consumes no reply"


def test_server_rejects_missing_tools_and_unknown_request_fields(server):
    server.add(tool_call("ls"))
    assert post(server, {"model": "m", "messages": [USER]})[0] == 400
    status, body = post(server, {"model": "m", "messages": [USER], "tools": TOOLS, "num_retries": 0})
    assert status == 400 and "num_retries" in body["error"]["message"]


def test_server_accepts_a_valid_history_with_cache_markers(server):
    server.add(tool_call("ls"))
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1",
                 "content": [{"type": "text", "text": "out", "cache_control": {"type": "ephemeral"}}]}]
    status, body = post(server, {"model": "m", "messages": messages, "tools": TOOLS})
    assert status == 200 and body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert server.requests[-1]["messages"] == messages


def test_raw_litellm_forwards_unknown_fields_so_the_server_check_matters(server):
    """litellm itself does not strip ``extra``: the model must."""
    server.add(tool_call("ls"))
    with pytest.raises(Exception, match="extra"):
        _litellm().completion(model="openai/m", messages=[{**USER, "extra": {"x": 1}}], tools=TOOLS,
                              num_retries=0, max_retries=0, **server.model_kwargs())


def test_model_never_sends_extra_or_other_local_fields(server):
    server.add(tool_calls(call("ls", id="a"), call("pwd", id="b")), tool_call("ls"))
    model = LitellmModel(model_name="openai/m", model_kwargs=server.model_kwargs(), cost_tracking="ignore_errors")
    history = [{"role": "system", "content": "s", "extra": {"note": 1}}, {**USER, "timestamp": 1.0}]
    message = model.query(history)
    history += [message, *model.format_observation_messages(message, [{"output": "o", "returncode": 0}] * 2)]
    model.query(history)
    sent = server.requests[-1]["messages"]
    assert [set(m) - {"role", "content", "name", "tool_calls", "tool_call_id"} for m in sent] == [set()] * len(sent)
    assert "extra" in history[2] and "extra" in history[3]  # the caller's history is not modified


def test_unusable_history_is_a_clear_model_error(server):
    model = LitellmModel(model_name="openai/m", model_kwargs=server.model_kwargs(), cost_tracking="ignore_errors")
    with pytest.raises(ModelError, match="BadRequestError.*did not have response messages"):
        model.query([USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}])
    assert len(server.requests) == 1


# -- cache control -------------------------------------------------------------------------------


def marked(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages)
            if isinstance(m.get("content"), list) and any("cache_control" in b for b in m["content"])]


def history() -> list[dict]:
    return [{"role": "system", "content": "sys"}, USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "c2"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"},
            {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c3"}]},
            {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": "three"}], "extra": {}}]


@pytest.mark.parametrize("name", ["anthropic/claude-sonnet-4-5", "claude-3-5-haiku", "bedrock/anthropic.claude-v2"])
def test_cache_markers_on_the_last_message_of_the_last_two_turns_for_anthropic(name):
    prepared = LitellmModel(model_name=name).prepare_messages(history())
    assert marked(prepared) == [4, 6]
    assert prepared[4]["content"] == [{"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}]
    assert prepared[6]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in m for m in prepared)  # markers live in content blocks only


@pytest.mark.parametrize("name, config", [
    ("openai/gpt-4o", {}), ("anthropic/claude-sonnet-4-5", {"set_cache_control": None})])
def test_no_cache_markers_otherwise(name, config):
    prepared = LitellmModel(model_name=name, **config).prepare_messages(history())
    assert marked(prepared) == []
    assert prepared[3]["content"] == "one"


def test_old_markers_are_moved_not_piled_up():
    messages = add_cache_control([dict(m) for m in history()])
    messages += [{"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c4"}]},
                 {"role": "tool", "tool_call_id": "c4", "content": "four"}]
    assert marked(LitellmModel(model_name="claude-x").prepare_messages(messages)) == [6, 8]


def test_cache_markers_reach_an_openai_compatible_claude_endpoint(server):
    """A claude model behind an OpenAI-compatible proxy gets the markers in the request body."""
    server.add(tool_call("ls", id="c1"), tool_call("ls"))
    model = LitellmModel(model_name="openai/claude-via-proxy", model_kwargs=server.model_kwargs(),
                         cost_tracking="ignore_errors")
    message = model.query([USER])
    model.query([USER, message, *model.format_observation_messages(message, [{"output": "x", "returncode": 0}])])
    assert [marked(body["messages"]) for body in server.requests] == [[0], [0, 2]]
    assert server.log[-1].status == 200


def test_no_markers_on_the_wire_for_other_models(server):
    server.add(text("hi"), tool_call("ls"))
    model = LitellmModel(model_name="openai/gpt-x", model_kwargs=server.model_kwargs(), cost_tracking="ignore_errors")
    with pytest.raises(FormatError) as info:
        model.query([USER])
    model.query([USER, *info.value.messages])
    assert [marked(body["messages"]) for body in server.requests] == [[], []]
