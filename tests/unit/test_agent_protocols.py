"""What the agent accepts (``swe_sandbox.protocols``) and what every model shares
(``swe_sandbox.models.actions``): our models and backends satisfy the Protocols, and every model
answers a result with the same observation."""

from __future__ import annotations

import json

import pytest

from swe_sandbox.agent import Environment, Model
from swe_sandbox.environments import get_environment
from swe_sandbox.errors import FormatError
from swe_sandbox.models import MODELS, model_class
from swe_sandbox.models.actions import DEFAULT_OBSERVATION_TEMPLATE, tool_call
from swe_sandbox.models.test_models import DeterministicModel

RESULT = {"output": "a\nb\n", "returncode": 3, "exception_info": "",
          "extra": {"truncated": True, "dropped_bytes": 42, "timed_out": False}}


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "traj.json"
    message = {"role": "assistant", "content": "", "tool_calls": [tool_call("c1", "ls")]}
    path.write_text(json.dumps({"messages": [message], "info": {}}))
    return str(path)


def every_model(recording: str) -> list:
    configs = {"litellm": {"model_name": "openai/gpt-4o"}, "litellm_text": {"model_name": "openai/gpt-4o"},
               "deterministic": {}, "replay": {"trajectory": recording}}
    assert set(configs) == set(MODELS), "a new model: add it here"
    return [model_class(name)(**config) for name, config in configs.items()]


def test_every_model_is_a_model_and_a_backend_an_environment(recording, tmp_path):
    for model in every_model(recording):
        assert isinstance(model, Model), type(model)
    env = get_environment("local", cwd=str(tmp_path))
    try:
        assert isinstance(env, Environment)
    finally:
        env.close()
    assert not isinstance(object(), Model) and not isinstance(object(), Environment)


def test_every_model_renders_the_same_observation(recording):
    message = {"role": "assistant", "extra": {"actions": [{"command": "ls", "tool_call_id": "c1"}]}}
    contents = set()
    for model in every_model(recording):
        assert model.config.observation_template == DEFAULT_OBSERVATION_TEMPLATE
        [answer] = model.format_observation_messages(message, [RESULT], {})
        assert answer["role"] == "tool" and answer["tool_call_id"] == "c1"
        assert answer["extra"]["returncode"] == 3 and answer["extra"]["dropped_bytes"] == 42
        contents.add(answer["content"])
    [content] = contents
    assert content.startswith("<returncode>3</returncode>\n<output>\na\nb\n</output>\n<note>")
    assert "42 bytes" in content


def test_a_scripted_reply_is_parsed_like_a_provider_reply():
    bad = {"tool_calls": [tool_call("c1", "ls"), {**tool_call("c2", "pwd"), "id": ""}]}
    model = DeterministicModel(outputs=[bad])
    with pytest.raises(FormatError) as caught:
        model.query([])
    assert "tool call 2 (no id): it has no id" in caught.value.messages[0]["content"]
