"""Models that need no provider: ``DeterministicModel`` (scripted replies, for tests) and the
scripted-reply helpers it shares with ``ReplayModel`` (the tool, the parser and the observation
rendering are ``swe_sandbox.models.actions``'s, as for every model).

Both produce tool-calling assistant messages (the shape of ``swe_sandbox.models``)::

    {"role": "assistant", "content": str,
     "tool_calls": [{"id": "call_...", "type": "function",
                     "function": {"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}}],
     "extra": {"actions": [{"command": "ls", "tool_call_id": "call_..."}], "cost": float, "timestamp": float}}

and answer each tool call with one ``{"role": "tool", "tool_call_id": ..., "content": ...}`` message.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swe_sandbox.errors import FormatError, LimitsExceeded
from swe_sandbox.models.actions import (
    DEFAULT_OBSERVATION_TEMPLATE,
    format_observation_messages,
    parse_tool_calls,
    tool_call,
)
from swe_sandbox.templates import render_template

DEFAULT_FORMAT_ERROR_TEMPLATE = (
    "Your reply could not be used: {{ error }}\n"
    "Call the bash tool with one command per tool call (arguments: {\"command\": \"...\"})."
)


# -- helpers shared by the scripted models -------------------------------------------------------
def toolcall_message(commands: list[str], ids: list[str], *, content: str = "", cost: float = 0.0,
                     **extra: Any) -> dict[str, Any]:
    """An assistant message calling ``bash`` once per command, with ``extra.actions`` filled in."""
    actions = [{"command": c, "tool_call_id": i} for c, i in zip(commands, ids, strict=True)]
    return {"role": "assistant", "content": content,
            "tool_calls": [tool_call(i, c) for c, i in zip(commands, ids, strict=True)],
            "extra": {"actions": actions, "cost": cost, "timestamp": time.time(), **extra}}


def format_error(template: str, error: str, **extra: Any) -> FormatError:
    """A ``FormatError`` carrying the user message that tells the model what went wrong."""
    content = render_template(template, {"error": error}, where="model.format_error_template")
    return FormatError({"role": "user", "content": content,
                        "extra": {"interrupt_type": "FormatError", **extra}})


def out_of_replies(source: str, used: int) -> LimitsExceeded:
    """``LimitsExceeded`` ending the run because a scripted model has nothing left to say."""
    text = f"{source}: no reply left (all {used} used)"
    return LimitsExceeded({"role": "exit", "content": text,
                           "extra": {"exit_status": "LimitsExceeded", "submission": "", "reason": text}})


# -- DeterministicModel --------------------------------------------------------------------------
class DeterministicModelConfig(BaseModel):
    """Config of ``DeterministicModel``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    outputs: list[Any] = Field(default_factory=list)
    """Scripted replies, in order. Each is a command string (one tool call), a list of command
    strings (several tool calls in one turn), an assistant message dict (``tool_calls`` and/or
    ``extra.actions``; none of them: a format error), or an exception instance (raised)."""
    model_name: str = "deterministic"
    """Name shown in trajectories."""
    cost_per_call: float = Field(default=0.0, ge=0)
    """Fake cost in USD added per reply (to test cost limits)."""
    observation_template: str = DEFAULT_OBSERVATION_TEMPLATE
    """jinja2 template of a tool message's content; ``output`` is the result dict."""
    format_error_template: str = DEFAULT_FORMAT_ERROR_TEMPLATE
    """jinja2 template of the message sent back on a malformed reply; ``error`` says what is wrong."""


class DeterministicModel:
    """Replies from a script, shaped exactly like a tool-calling provider's replies.

    Tool-call ids are ``call_<reply number>_<index>`` (deterministic). When the script is used up,
    ``query`` raises ``LimitsExceeded`` (exit status ``LimitsExceeded``).

    Args:
        **config: fields of ``DeterministicModelConfig`` (``outputs``, ``cost_per_call``, ...).

    Raises:
        ConfigError: an unknown or invalid field (named in the message).
    """

    def __init__(self, **config: Any):
        from swe_sandbox.config import validate

        self.config: DeterministicModelConfig = validate(DeterministicModelConfig, config, section="model")
        self.cost = 0.0
        self.n_calls = 0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """Return the next scripted reply as an assistant message.

        Raises:
            FormatError: the scripted reply has no usable tool call.
            LimitsExceeded: the script is used up.
            Exception: a scripted exception instance.
        """
        if self.n_calls >= len(self.config.outputs):
            raise out_of_replies("DeterministicModel", self.n_calls)
        output = self.config.outputs[self.n_calls]
        self.n_calls += 1
        self.cost += self.config.cost_per_call
        if isinstance(output, BaseException):
            raise output
        return self._message(output)

    def _message(self, output: Any) -> dict[str, Any]:
        cost = self.config.cost_per_call
        if isinstance(output, str):
            output = [output]
        if isinstance(output, list):
            ids = [f"call_{self.n_calls}_{i}" for i in range(len(output))]
            return toolcall_message([str(c) for c in output], ids, cost=cost)
        if not isinstance(output, dict):
            raise TypeError(f"DeterministicModel: cannot use scripted output {output!r}")
        message = {"role": "assistant", **json.loads(json.dumps(output))}
        extra = message.setdefault("extra", {})
        if "actions" not in extra and message.get("tool_calls"):
            actions, problems = parse_tool_calls(message["tool_calls"])
            if problems:
                raise format_error(self.config.format_error_template, "; ".join(problems), model_response=message)
            extra["actions"] = actions
        if not extra.setdefault("actions", []):
            raise format_error(self.config.format_error_template, "the reply has no tool call",
                               model_response=message)
        extra.setdefault("cost", cost)
        extra.setdefault("timestamp", time.time())
        return message

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One ``tool`` message per action of ``message`` (see ``actions.format_observation_messages``)."""
        return format_observation_messages(message, outputs, self.config.observation_template, template_vars)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config fields except the script itself, plus ``kwargs``."""
        return {**self.config.model_dump(exclude={"outputs"}), **kwargs}

    def serialize(self) -> dict[str, Any]:
        """mini-swe-agent's shape: ``{"info": {"config": {"model": ..., "model_type": ...}}}``."""
        kind = f"{type(self).__module__}.{type(self).__name__}"
        config = self.config.model_dump(mode="json", exclude={"outputs"})
        config["n_outputs"] = len(self.config.outputs)
        return {"info": {"config": {"model": config, "model_type": kind}}}
