"""Model ``litellm``: any provider litellm speaks, tool calling with one ``bash`` tool.

    model = LitellmModel(model_name="anthropic/claude-sonnet-4-5", model_kwargs={"temperature": 0})
    message = model.query(history)              # may raise FormatError / ModelError / LimitsExceeded
    message = await model.aquery(history)       # the same through litellm.acompletion, on the running loop
    history.append(message)
    outputs = [env.execute(a) for a in message["extra"]["actions"]]
    history += model.format_observation_messages(message, outputs, template_vars)

Message shapes (see ``swe_sandbox.models``): ``query`` returns ``{"role": "assistant", "content":
str | None, "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}],
"extra": {"actions": [{"command", "tool_call_id"}], "cost", "timestamp", "finish_reason", "model",
"response_id", "usage"}}``. Only the provider fields of each message (role, content, name,
tool_calls, tool_call_id) are sent; ``extra`` and anything else stays in the trajectory.

A reply that cannot be executed raises ``FormatError`` whose messages are the assistant message
(its tool calls without a usable id left out, the raw response in ``extra.response``), a ``tool``
message answering each remaining tool call with the error, and a ``user`` message with the error
when no tool call could be answered. Nothing of that turn is executed.

litellm is imported on first use only, with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless set
(prices from the installed litellm: no network fetch at import, the same costs on every run).
"""

from __future__ import annotations

import copy
import json
import os
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swe_sandbox.config import validate
from swe_sandbox.errors import FormatError, ModelError
from swe_sandbox.models.actions import (
    BASH_TOOL,
    DEFAULT_OBSERVATION_TEMPLATE,
    format_error_text,
    format_observation_messages,
    parse_tool_calls,
)
from swe_sandbox.models.retry import Interruption, RetryConfig, acall_with_retries, call_with_retries
from swe_sandbox.models.stats import GLOBAL_STATS
from swe_sandbox.redact import find_secrets, redact
from swe_sandbox.templates import check_template, render_template

#: Message fields a provider gets; everything else (``extra``...) stays local.
PROVIDER_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
CACHE_CONTROL = {"type": "ephemeral"}

DEFAULT_FORMAT_ERROR_TEMPLATE = """\
Your last reply could not be executed: {{ error }}.
Nothing of it was run. Reply with one or more calls of the `bash` tool, each with the JSON \
arguments {"command": "<shell command>"}{% if truncated %}, and keep the reply shorter{% endif %}."""


class LitellmModelConfig(BaseModel):
    """Config of the ``litellm`` model (the ``model:`` section of an agent config)."""

    model_config = ConfigDict(extra="forbid")

    model_name: str
    """litellm model name, provider prefix included (``anthropic/claude-sonnet-4-5``, ``openai/gpt-4o``)."""
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Passed to ``litellm.completion`` (``api_base``, ``api_key``, ``temperature``, ``timeout``,
    ``input_cost_per_token``/``output_cost_per_token`` for a price litellm does not know...).
    Retries are ``retry``'s job: ``num_retries``/``max_retries`` are refused here. In a group of
    K rollouts (``swe-sandbox batch --rollouts K``, ``swe_sandbox.batch.rollout_group``) every
    sample gets the same ``temperature`` and, when ``seed`` is an integer, sample k (0 .. K-1)
    gets ``seed + k`` (``swe_sandbox.batch.rollouts.model_config_for``): samples differ where the
    provider honours seeds, and a resumed sample asks for the seed it had."""
    cost_tracking: Literal["default", "ignore_errors"] = "default"
    """``default``: a reply whose cost litellm cannot compute raises ``ModelError``;
    ``ignore_errors``: such a reply costs 0 (local or free models)."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """Retry policy of failed calls (attempts, total time cap in seconds, backoff)."""
    set_cache_control: Literal["default_end"] | None = "default_end"
    """``default_end``: Anthropic prompt-cache markers on the last user/tool message of each of the
    last two turns, for model names containing ``anthropic`` or ``claude`` (others are left alone).
    ``None``: no markers."""
    format_error_template: str = DEFAULT_FORMAT_ERROR_TEMPLATE
    """Jinja2 (strict) text telling the model its reply was unusable; vars: ``error`` (str),
    ``finish_reason`` (str | None), ``truncated`` (bool: the reply hit the token limit)."""
    observation_template: str = DEFAULT_OBSERVATION_TEMPLATE
    """Jinja2 (strict) text of one command's result; vars: ``output`` (the result dict:
    ``output``, ``returncode``, ``exception_info``, ``extra.truncated``, ``extra.dropped_bytes``...)
    and the agent's template vars."""

    @field_validator("model_kwargs")
    @classmethod
    def _no_litellm_retries(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted({"num_retries", "max_retries"} & set(value))
        if clash:
            raise ValueError(f"{', '.join(clash)}: litellm's retries are off; set model.retry instead")
        return value

    @field_validator("format_error_template", "observation_template")
    @classmethod
    def _template_compiles(cls, value: str) -> str:
        return check_template(value)


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stdout
    return litellm


# -- messages ----------------------------------------------------------------------------------


def provider_message(message: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``message`` with only the fields a provider accepts (no ``extra``, no
    ``cache_control`` left from elsewhere; tool calls reduced to ``id``, ``type``, ``function``)."""
    out = {k: copy.deepcopy(message[k]) for k in PROVIDER_FIELDS if k in message}
    if out.get("tool_calls"):
        out["tool_calls"] = [plain_tool_call(tc) for tc in out["tool_calls"]]
    if isinstance(out.get("content"), list):
        for block in out["content"]:
            if isinstance(block, dict):
                block.pop("cache_control", None)
    return out


def plain_tool_call(tool_call: Any) -> dict[str, Any]:
    """``{"id", "type": "function", "function": {"name", "arguments"}}`` of a litellm object or dict."""
    data = tool_call.model_dump() if hasattr(tool_call, "model_dump") else dict(tool_call)
    function = data.get("function") or {}
    if not isinstance(function, dict):
        function = function.model_dump() if hasattr(function, "model_dump") else {}
    return {"id": data.get("id"), "type": "function",
            "function": {"name": function.get("name"), "arguments": function.get("arguments")}}


def add_cache_control(messages: list[dict[str, Any]], turns: int = 2) -> list[dict[str, Any]]:
    """Mark the last user/tool message of each of the last ``turns`` turns (in place; returns it).

    The newest marker writes the prompt cache, the one before reads what the previous call wrote.
    The marker is ``cache_control: {"type": "ephemeral"}`` on the message's last content block
    (a string content becomes one text block); litellm turns it into Anthropic's wire format.

    Args:
        messages (list[dict]): provider messages (``provider_message``), without old markers.
        turns (int): how many markers at most. Defaults to 2 (Anthropic allows 4 in all).
    """
    want, marked = True, 0
    for message in reversed(messages):
        if message.get("role") == "assistant":
            want = True
        elif want and message.get("role") in ("user", "tool") and message.get("content"):
            content = message["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            blocks[-1] = {**blocks[-1], "cache_control": dict(CACHE_CONTROL)}
            message["content"] = blocks
            want, marked = False, marked + 1
            if marked == turns:
                break
    return messages


def _json_safe(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    return json.loads(json.dumps(obj, default=str))


# -- the model ---------------------------------------------------------------------------------


class LitellmModel:
    """Tool-calling model through litellm: one ``bash`` tool, strict parsing, one retry policy.

    Args:
        **kwargs: the fields of ``LitellmModelConfig``.

    Raises:
        ConfigError: an invalid config value (the message names the field).

    Attributes:
        config (LitellmModelConfig): the validated config.
        cost (float): USD spent by this instance.
        n_calls (int): calls made by this instance (failed ones included).
    """

    config_class: type[LitellmModelConfig] = LitellmModelConfig
    tools: list[dict[str, Any]] | None = [BASH_TOOL]

    @classmethod
    def warm_up(cls) -> None:
        """Import litellm now (``swe_sandbox.models.warm_up`` calls this in a thread)."""
        _litellm()

    def __init__(self, **kwargs: Any):
        self.config = validate(self.config_class, kwargs, section="model")
        self.cost = 0.0
        self.n_calls = 0
        self._secrets = sorted(find_secrets(self.config.model_kwargs))
        self._interrupted = Interruption()

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """Ask the model for its next step.

        Args:
            messages (list[dict]): the history; only provider fields are sent.
            **kwargs: extra ``litellm.completion`` arguments for this call (over ``model_kwargs``).

        Returns:
            The assistant message with ``extra.actions`` (see the module docstring).

        Raises:
            FormatError: the reply holds no usable command; ``.messages`` go to the history.
            ModelError: the provider failed for good, or the cost is unknown (``cost_tracking: default``).
            LimitsExceeded: a process-wide cost or call cap is reached (``models.stats``).
        """
        litellm = _litellm()
        params = self._start_call(messages, kwargs)
        response = call_with_retries(lambda: litellm.completion(**params), self.config.retry, secrets=self._secrets,
                                     interrupted=self._interrupted)
        return self._reply(response)

    async def aquery(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """``query`` through ``litellm.acompletion``, awaited on the running event loop (the same
        reply, cost, parsing, errors and retry policy; the waits between retries are asyncio sleeps).

        litellm is imported on the first call if it was not yet (seconds of CPU on the loop's
        thread): call ``warm_up()`` beforehand, from a thread, to keep the loop free.

        Raises:
            FormatError, ModelError, LimitsExceeded: as ``query``.
            asyncio.CancelledError: the awaiting task was cancelled (the request is abandoned).
        """
        litellm = _litellm()
        params = self._start_call(messages, kwargs)
        response = await acall_with_retries(lambda: litellm.acompletion(**params), self.config.retry,
                                            secrets=self._secrets, interrupted=self._interrupted)
        return self._reply(response)

    def interrupt(self) -> None:
        """End a wait between retries at once, and every later retry, with ``ModelError``
        (thread-safe, for ``query`` and ``aquery`` alike; a batch's Ctrl-C calls it). A request in
        flight runs to its own timeout."""
        self._interrupted.set()

    def prepare_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The history as sent: provider fields only, plus cache markers where configured."""
        prepared = [provider_message(m) for m in messages]
        name = self.config.model_name.lower()
        if self.config.set_cache_control == "default_end" and ("anthropic" in name or "claude" in name):
            add_cache_control(prepared)
        return prepared

    def parse_actions(self, message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        """Actions of an assistant message and the problems that make it unusable."""
        return parse_tool_calls(message.get("tool_calls"))

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The messages answering the actions of ``message``: a ``tool`` message per tool call
        (a ``user`` message for an action without ``tool_call_id``, e.g. text models).

        Args:
            message (dict): the assistant message ``query`` returned.
            outputs (list[dict]): result dicts of the executed actions, in order; missing trailing
                ones (a command ended the turn) are answered as not executed.
            template_vars (dict | None): more variables for ``observation_template``.
        """
        return format_observation_messages(message, outputs, self.config.observation_template, template_vars,
                                           self._secrets)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Config fields, ``cost`` and ``n_calls`` for the agent's templates, secrets masked."""
        variables = {**self.config.model_dump(), "cost": self.cost, "n_calls": self.n_calls, **kwargs}
        return redact(variables, self._secrets)

    def serialize(self) -> dict[str, Any]:
        """mini-swe-agent's shape: ``{"info": {"config": {"model": ..., "model_type": ...}}}``, secrets masked."""
        kind = f"{type(self).__module__}.{type(self).__name__}"
        config = redact(self.config.model_dump(mode="json"), self._secrets)
        return {"info": {"config": {"model": config, "model_type": kind}}}

    # -- internals ---------------------------------------------------------------------------

    def _start_call(self, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Count the call (``models.stats`` may refuse it: ``LimitsExceeded``); the completion's arguments."""
        GLOBAL_STATS.start_call()
        self.n_calls += 1
        params = {**self.config.model_kwargs, **kwargs, "model": self.config.model_name,
                  "messages": self.prepare_messages(messages), "num_retries": 0, "max_retries": 0}
        if self.tools:
            params["tools"] = self.tools
        return params

    def _reply(self, response: Any) -> dict[str, Any]:
        """The assistant message of a completion (its cost counted), or the ``FormatError`` raised."""
        cost = self._cost(response)
        self.cost += cost
        GLOBAL_STATS.add_cost(cost)
        choice = response.choices[0]
        message = self._assistant_message(choice.message)
        extra = {"cost": cost, "timestamp": time.time(), "finish_reason": choice.finish_reason,
                 "model": getattr(response, "model", None), "response_id": getattr(response, "id", None),
                 "usage": _json_safe(getattr(response, "usage", None))}
        actions, problems = self.parse_actions(message)
        if problems:
            raise self._format_error(message, extra, response, problems)
        return self._redacted({**message, "extra": {**extra, "actions": actions}})

    def _cost(self, response: Any) -> float:
        litellm = _litellm()
        kwargs = self.config.model_kwargs
        custom = None
        if "input_cost_per_token" in kwargs or "output_cost_per_token" in kwargs:
            custom = {"input_cost_per_token": kwargs.get("input_cost_per_token", 0.0),
                      "output_cost_per_token": kwargs.get("output_cost_per_token", 0.0)}
        try:
            cost = litellm.cost_calculator.completion_cost(response, model=self.config.model_name,
                                                           custom_cost_per_token=custom)
        except Exception as exc:  # litellm raises many kinds here (ModelNotMappedError, ValueError...)
            return self._cost_unknown(f"{type(exc).__name__}: {exc}")
        tokens = getattr(getattr(response, "usage", None), "total_tokens", 0) or 0
        if cost is None or cost < 0 or (cost == 0 and tokens > 0):
            return self._cost_unknown(f"litellm computed {cost!r} for {tokens} tokens")
        return float(cost)

    def _cost_unknown(self, why: str) -> float:
        if self.config.cost_tracking == "ignore_errors":
            return 0.0
        raise ModelError(redact(
            f"cannot compute the cost of model {self.config.model_name!r} ({why}). Give litellm its price "
            "(model.model_kwargs.input_cost_per_token / output_cost_per_token in USD, or litellm.register_model), "
            "or set model.cost_tracking=ignore_errors to count it as 0.", self._secrets))

    def _assistant_message(self, raw: Any) -> dict[str, Any]:
        message = {"role": "assistant", "content": raw.content}
        tool_calls = [plain_tool_call(tc) for tc in raw.tool_calls or ()]
        if tool_calls:
            message["tool_calls"] = tool_calls
        return message

    def _format_error(self, message: dict[str, Any], extra: dict[str, Any], response: Any,
                      problems: list[str]) -> FormatError:
        finish_reason = extra["finish_reason"]
        error = format_error_text(problems, finish_reason)
        variables = {"error": error, "finish_reason": finish_reason, "truncated": finish_reason == "length"}
        text = redact(render_template(self.config.format_error_template, variables,
                                      where="model.format_error_template"), self._secrets)
        kept = _answerable(message.get("tool_calls") or [])
        history = {**message, "tool_calls": kept} if kept else {k: v for k, v in message.items() if k != "tool_calls"}
        if history["content"] is None and not kept:
            history["content"] = ""
        history["extra"] = {**extra, "actions": [], "format_error": error, "response": _json_safe(response)}
        answers = [{"role": "tool", "tool_call_id": tc["id"], "content": text} for tc in kept]
        if len(kept) < len(message.get("tool_calls") or []) or not kept:
            answers.append({"role": "user", "content": text})
        return FormatError(self._redacted(history), *answers)

    def _redacted(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` with secrets masked everywhere but in what executes (tool calls, actions)."""
        extra = dict(message.get("extra") or {})
        actions = extra.pop("actions", [])
        kept = {k: v for k, v in message.items() if k not in ("tool_calls", "extra")}
        out = redact({**kept, "extra": extra}, self._secrets)
        if "tool_calls" in message:
            out["tool_calls"] = message["tool_calls"]
        out["extra"]["actions"] = actions
        return {k: out[k] for k in message}


def _answerable(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls a ``tool`` message can answer: a non-empty string id, first use only."""
    seen: set[str] = set()
    kept = []
    for tool_call in tool_calls:
        tid = tool_call.get("id")
        if isinstance(tid, str) and tid and tid not in seen:
            seen.add(tid)
            kept.append(tool_call)
    return kept
