"""The agent: a thin mini-SWE-agent-style tool-calling loop on top of any backend.

    from swe_sandbox import get_environment
    from swe_sandbox.agent import DefaultAgent, load_run_config
    from swe_sandbox.models import get_model

    config = load_run_config()                       # config/default.yaml
    model = get_model({**config["model"], "model_name": "anthropic/claude-sonnet-4-5"})
    with get_environment("bwrap") as env:
        agent = DefaultAgent(model, env, **config["agent"], output_path="traj.json")
        exit_status, submission = agent.run("Fix the failing test")

``Environment`` and ``Model`` (``swe_sandbox.protocols``) say what ``DefaultAgent`` accepts.
Importing this package imports nothing else (names load on first use), so the command line's
``--help`` stays fast; no model SDK is imported until a model is built.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ActionRejected": "swe_sandbox.agent.default",
    "AgentConfig": "swe_sandbox.agent.default",
    "DefaultAgent": "swe_sandbox.agent.default",
    "Environment": "swe_sandbox.protocols",
    "Model": "swe_sandbox.protocols",
    "load_run_config": "swe_sandbox.agent.config",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
