"""One retry policy: Retry-After honoured, a total time cap, no retry of errors that cannot pass,
litellm's own retries off (the server counts the requests)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace

import pytest

from swe_sandbox.errors import ModelError
from swe_sandbox.models.litellm_model import LitellmModel
from swe_sandbox.models.retry import INTERRUPTED_MESSAGE, RetryConfig, call_with_retries, retry_after_s

from helpers.litellm_models import FAST, TASK, litellm_imported, make_model  # noqa: F401 - the fixture is autouse
from helpers.openai_server import ScriptedOpenAIServer, error, rate_limited, tool_call


def test_rate_limit_with_retry_after_waits_then_succeeds():
    with ScriptedOpenAIServer([rate_limited(retry_after=1), tool_call("ls")]) as server:
        start = time.monotonic()
        message = make_model(server).query(TASK)
        elapsed = time.monotonic() - start
    assert message["extra"]["actions"][0]["command"] == "ls"
    assert len(server.requests) == 2  # litellm / the openai SDK did not retry on their own
    gap = server.log[1].time - server.log[0].time
    assert gap >= 0.95 and elapsed >= 0.95, (gap, elapsed)
    assert elapsed < 5


def test_retry_after_beyond_the_total_cap_gives_up_at_once():
    with ScriptedOpenAIServer([rate_limited(retry_after=30), tool_call("ls")]) as server:
        start = time.monotonic()
        with pytest.raises(ModelError, match=r"RateLimitError.*asked to wait 30 s.*max_total_s=2"):
            make_model(server, max_total_s=2).query(TASK)
    assert time.monotonic() - start < 1.5 and len(server.requests) == 1


@pytest.mark.parametrize("status, name", [
    (401, "AuthenticationError (HTTP 401)"), (404, "NotFoundError (HTTP 404)"), (400, "BadRequestError (HTTP 400)"),
    (403, "APIError (HTTP 403)"),  # litellm maps an OpenAI-compatible 403 to a plain APIError
])
def test_errors_that_cannot_pass_are_not_retried(status, name):
    with ScriptedOpenAIServer([error(status, f"provider says no ({status})")] + [tool_call("ls")] * 3) as server:
        with pytest.raises(ModelError) as info:
            make_model(server).query(TASK)
    assert len(server.requests) == 1
    assert name in str(info.value) and f"provider says no ({status})" in str(info.value)
    assert "not retried" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained provider object


def test_context_window_exceeded_is_not_retried():
    reply = error(400, "This model's maximum context length is 8192 tokens. However, your messages "
                       "resulted in 9000 tokens.", code="context_length_exceeded")
    with ScriptedOpenAIServer([reply, tool_call("ls")]) as server:
        with pytest.raises(ModelError, match="ContextWindowExceededError"):
            make_model(server).query(TASK)
    assert len(server.requests) == 1


def test_server_errors_are_retried_until_the_total_cap():
    with ScriptedOpenAIServer([error(500, "boom")] * 200) as server:
        start = time.monotonic()
        with pytest.raises(ModelError, match=r"InternalServerError.*boom.*gave up after \d+ attempt"):
            make_model(server, max_total_s=1.0, max_attempts=1000).query(TASK)
        elapsed = time.monotonic() - start
    assert 3 <= len(server.requests) < 100
    assert 0.5 <= elapsed <= 1.6, elapsed


def test_server_errors_are_retried_up_to_max_attempts_then_succeed_or_stop():
    with ScriptedOpenAIServer([error(500), error(503), tool_call("ls")]) as server:
        assert make_model(server, max_attempts=3).query(TASK)["extra"]["actions"]
    assert len(server.requests) == 3
    with ScriptedOpenAIServer([error(500)] * 5) as server:
        with pytest.raises(ModelError, match="gave up after 2 attempt"):
            make_model(server, max_attempts=2).query(TASK)
    assert len(server.requests) == 2


def test_one_attempt_means_one_request():
    """With max_attempts=1 a 500 is sent once: litellm's num_retries and the SDK's max_retries are off."""
    with ScriptedOpenAIServer([error(500)] * 5) as server:
        with pytest.raises(ModelError):
            make_model(server, max_attempts=1).query(TASK)
    assert len(server.requests) == 1


def test_connection_refused_is_retried_then_a_model_error():
    with ScriptedOpenAIServer() as server:
        kwargs = server.model_kwargs()
    model = LitellmModel(model_name="openai/m", model_kwargs=kwargs, retry={**FAST, "max_attempts": 2})
    with pytest.raises(ModelError, match="gave up after 2 attempt"):
        model.query(TASK)


def test_keyboard_interrupt_is_never_retried_or_swallowed():
    calls = []

    def interrupted():
        calls.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        call_with_retries(interrupted, RetryConfig(**FAST))
    assert calls == [1]


def test_a_bug_is_not_retried_nor_disguised():
    calls = []

    def buggy():
        calls.append(1)
        raise TypeError("bug")

    with pytest.raises(TypeError):
        call_with_retries(buggy, RetryConfig(**FAST))
    assert calls == [1]


def headers_error(**headers) -> SimpleNamespace:
    return SimpleNamespace(litellm_response_headers=headers)


def test_retry_after_forms():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert retry_after_s(headers_error(**{"Retry-After": "3"})) == 3
    assert retry_after_s(headers_error(**{"retry-after": "0.5"})) == 0.5
    assert retry_after_s(headers_error(**{"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    date = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after_s(headers_error(**{"Retry-After": date}), now=now) == 7
    assert retry_after_s(headers_error(**{"Retry-After": "garbage"})) is None
    assert retry_after_s(headers_error()) is None
    assert retry_after_s(SimpleNamespace(response=SimpleNamespace(headers={"retry-after": "2"}))) == 2


def test_retry_after_as_http_date_through_the_server():
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    with ScriptedOpenAIServer([rate_limited(retry_after=when), tool_call("ls")]) as server:
        make_model(server).query(TASK)
    assert len(server.requests) == 2
    assert server.log[1].time - server.log[0].time >= 0.9  # whole seconds in the date: 1..2 s


# -- missing or wrong credentials ----------------------------------------------------------------
MISSING_KEY = ("Missing credentials. Please pass an `api_key`, `workload_identity`, `admin_api_key`, or set the "
               "`OPENAI_API_KEY` or `OPENAI_ADMIN_KEY` environment variable.")


@pytest.mark.parametrize("message", [
    MISSING_KEY,
    "The api_key client option must be set either by passing api_key to the client or by setting the "
    "OPENAI_API_KEY environment variable",
    "No API key provided.",
])
def test_a_500_about_missing_credentials_is_not_retried(message):
    """litellm reports a missing key as InternalServerError (HTTP 500): one request, then a clear error."""
    with ScriptedOpenAIServer([error(500, message)] + [tool_call("ls")] * 3) as server:
        start = time.monotonic()
        with pytest.raises(ModelError) as info:
            make_model(server, max_total_s=60).query(TASK)
    assert len(server.requests) == 1 and time.monotonic() - start < 5
    assert "(HTTP 500)" in str(info.value)  # InternalServerError, or litellm's own AuthenticationError
    assert "not retried: the credentials are missing or wrong" in str(info.value)


def test_a_rate_limit_or_an_ordinary_500_is_still_retried():
    replies = [error(429, "Rate limit reached for api key org-123 in requests per min"),
               error(500, "The server had an error while processing your request"), tool_call("ls")]
    with ScriptedOpenAIServer(replies) as server:
        make_model(server).query(TASK)
    assert len(server.requests) == 3


def test_litellm_without_an_api_key_fails_at_once(monkeypatch):
    """No key at all: litellm fails before sending anything, and that is not retried either."""
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with ScriptedOpenAIServer([tool_call("ls")] * 3) as server:
        model = LitellmModel(model_name="openai/m", model_kwargs={"api_base": server.url + "/v1"},
                             cost_tracking="ignore_errors", retry={**FAST, "max_total_s": 60})
        start = time.monotonic()
        with pytest.raises(ModelError, match="credentials are missing or wrong") as info:
            model.query(TASK)
    assert time.monotonic() - start < 5 and len(server.requests) == 0
    assert "Missing credentials" in str(info.value) and "OPENAI_API_KEY" in str(info.value)


def test_the_default_total_retry_cap_is_two_minutes():
    assert RetryConfig().max_total_s == 120


def test_interrupt_ends_a_wait_between_retries_at_once():
    """A batch's Ctrl-C calls ``interrupt`` from another thread: a model sitting out a provider's
    Retry-After stops at once with a ModelError, and no further request is made."""
    with ScriptedOpenAIServer([rate_limited(retry_after=30), tool_call("ls")]) as server:
        model = make_model(server, max_total_s=60)
        threading.Timer(0.5, model.interrupt).start()
        start = time.monotonic()
        with pytest.raises(ModelError, match=INTERRUPTED_MESSAGE):
            model.query(TASK)
        elapsed = time.monotonic() - start
        with pytest.raises(ModelError, match=INTERRUPTED_MESSAGE):  # stays interrupted, no request
            model.query(TASK)
    assert 0.4 < elapsed < 5, elapsed
    assert len(server.requests) == 1
