"""What ``Environment.stream`` yields (DESIGN.md §10): a ground-floor module, importing nothing of
swe_sandbox, so the sync environments, ``swe_sandbox.aio`` and the CLI share one event type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StreamEvent:
    """One event of a streamed command.

    Attributes:
        text: an output chunk (merged stdout and stderr, whole UTF-8 characters); ``""`` on the last event.
        result: on the last event only, the result dict ``execute`` returns for the command; else None.
        stream: the result key ``text`` belongs to: ``output`` (default; stdout alone with
            ``separate_stderr``) or ``stderr``.
    """

    text: str = ""
    result: dict[str, Any] | None = None
    stream: str = "output"

    @property
    def done(self) -> bool:
        """True on the last event (the one carrying ``result``)."""
        return self.result is not None
