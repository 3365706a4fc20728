"""Models that need no provider: ``DeterministicModel`` (scripted replies, for tests) and the
tool-call helpers it shares with ``ReplayModel``.

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

BASH_TOOL_NAME = "bash"
#: How an observation is shown to the model (jinja2; ``output`` is the result dict of execute).
DEFAULT_OBSERVATION_TEMPLATE = (
    "{% if output.exception_info %}<exception>{{ output.exception_info }}</exception>\n{% endif %}"
    "<returncode>{{ output.returncode }}</returncode>\n<output>\n{{ output.output }}</output>"
)
DEFAULT_FORMAT_ERROR_TEMPLATE = (
    "Your reply could not be used: {{ error }}\n"
    "Call the bash tool with one command per tool call (arguments: {\"command\": \"...\"})."
)


# -- helpers shared by the scripted models -------------------------------------------------------
def render(template: str, **variables: Any) -> str:
    """Render a jinja2 template with ``StrictUndefined`` (an unknown variable is an error)."""
    from jinja2 import StrictUndefined, Template

    return Template(template, undefined=StrictUndefined, keep_trailing_newline=True).render(**variables)


def tool_call(call_id: str, command: str) -> dict[str, Any]:
    """One OpenAI-style ``bash`` tool call."""
    return {"id": call_id, "type": "function",
            "function": {"name": BASH_TOOL_NAME, "arguments": json.dumps({"command": command})}}


def toolcall_message(commands: list[str], ids: list[str], *, content: str = "", cost: float = 0.0,
                     **extra: Any) -> dict[str, Any]:
    """An assistant message calling ``bash`` once per command, with ``extra.actions`` filled in."""
    actions = [{"command": c, "tool_call_id": i} for c, i in zip(commands, ids)]
    return {"role": "assistant", "content": content,
            "tool_calls": [tool_call(i, c) for c, i in zip(commands, ids)],
            "extra": {"actions": actions, "cost": cost, "timestamp": time.time(), **extra}}


def actions_from_tool_calls(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{"command", "tool_call_id"}]`` from OpenAI-style tool calls.

    Raises:
        ValueError: an unknown tool, arguments that are not JSON, or no ``command`` argument.
    """
    actions = []
    for call in tool_calls:
        function = call.get("function") or {}
        if function.get("name") != BASH_TOOL_NAME:
            raise ValueError(f"unknown tool {function.get('name')!r} (the only tool is {BASH_TOOL_NAME!r})")
        arguments = function.get("arguments") or "{}"
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except ValueError as exc:
            raise ValueError(f"the arguments of tool call {call.get('id')} are not JSON: {exc}") from None
        if not isinstance(args, dict) or not isinstance(args.get("command"), str):
            raise ValueError(f"tool call {call.get('id')} has no 'command' string argument")
        actions.append({"command": args["command"], "tool_call_id": call.get("id")})
    return actions


def tool_observation_messages(message: dict[str, Any], outputs: list[dict[str, Any]], template: str,
                              template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One ``tool`` message per action of ``message``, rendering ``template`` with ``output``.

    ``extra`` stays lean: returncode, exception_info and the execute ``extra`` facts, not a second
    copy of the output.
    """
    actions = (message.get("extra") or {}).get("actions") or []
    variables = dict(template_vars or {})
    messages = []
    for action, output in zip(actions, outputs):
        variables["output"] = output
        extra = {"returncode": output.get("returncode"), "timestamp": time.time(), **(output.get("extra") or {})}
        if output.get("exception_info"):
            extra["exception_info"] = output["exception_info"]
        messages.append({"role": "tool", "tool_call_id": action.get("tool_call_id"),
                         "content": render(template, **variables), "extra": extra})
    return messages


def format_error(template: str, error: str, **extra: Any) -> FormatError:
    """A ``FormatError`` carrying the user message that tells the model what went wrong."""
    return FormatError({"role": "user", "content": render(template, error=error),
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
    cost_per_call: float = Field(0.0, ge=0)
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
        if "actions" not in extra:
            try:
                extra["actions"] = actions_from_tool_calls(message.get("tool_calls") or [])
            except ValueError as exc:
                raise format_error(self.config.format_error_template, str(exc), model_response=message) from None
        if not extra["actions"]:
            raise format_error(self.config.format_error_template, "the reply has no tool call",
                               model_response=message)
        extra.setdefault("cost", cost)
        extra.setdefault("timestamp", time.time())
        return message

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One ``tool`` message per action of ``message`` (see ``tool_observation_messages``)."""
        return tool_observation_messages(message, outputs, self.config.observation_template, template_vars)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config fields except the script itself, plus ``kwargs``."""
        return {**self.config.model_dump(exclude={"outputs"}), **kwargs}

    def serialize(self) -> dict[str, Any]:
        """mini-swe-agent's shape: ``{"info": {"config": {"model": ..., "model_type": ...}}}``."""
        kind = f"{type(self).__module__}.{type(self).__name__}"
        config = self.config.model_dump(mode="json", exclude={"outputs"})
        config["n_outputs"] = len(self.config.outputs)
        return {"info": {"config": {"model": config, "model_type": kind}}}
