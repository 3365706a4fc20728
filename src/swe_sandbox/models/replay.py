"""``ReplayModel``: re-play the commands of a recorded trajectory, on any backend.

Reads ours and mini-swe-agent's trajectories:

- tool-calling (ours, mini-swe-agent v2 tool-call models): assistant messages with
  ``extra.actions`` or ``tool_calls``; every tool call of a turn is re-played in the same turn;
- text-based (mini-swe-agent v2 text models and v1): exactly one ```` ```mswea_bash_command ````
  or ```` ```bash ```` block in an assistant message's content. Turns without exactly one block
  were format errors when recorded and are skipped.

Each recorded turn becomes one reply with fresh tool-call ids, so observations are ``tool``
messages whatever the recording's format. When the recorded turns run out, ``query`` raises
``LimitsExceeded`` whose exit message says so (a complete recording submits before that).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from swe_sandbox.models.actions import DEFAULT_OBSERVATION_TEMPLATE, format_observation_messages, parse_tool_calls
from swe_sandbox.models.test_models import out_of_replies, toolcall_message

#: mini-swe-agent's text formats: v2 (```mswea_bash_command) and v1 (```bash).
TEXT_ACTION_REGEX = re.compile(r"```(?:mswea_bash_command|bash)\s*\n(.*?)\n```", re.DOTALL)


class ReplayModelConfig(BaseModel):
    """Config of ``ReplayModel``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    trajectory: str
    """Path of the recorded trajectory (ours or mini-swe-agent's, JSON)."""
    model_name: str = "replay"
    """Name shown in trajectories."""
    observation_template: str = DEFAULT_OBSERVATION_TEMPLATE
    """jinja2 template of a tool message's content; ``output`` is the result dict."""


def content_text(content: Any) -> str:
    """The text of a message's content (a string, or OpenAI-style content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def recorded_turn(message: dict[str, Any]) -> list[str]:
    """The commands one recorded assistant message ran (empty: it ran none)."""
    if message.get("role") != "assistant":
        return []
    actions = (message.get("extra") or {}).get("actions")
    if actions:
        return [str(a["command"]) for a in actions if isinstance(a, dict) and "command" in a]
    if message.get("tool_calls"):
        actions, problems = parse_tool_calls(message["tool_calls"])
        return [] if problems else [a["command"] for a in actions]  # a malformed call ran nothing
    blocks = TEXT_ACTION_REGEX.findall(content_text(message.get("content")))
    return [blocks[0].strip()] if len(blocks) == 1 else []


def recorded_turns(messages: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """``(content, commands)`` for every recorded assistant turn that ran commands, in order."""
    turns = []
    for message in messages:
        commands = recorded_turn(message)
        if commands:
            turns.append((content_text(message.get("content")), commands))
    return turns


class ReplayModel:
    """Replies with the recorded turns of a trajectory, one per query (cost 0).

    Args:
        **config: fields of ``ReplayModelConfig`` (``trajectory`` is required).

    Raises:
        ConfigError: an invalid field, or the trajectory cannot be read or has no commands.
    """

    def __init__(self, **config: Any):
        from swe_sandbox.config import validate
        from swe_sandbox.errors import ConfigError
        from swe_sandbox.trajectory import load_trajectory

        self.config: ReplayModelConfig = validate(ReplayModelConfig, config, section="model")
        data = load_trajectory(self.config.trajectory)
        self.turns = recorded_turns(data["messages"])
        if not self.turns:
            raise ConfigError(f"model.trajectory: {self.config.trajectory} has no recorded command to replay")
        self.cost = 0.0
        self.n_calls = 0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """The next recorded turn as a tool-calling assistant message.

        Raises:
            LimitsExceeded: every recorded turn was replayed.
        """
        if self.n_calls >= len(self.turns):
            raise out_of_replies(f"ReplayModel({Path(self.config.trajectory).name})", self.n_calls)
        content, commands = self.turns[self.n_calls]
        self.n_calls += 1
        ids = [f"call_replay_{self.n_calls}_{i}" for i in range(len(commands))]
        return toolcall_message(commands, ids, content=content, cost=0.0, replayed_turn=self.n_calls)

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One ``tool`` message per action of ``message``."""
        return format_observation_messages(message, outputs, self.config.observation_template, template_vars)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config fields plus ``kwargs``."""
        return {**self.config.model_dump(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        """mini-swe-agent's shape: ``{"info": {"config": {"model": ..., "model_type": ...}}}``."""
        kind = f"{type(self).__module__}.{type(self).__name__}"
        config = {**self.config.model_dump(mode="json"), "n_turns": len(self.turns)}
        return {"info": {"config": {"model": config, "model_type": kind}}}
