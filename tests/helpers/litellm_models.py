"""A ``LitellmModel`` on the scripted OpenAI server with fast retries, for the model tests."""

from __future__ import annotations

from typing import Any

import pytest

from swe_sandbox.models.litellm_model import LitellmModel, _litellm

from helpers.openai_server import ScriptedOpenAIServer

TASK = [{"role": "user", "content": "task"}]
FAST = {"backoff_base_s": 0.05, "backoff_max_s": 0.2, "max_total_s": 20}


@pytest.fixture(autouse=True, scope="module")
def litellm_imported() -> None:
    """Import litellm (2-4 s) before any test measures time (import it into a test module to use it)."""
    _litellm()


def make_model(server: ScriptedOpenAIServer, **retry: Any) -> LitellmModel:
    """A model on ``server`` retrying fast (``FAST``, then ``retry``'s fields)."""
    return LitellmModel(model_name="openai/m", model_kwargs=server.model_kwargs(), cost_tracking="ignore_errors",
                        retry={**FAST, **retry})
