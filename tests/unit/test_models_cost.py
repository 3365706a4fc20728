"""Cost tracking through litellm's price map, per-instance and process-wide counters and caps."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from swe_sandbox.errors import ConfigError, LimitsExceeded, ModelError
from swe_sandbox.models.litellm_model import LitellmModel, _litellm
from swe_sandbox.models.stats import GLOBAL_STATS, GlobalStats

from helpers.openai_server import ScriptedOpenAIServer, tool_call

TASK = [{"role": "user", "content": "task"}]
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}


@pytest.fixture
def server():
    with ScriptedOpenAIServer([tool_call("ls", usage=USAGE) for _ in range(5)]) as srv:
        yield srv


@pytest.fixture
def fresh_stats(monkeypatch):
    monkeypatch.delenv("SWE_SANDBOX_GLOBAL_COST_LIMIT", raising=False)
    monkeypatch.delenv("SWE_SANDBOX_GLOBAL_CALL_LIMIT", raising=False)
    GLOBAL_STATS.reset()
    yield GLOBAL_STATS
    GLOBAL_STATS.reset()


def test_unknown_price_fails_loudly_by_default(server):
    model = LitellmModel(model_name="openai/no-such-model-anywhere", model_kwargs=server.model_kwargs())
    with pytest.raises(ModelError) as info:
        model.query(TASK)
    message = str(info.value)
    assert "cannot compute the cost of model 'openai/no-such-model-anywhere'" in message
    assert "cost_tracking=ignore_errors" in message and "input_cost_per_token" in message
    assert model.n_calls == 1 and model.cost == 0


def test_unknown_price_counts_as_zero_with_ignore_errors(server):
    model = LitellmModel(model_name="openai/no-such-model-anywhere", model_kwargs=server.model_kwargs(),
                         cost_tracking="ignore_errors")
    assert model.query(TASK)["extra"]["cost"] == 0.0
    assert model.cost == 0.0 and model.n_calls == 1


def test_price_given_in_model_kwargs(server):
    kwargs = server.model_kwargs(input_cost_per_token=1e-6, output_cost_per_token=5e-6)
    model = LitellmModel(model_name="openai/my-local-model", model_kwargs=kwargs)
    message = model.query(TASK)
    assert message["extra"]["cost"] == pytest.approx(1000 * 1e-6 + 200 * 5e-6)
    model.query(TASK)
    assert model.cost == pytest.approx(2 * (1000 * 1e-6 + 200 * 5e-6)) and model.n_calls == 2
    assert set(server.requests[0]) == {"model", "messages", "tools"}  # prices are not sent


def test_price_registered_with_litellm(server):
    _litellm().register_model({"openai/swe-sandbox-registered": {
        "input_cost_per_token": 3e-6, "output_cost_per_token": 15e-6, "litellm_provider": "openai", "mode": "chat"}})
    model = LitellmModel(model_name="openai/swe-sandbox-registered", model_kwargs=server.model_kwargs())
    assert model.query(TASK)["extra"]["cost"] == pytest.approx(1000 * 3e-6 + 200 * 15e-6)


def test_price_from_litellms_own_map(server):
    prices = _litellm().model_cost["gpt-4o"]
    model = LitellmModel(model_name="openai/gpt-4o", model_kwargs=server.model_kwargs())
    expected = 1000 * prices["input_cost_per_token"] + 200 * prices["output_cost_per_token"]
    assert model.query(TASK)["extra"]["cost"] == pytest.approx(expected) and expected > 0


def test_zero_tokens_cost_zero_without_error():
    with ScriptedOpenAIServer([tool_call("ls", usage={"prompt_tokens": 0, "completion_tokens": 0,
                                                      "total_tokens": 0})]) as server:
        model = LitellmModel(model_name="openai/gpt-4o", model_kwargs=server.model_kwargs())
        assert model.query(TASK)["extra"]["cost"] == 0.0


def test_global_stats_add_up_across_instances(server, fresh_stats):
    kwargs = server.model_kwargs(input_cost_per_token=1e-6, output_cost_per_token=0)
    first, second = (LitellmModel(model_name="openai/m", model_kwargs=kwargs) for _ in range(2))
    first.query(TASK)
    second.query(TASK)
    assert fresh_stats.n_calls == 2 and fresh_stats.cost == pytest.approx(2e-3)
    assert first.n_calls == second.n_calls == 1


def test_global_call_limit(server, fresh_stats, monkeypatch):
    monkeypatch.setenv("SWE_SANDBOX_GLOBAL_CALL_LIMIT", "2")
    model = LitellmModel(model_name="openai/m", model_kwargs=server.model_kwargs(), cost_tracking="ignore_errors")
    model.query(TASK)
    model.query(TASK)
    with pytest.raises(LimitsExceeded) as info:
        model.query(TASK)
    assert len(server.requests) == 2  # the refused call sent nothing
    [message] = info.value.messages
    assert message["role"] == "exit" and message["extra"]["exit_status"] == "LimitsExceeded"
    assert "SWE_SANDBOX_GLOBAL_CALL_LIMIT=2" in message["content"]


def test_global_cost_limit(server, fresh_stats, monkeypatch):
    monkeypatch.setenv("SWE_SANDBOX_GLOBAL_COST_LIMIT", "0.0015")  # one call costs 0.001
    kwargs = server.model_kwargs(input_cost_per_token=1e-6, output_cost_per_token=0)
    model = LitellmModel(model_name="openai/m", model_kwargs=kwargs)
    model.query(TASK)
    model.query(TASK)  # 0.001 < 0.0015: allowed, and now 0.002 is spent
    with pytest.raises(LimitsExceeded, match="cost limit"):
        model.query(TASK)
    assert len(server.requests) == 2


def test_zero_means_no_limit_and_garbage_is_a_config_error(fresh_stats, monkeypatch):
    stats = GlobalStats()
    monkeypatch.setenv("SWE_SANDBOX_GLOBAL_CALL_LIMIT", "0")
    for _ in range(100):
        stats.start_call()
    monkeypatch.setenv("SWE_SANDBOX_GLOBAL_COST_LIMIT", "lots")
    with pytest.raises(ConfigError, match="SWE_SANDBOX_GLOBAL_COST_LIMIT"):
        stats.start_call()


def test_call_limit_is_exact_across_threads(monkeypatch):
    monkeypatch.setenv("SWE_SANDBOX_GLOBAL_CALL_LIMIT", "10")
    monkeypatch.delenv("SWE_SANDBOX_GLOBAL_COST_LIMIT", raising=False)
    stats, allowed, lock = GlobalStats(), [], threading.Lock()

    def worker():
        for _ in range(5):
            try:
                stats.start_call()
            except LimitsExceeded:
                continue
            with lock:
                allowed.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(allowed) == 10 and stats.n_calls == 10


@pytest.mark.parametrize("name, imported", [("litellm", True), ("deterministic", False)])
def test_warm_up_imports_the_model_sdk_in_a_thread(name, imported):
    """A batch warms its model class up while its sandboxes start: litellm's import happens in a
    daemon thread; a class without a ``warm_up`` hook imports no SDK."""
    code = ("import sys\nfrom swe_sandbox.models import warm_up\n"
            f"thread = warm_up({name!r})\nassert thread.daemon\nthread.join(60)\n"
            "print('litellm' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(imported)


def test_warm_up_of_an_unknown_class_leaves_the_error_to_its_first_use():
    from swe_sandbox.models import warm_up

    warm_up("no-such-model").join(10)  # no exception, no traceback in the thread
    with pytest.raises(ConfigError, match="model.model_class"):
        from swe_sandbox.models import model_class

        model_class("no-such-model")
