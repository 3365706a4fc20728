"""Secrets (API keys in model_kwargs, secret-looking environment variables) never reach a
trajectory, a template or an error message."""

from __future__ import annotations

import json
import logging

import pytest

from swe_sandbox.errors import FormatError, ModelError
from swe_sandbox.models.litellm_model import LitellmModel
from swe_sandbox.redact import MASK, env_secrets, find_secrets, redact

from helpers.openai_server import ScriptedOpenAIServer, error, text, tool_call

API_KEY = "sk-test-Zq8vW3nKp2Lr7Tx4"
ENV_SECRET = "ghp_envSecretValue0123456789"
TASK = [{"role": "user", "content": "task"}]


@pytest.fixture(autouse=True)
def env_secret(monkeypatch):
    monkeypatch.setenv("SWE_SANDBOX_TEST_TOKEN", ENV_SECRET)


def make_model(server: ScriptedOpenAIServer, **config) -> LitellmModel:
    kwargs = server.model_kwargs(api_key=API_KEY, extra_headers={"X-Org-Secret": "org-header-value-123"})
    return LitellmModel(model_name="openai/m", model_kwargs=kwargs, cost_tracking="ignore_errors", **config)


def assert_clean(obj) -> None:
    dump = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    for secret in (API_KEY, ENV_SECRET, "org-header-value-123"):
        assert secret not in dump


# -- redact() itself -------------------------------------------------------------------------------


def test_redact_by_key_and_by_value(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value-xyz")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("HOME_DIRECTORY", "/home/someone-long")
    obj = {
        "model_kwargs": {"api_key": "short", "temperature": 0, "max_tokens": 1000,
                         "headers": {"X-Custom": "custom-header-value"}, "vertex_credentials": "creds-json-blob"},
        "log": ["key short stays (too short to search)", "aws-secret-value-xyz in text", "pw hunter2hunter2!"],
        "region": "eu-central-1", "home": "/home/someone-long", "nested": ("custom-header-value",),
    }
    out = redact(obj)
    assert out["model_kwargs"] == {"api_key": MASK, "temperature": 0, "max_tokens": 1000,
                                   "headers": {"X-Custom": MASK}, "vertex_credentials": MASK}
    assert out["log"] == ["key short stays (too short to search)", f"{MASK} in text", f"pw {MASK}!"]
    assert out["region"] == "eu-central-1" and out["home"] == "/home/someone-long"
    assert out["nested"] == (MASK,)
    assert obj["model_kwargs"]["api_key"] == "short"  # a copy; the input is untouched


def test_redact_text_and_extra_secrets():
    assert redact(f"token={ENV_SECRET}.") == f"token={MASK}."
    assert redact("a passphrase-of-mine here", secrets=["passphrase-of-mine", "tiny"]) == f"a {MASK} here"
    assert redact(42) == 42 and redact(None) is None


def test_env_and_key_discovery(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    monkeypatch.setenv("SHORT_TOKEN", "abc")
    found = env_secrets()
    assert {"sk-openai-0123456789", ENV_SECRET} <= found and "abc" not in found
    found = find_secrets({"a": [{"Authorization": "Bearer abcdefghij"}], "b": "Bearer abcdefghij"})
    assert found == {"Bearer abcdefghij"}


# -- the model -----------------------------------------------------------------------------------


def test_serialize_and_template_vars_are_clean():
    with ScriptedOpenAIServer() as server:
        model = make_model(server)
    serialized = model.serialize()
    assert serialized["info"]["config"]["model"]["model_kwargs"]["api_key"] == MASK
    assert serialized["info"]["config"]["model_type"] == "swe_sandbox.models.litellm_model.LitellmModel"
    assert_clean(serialized)
    variables = model.get_template_vars(note=f"echo {ENV_SECRET}")
    assert variables["model_name"] == "openai/m" and variables["n_calls"] == 0
    assert_clean(variables)
    assert model.config.model_kwargs["api_key"] == API_KEY  # the live config keeps it, for the calls


def test_provider_error_echoing_the_key_is_redacted(caplog):
    reply = error(401, f"Incorrect API key provided: {API_KEY}. You can find your API key at ...")
    with ScriptedOpenAIServer([reply]) as server:
        with pytest.raises(ModelError) as info:
            make_model(server).query(TASK)
    assert server.log[0].headers["authorization"] == f"Bearer {API_KEY}"  # it was really used
    assert "AuthenticationError" in str(info.value) and "Incorrect API key provided: ***" in str(info.value)
    assert_clean(str(info.value))


def test_retry_log_lines_are_redacted(caplog):
    replies = [error(500, f"upstream said {ENV_SECRET} and {API_KEY}"), tool_call("ls")]
    with ScriptedOpenAIServer(replies) as server, caplog.at_level(logging.WARNING, "swe_sandbox.models"):
        make_model(server, retry={"backoff_base_s": 0.01}).query(TASK)
    assert "retry 1" in caplog.text
    assert_clean(caplog.text)


def test_trajectory_of_returned_messages_is_clean():
    """The model echoing secrets (in its text, in a broken reply) leaves none in what we keep."""
    leak = f"I found {ENV_SECRET} and {API_KEY}"
    replies = [tool_call("ls", content=leak, id="c1"), text(leak)]
    with ScriptedOpenAIServer(replies) as server:
        model = make_model(server)
        message = model.query(TASK)
        trajectory = [*TASK, message, *model.format_observation_messages(
            message, [{"output": f"env: {ENV_SECRET}\n", "returncode": 0}])]
        with pytest.raises(FormatError) as info:
            model.query(trajectory)
        trajectory += info.value.messages
    assert info.value.messages[0]["extra"]["response"]["choices"]  # raw response kept, masked
    assert message["content"] == "I found *** and ***"
    assert_clean(trajectory)
    assert_clean(model.serialize())


# -- credentials in URLs -----------------------------------------------------------------------------
URL_PASSWORD = "pw-SECRET-123456"
API_BASE = f"http://user:{URL_PASSWORD}@127.0.0.1:9/v1"


@pytest.mark.parametrize("text, expected", [
    (f"api_base={API_BASE}", "api_base=http://user:***@127.0.0.1:9/v1"),
    ("postgres://me:p@ss@db:5432/x", "postgres://me:***@db:5432/x"),
    ("https://h/a?api_key=abc&q=1&accessToken=zz#f", "https://h/a?api_key=***&q=1&accessToken=***#f"),
    ("https://s3/b?X-Amz-Credential=AKIA1&X-Amz-Signature=dead", "https://s3/b?X-Amz-Credential=***&X-Amz-Signature=***"),
    ("https://h/?keyword=python&monkey=1&page=2", "https://h/?keyword=python&monkey=1&page=2"),
    ("http://host:8080/path?x=1 and git@github.com:o/r.git", "http://host:8080/path?x=1 and git@github.com:o/r.git"),
    ("https://user@github.com/o/r", "https://user@github.com/o/r"),
])
def test_redact_masks_credentials_in_urls(text, expected):
    assert redact(text) == expected


def test_url_credentials_are_secrets_masked_everywhere():
    found = find_secrets({"model_kwargs": {"api_base": API_BASE}})
    assert found == {URL_PASSWORD}
    out = redact({"api_base": API_BASE, "log": [f"connect failed with password {URL_PASSWORD}"]})
    assert out == {"api_base": "http://user:***@127.0.0.1:9/v1", "log": [f"connect failed with password {MASK}"]}


def test_api_base_credentials_never_reach_serialize_templates_logs_or_errors(caplog, tmp_path):
    from swe_sandbox.trajectory import write_trajectory

    model = LitellmModel(model_name="openai/m", model_kwargs={"api_base": API_BASE, "api_key": API_KEY},
                         cost_tracking="ignore_errors", retry={"max_attempts": 2, "backoff_base_s": 0.01})
    assert model.serialize()["info"]["config"]["model"]["model_kwargs"]["api_base"] == \
        "http://user:***@127.0.0.1:9/v1"
    assert URL_PASSWORD not in json.dumps(model.serialize()) + json.dumps(model.get_template_vars(), default=str)
    with caplog.at_level(logging.WARNING, "swe_sandbox.models"), pytest.raises(ModelError) as info:
        model.query(TASK)  # port 9: connection refused, retried once, then a ModelError
    assert "retry 1" in caplog.text
    assert URL_PASSWORD not in caplog.text and URL_PASSWORD not in str(info.value)
    path = tmp_path / "t.json"
    write_trajectory(path, {"info": {"config": {"model": {"model_kwargs": {"api_base": API_BASE}}}},
                            "messages": [{"role": "user", "content": f"see {API_BASE} ({URL_PASSWORD})"}]})
    assert URL_PASSWORD not in path.read_text() and "http://user:***@127.0.0.1:9/v1" in path.read_text()
