"""Text from a sandbox or a model, made safe to show on a terminal.

A command's output is untrusted: written raw to a terminal, its escape sequences act there (set the
window title, clear the screen, move the cursor to forge what was printed, write the clipboard
with OSC 52, and on some terminals worse). ``escape_controls`` renders every control character
visibly instead, as ``\\xNN`` (ESC becomes the four characters ``\\x1b``), so nothing it contains
is a sequence any more:

- kept: ``\\n`` and ``\\t``, and ``\\r`` just before ``\\n`` (a CRLF line end: the cursor goes to
  the start of the line, then to the next one, overwriting nothing);
- escaped: every other C0 control (NUL .. US, BS and BEL included), a ``\\r`` not followed by
  ``\\n`` (it returns to the line's start, so what follows would overwrite, and hide, what came
  before: ``echo "safe\\rrm -rf /"``), DEL, and the C1 controls U+0080..U+009F (U+009B is CSI on
  terminals that honour 8-bit controls);
- escaped as ``\\uNNNN``: the bidirectional embeddings, overrides and isolates (U+202A..U+202E,
  U+2066..U+2069), which reorder what a terminal shows (CVE-2021-42574, "Trojan Source"), and the
  line and paragraph separators U+2028, U+2029.

A backslash is kept as it is: a command printing the text ``\\x1b`` shows exactly that, and can
do no more with it.

``swe-sandbox exec`` applies it when stdout (stderr) is a terminal, unless ``--raw``; the agent's
progress and summary (``swe_sandbox.cli.display``) always do. ``StreamEscaper`` applies it to
output shown as it arrives, chunk by chunk (``exec --stream``, ``run``'s live output).
"""

from __future__ import annotations

import re
from typing import IO, Any

_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]|\r(?!\n)")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with its control characters shown as ``\\xNN`` or ``\\uNNNN`` (see the module doc for which)."""
    return _CONTROL_RE.sub(_shown, text)


class StreamEscaper:
    """``escape_controls`` over a text that arrives in chunks: a ``\\r`` ending a chunk is held
    back until the next one tells whether it ends a CRLF line end (kept) or not (escaped).

        escaper = StreamEscaper()
        shown = [escaper.feed(chunk) for chunk in chunks] + [escaper.flush()]
        assert "".join(shown) == escape_controls("".join(chunks))
    """

    def __init__(self) -> None:
        self._held = ""

    def feed(self, chunk: str) -> str:
        """The escaped text of ``chunk`` that can be shown now (a trailing ``\\r`` is held)."""
        text, self._held = self._held + chunk, ""
        if text.endswith("\r"):
            text, self._held = text[:-1], "\r"
        return escape_controls(text)

    def flush(self) -> str:
        """What is held, escaped (call once the text ended)."""
        text, self._held = self._held, ""
        return escape_controls(text)


def has_controls(text: str) -> bool:
    """Whether ``escape_controls`` would change ``text``."""
    return _CONTROL_RE.search(text) is not None


def is_terminal(stream: IO[Any] | None) -> bool:
    """Whether ``stream`` is a terminal (False for a pipe, a file, a closed or missing stream)."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def for_stream(text: str, stream: IO[Any] | None, raw: bool = False) -> str:
    """``text`` as it may be written to ``stream``: escaped on a terminal, unchanged elsewhere or
    with ``raw``."""
    return text if raw or not is_terminal(stream) else escape_controls(text)


def one_line(message: str) -> str:
    """Fold a (possibly multi-line) message into one line.

    Args:
        message: any text (an error message, a reason).

    Returns:
        str: its non-blank lines, stripped, joined by ``"; "`` (by a space after a line ending in
        ``:``); empty when it has none.
    """
    parts = [p.strip() for p in str(message).splitlines() if p.strip()]
    if not parts:
        return ""
    out = parts[0]
    for part in parts[1:]:
        out += (" " if out.endswith(":") else "; ") + part
    return out
