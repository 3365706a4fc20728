"""Text from a sandbox or a model shown on a terminal: no escape sequence gets through.

``swe_sandbox.terminal.escape_controls`` is what ``swe-sandbox exec`` (on a TTY) and the agent's
progress use; the command-line tests check ``exec`` on a real pseudo-terminal (tests/unit/test_cli.py).
"""

from __future__ import annotations

import io

import pytest

from swe_sandbox.terminal import StreamEscaper, escape_controls


@pytest.mark.parametrize("text, shown", [
    ("plain\ttext\nünïcödé €\n", "plain\ttext\nünïcödé €\n"),
    ("\x1b]0;pwned\x07\x1b[2J", "\\x1b]0;pwned\\x07\\x1b[2J"),
    ("\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07"),  # a clipboard write
    ("crlf\r\nline", "crlf\r\nline"),  # \r just before \n overwrites nothing
    ("safe\rrm -rf /", "safe\\x0drm -rf /"),  # a lone \r would hide "safe" behind what follows
    ("\x00\x08\x7f\x9b2J\x85", "\\x00\\x08\\x7f\\x9b2J\\x85"),  # NUL, BS, DEL, C1 CSI, C1 NEL
    ("end\r", "end\\x0d"),
])
def test_escape_controls(text, shown):
    assert escape_controls(text) == shown


@pytest.mark.parametrize("chunks", [
    ["crlf\r", "\nline"],  # a CRLF line end split between two chunks stays a line end
    ["safe\r", "rm -rf /"],  # a lone \r is escaped once the next chunk shows it is one
    ["\x1b", "]0;t\x07", "end\r"],
    ["a\r\r", "\n"],
])
def test_stream_escaper_shows_chunks_as_the_whole_text(chunks):
    escaper = StreamEscaper()
    shown = [escaper.feed(chunk) for chunk in chunks] + [escaper.flush()]
    assert "".join(shown) == escape_controls("".join(chunks))
    assert "\x1b" not in "".join(shown) and "\r" not in "".join(shown).replace("\r\n", "")


def _console():
    from rich.console import Console

    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=200, color_system=None), buffer


def test_agent_progress_shows_command_and_model_text_escaped():
    from swe_sandbox.cli.display import show_query, show_result

    console, buffer = _console()
    show_query(console, 1, 0.0, {"content": "thinking \x1b]0;pwned\x07 about it"})
    show_result(console, {"command": "printf '\x1b[2J'"}, {"returncode": 0, "extra": {}})
    shown = buffer.getvalue()
    assert "\\x1b]0;pwned\\x07" in shown and "printf '\\x1b[2J'" in shown
    assert "\x07" not in shown and "\x1b]0" not in shown and "\x1b[2J" not in shown


def test_agent_summary_shows_the_submission_escaped(tmp_path):
    from swe_sandbox.cli.display import show_summary

    console, buffer = _console()
    show_summary(console, "Submitted", "diff\n+\x1b]52;c;cHduZWQ=\x07\n", tmp_path / "t.traj.json")
    assert "+\\x1b]52;c;cHduZWQ=\\x07" in buffer.getvalue() and "\x07" not in buffer.getvalue()
