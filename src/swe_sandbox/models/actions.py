"""Actions and observations, shared by every model: the ``bash`` tool, the parsers, the rendering.

- ``BASH_TOOL``: the one tool a tool-calling model is given (``tool_call`` builds a call of it).
- ``parse_tool_calls`` (tool-calling replies) and ``parse_bash_block`` (text replies, one
  ```` ```bash ```` block) turn a reply into actions ``[{"command": str, "tool_call_id": str | None}]``
  plus the problems that make it unusable (``format_error_text`` words them for the model).
- ``format_observation_messages`` answers the actions of a turn with their result dicts rendered
  through ``observation_template`` (``DEFAULT_OBSERVATION_TEMPLATE`` unless configured): a
  ``tool`` message per tool call, a ``user`` message for an action without ``tool_call_id``.

(mini-swe-agent keeps the same three things together in ``models/utils/actions_toolcall.py``.)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from typing import Any

from swe_sandbox.redact import redact
from swe_sandbox.templates import render_template

TOOL_NAME = "bash"
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run a command with `bash -c` in a fresh shell (no state carries over) and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to run."}},
            "required": ["command"],
        },
    },
}
#: A command that an earlier one in the same turn kept from running (e.g. it submitted).
NOT_EXECUTED = {"output": "", "returncode": -1,
                "exception_info": "not executed: an earlier command of this turn ended it"}
#: A fenced block tagged bash / sh / mswea_bash_command; opening and closing fences start a line.
ACTION_RE = re.compile(r"^```(?:bash|sh|mswea_bash_command)[ \t]*\r?\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)

DEFAULT_OBSERVATION_TEMPLATE = """\
{%- if output.exception_info %}<exception>{{ output.exception_info }}</exception>
{% endif -%}
<returncode>{{ output.returncode }}</returncode>
<output>
{{ output.output }}</output>
{%- if output.extra.truncated %}
<note>The output was too long: {{ output.extra.dropped_bytes }} bytes in the middle were dropped. \
Narrow the command (grep, head, tail, sed -n) to see what you need.</note>
{%- endif %}"""
#: Where ``observation_template`` comes from, as a template error names it.
OBSERVATION_FIELD = "model.observation_template"


# -- the bash tool -------------------------------------------------------------------------------


def tool_call(call_id: str, command: str) -> dict[str, Any]:
    """One OpenAI-style ``bash`` tool call: ``{"id", "type": "function", "function": {"name", "arguments"}}``."""
    return {"id": call_id, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": json.dumps({"command": command})}}


# -- parsing -------------------------------------------------------------------------------------


def parse_tool_calls(tool_calls: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Actions of the ``bash`` tool calls and a list of problems (empty when all are usable).

    Args:
        tool_calls: plain tool calls (``tool_call`` / ``litellm_model.plain_tool_call``) of one reply.

    Returns:
        ``([{"command", "tool_call_id"}, ...], ["tool call 2 (call_x): unknown tool 'python'...", ...])``
    """
    if not tool_calls:
        return [], ["it contains no tool call"]
    actions, problems = [], []
    for i, call in enumerate(tool_calls, 1):
        command, problem = _command_of(call)
        if problem:
            problems.append(f"tool call {i} ({call.get('id') or 'no id'}): {problem}")
        else:
            actions.append({"command": command, "tool_call_id": call["id"]})
    return actions, problems


def _command_of(call: dict[str, Any]) -> tuple[str, str]:
    function = call.get("function") or {}
    if function.get("name") != TOOL_NAME:
        return "", f"unknown tool {function.get('name')!r} (the only tool is {TOOL_NAME!r})"
    try:
        arguments = json.loads(function.get("arguments") or "")
    except (TypeError, ValueError) as exc:
        return "", f"its arguments are not valid JSON ({exc})"
    if not isinstance(arguments, dict) or "command" not in arguments:
        return "", 'its arguments have no "command" field'
    if not isinstance(arguments["command"], str):
        return "", f'its "command" is a {type(arguments["command"]).__name__}, not a string'
    if not isinstance(call.get("id"), str) or not call["id"]:
        return "", "it has no id"
    return arguments["command"], ""


def parse_bash_block(content: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The one command of a text reply as ``[{"command", "tool_call_id": None}]``, and problems.

    Args:
        content (str | None): the reply's text; the block's last newline is not part of the command.

    Returns:
        ``(actions, [])`` with exactly one action, or ``([], [why])``.
    """
    blocks = [m.group(1) for m in ACTION_RE.finditer(content or "")]
    if len(blocks) != 1:
        return [], [f"it contains {len(blocks) or 'no'} ```bash block{'' if len(blocks) == 1 else 's'}, "
                    "and exactly one is needed"]
    command = blocks[0][:-1] if blocks[0].endswith("\n") else blocks[0]
    if not command.strip():
        return [], ["its ```bash block is empty"]
    return [{"command": command, "tool_call_id": None}], []


def format_error_text(problems: list[str], finish_reason: str | None = None) -> str:
    """The error for a ``format_error_template``: the problems, and for a reply cut at the token
    limit (``finish_reason == "length"``) the word that it was truncated.

    Args:
        problems (list[str]): what is wrong (``parse_tool_calls`` / ``parse_bash_block``).
        finish_reason (str | None): the provider's finish reason of the reply. Defaults to None.
    """
    text = "; ".join(problems)
    if finish_reason == "length":
        return f"your reply was truncated at the token limit (finish_reason 'length'), so it is incomplete: {text}"
    return text


# -- observations --------------------------------------------------------------------------------


def format_observation_messages(message: dict[str, Any], outputs: list[dict[str, Any]], template: str,
                                template_vars: dict[str, Any] | None = None,
                                secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The messages answering the actions of ``message``, one per action, in order.

    Args:
        message (dict): the assistant message; its actions are ``extra.actions``.
        outputs (list[dict]): result dicts of the executed actions, in order; missing trailing
            ones (a command ended the turn) are answered as ``NOT_EXECUTED``.
        template (str): the ``observation_template`` (jinja2, strict); its variables are
            ``template_vars`` and ``output`` (the result dict, ``extra.truncated`` and
            ``extra.dropped_bytes`` always present).
        template_vars (dict | None): more template variables. Defaults to None.
        secrets (Iterable[str]): values masked in the rendered text. Defaults to none.

    Returns:
        list[dict]: ``{"role": "tool", "tool_call_id", "content", "extra"}`` per action with a
        ``tool_call_id``, ``{"role": "user", "content", "extra"}`` otherwise; ``extra`` holds
        ``returncode``, ``exception_info``, ``timestamp`` and the result's own ``extra``.

    Raises:
        ConfigError: the template uses a variable it was not given.
    """
    actions = (message.get("extra") or {}).get("actions") or []
    padded = list(outputs) + [NOT_EXECUTED] * (len(actions) - len(outputs))
    secrets = sorted(secrets)
    return [observation_message(action, output, template, template_vars or {}, secrets)
            for action, output in zip(actions, padded, strict=False)]  # extra outputs: no action to answer


def observation_message(action: dict[str, Any], output: dict[str, Any], template: str,
                        variables: dict[str, Any], secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The message answering one action (see ``format_observation_messages``)."""
    result = {"output": "", "returncode": -1, "exception_info": "", **output}
    result["extra"] = {"truncated": False, "dropped_bytes": 0, **(output.get("extra") or {})}
    content = render_template(template, {**variables, "output": result}, where=OBSERVATION_FIELD)
    extra = {"returncode": result["returncode"], "exception_info": result["exception_info"],
             "timestamp": time.time(), **result["extra"]}
    head = {"role": "tool", "tool_call_id": action["tool_call_id"]} if action.get("tool_call_id") else {"role": "user"}
    return {**head, "content": redact(content, list(secrets)), "extra": extra}
