"""Models: what the agent queries. A lazy name -> class registry; no model SDK is imported early.

The contract between the agent and a model (mini-swe-agent's message shape):

``Model.query(messages) -> dict`` returns one assistant message, ready to append to the history::

    {"role": "assistant", "content": str | None, "tool_calls": [...] (tool-calling models only),
     "extra": {"actions": [{"command": str, "tool_call_id": str | None}, ...],
               "cost": float, "timestamp": float, ...}}

``extra`` is ours: it is stripped before messages are sent to a provider and kept in the
trajectory. A reply the model got wrong (no/several commands, unknown tool, bad JSON arguments,
a truncated reply) raises ``FormatError`` carrying the messages to append so the model sees what
went wrong; nothing of that turn is executed.

``Model.format_observation_messages(message, outputs, template_vars) -> list[dict]`` turns the
result dicts of the executed actions (one per action, in order) into the messages that answer
them: ``{"role": "tool", "tool_call_id": ..., "content": ...}`` per tool call for tool-calling
models, one ``{"role": "user", ...}`` message for text models.

``await Model.aquery(messages)``, where a model has it (``litellm``, ``litellm_text``), is ``query``
awaited on the running event loop (``litellm.acompletion``): ``swe_sandbox.batch.arollout`` routes
the agent's calls through it; a model without it (the scripted ones) is queried with ``query``.

Models also expose ``cost`` (float, USD), ``n_calls`` (int), ``get_template_vars()`` and
``serialize()`` like environments do. ``swe_sandbox.protocols.Model`` states this contract as a
type; ``swe_sandbox.models.actions`` holds what every model shares (the ``bash`` tool, the reply
parsers, the observation rendering).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

MODELS: dict[str, str] = {
    "litellm": "swe_sandbox.models.litellm_model:LitellmModel",
    "litellm_text": "swe_sandbox.models.text_model:LitellmTextModel",
    "deterministic": "swe_sandbox.models.test_models:DeterministicModel",
    "replay": "swe_sandbox.models.replay:ReplayModel",
}


def model_class(name: str) -> type:
    """Import and return the model class registered as ``name``.

    Raises:
        ConfigError: unknown model class name (the message lists the known ones).
    """
    from swe_sandbox.errors import ConfigError

    target = MODELS.get(name)
    if target is None:
        raise ConfigError(f"model.model_class: unknown {name!r} (known: {', '.join(MODELS)})")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def warm_up(name: str) -> threading.Thread:
    """Import, in a daemon thread, what the first query of model class ``name`` will need.

    A batch calls this before it starts its sandboxes, so the model SDK's import (litellm: about
    2.5 s of CPU here) overlaps their start instead of delaying every first step. A class opts in
    with a ``warm_up()`` classmethod; errors are left for the first query to raise.

    Returns:
        threading.Thread: the started thread (joining it is optional).
    """

    def run() -> None:
        try:
            hook = getattr(model_class(name), "warm_up", None)
            if hook is not None:
                hook()
        except Exception:  # noqa: BLE001 - the first query reports it with its context
            pass

    thread = threading.Thread(target=run, name=f"warm-up-{name}", daemon=True)
    thread.start()
    return thread


def get_model(config: dict[str, Any]):
    """Build a model from a config dict (``model_class`` picks the class; default ``litellm``)."""
    config = dict(config)
    cls = model_class(config.pop("model_class", "litellm"))
    return cls(**config)
