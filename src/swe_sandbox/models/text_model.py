"""Model ``litellm_text``: the command is the one fenced code block of the reply (no tools sent).

The block is tagged ``bash``, ``sh`` or ``mswea_bash_command`` and its fences start a line::

    I will list the files.
    ```bash
    ls -la
    ```

No such block, several, or an empty one raise ``FormatError`` (the assistant message, then a
``user`` message saying why). Everything else — retries, cost, caps, redaction, observation
messages (one ``user`` message per turn) — is ``LitellmModel``'s.
"""

from __future__ import annotations

from typing import Any

from swe_sandbox.models.actions import parse_bash_block
from swe_sandbox.models.litellm_model import LitellmModel, LitellmModelConfig

DEFAULT_TEXT_FORMAT_ERROR_TEMPLATE = """\
Your last reply could not be executed: {{ error }}.
Nothing of it was run. Put exactly one shell command in exactly one fenced block that starts \
with ```bash on its own line and ends with ``` on its own line{% if truncated %}, and keep the \
reply shorter{% endif %}."""


class LitellmTextModelConfig(LitellmModelConfig):
    """Config of the ``litellm_text`` model: ``LitellmModelConfig`` with a text-format error message."""

    format_error_template: str = DEFAULT_TEXT_FORMAT_ERROR_TEMPLATE
    """Jinja2 (strict) text telling the model its reply was unusable; vars: ``error``,
    ``finish_reason``, ``truncated``."""


class LitellmTextModel(LitellmModel):
    """Text-based model through litellm: one ```bash block per reply, no tools."""

    config_class = LitellmTextModelConfig
    tools = None

    def _assistant_message(self, raw: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": raw.content or ""}

    def parse_actions(self, message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        return parse_bash_block(message.get("content"))
