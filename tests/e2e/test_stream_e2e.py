"""End to end: the real command line shows a command's output as it arrives (``env.stream``):
``swe-sandbox exec --stream`` and ``swe-sandbox run``'s progress, read incrementally from the
process's pipes, on bwrap; the exit status and the final handling are what they are without it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.variants import require_backend

pytestmark = pytest.mark.bwrap
#: Prints 1, 2, 3 half a second apart, then exits 3.
COUNT = "for i in 1 2 3; do echo line$i; sleep 0.5; done; exit 3"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo the answer"


@pytest.fixture(autouse=True)
def bwrap_ok() -> None:
    require_backend("bwrap")


def lines_as_they_come(argv: list[str], pipe: str = "stdout", timeout: float = 60) -> tuple[list[tuple[float, str]],
                                                                                              str, int]:
    """Run ``python -m swe_sandbox ARGV``; each line of ``pipe`` with the seconds since the start at
    which it arrived, the other pipe's text, and the exit status."""
    proc = subprocess.Popen([sys.executable, "-m", "swe_sandbox", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    watched, other = (proc.stdout, proc.stderr) if pipe == "stdout" else (proc.stderr, proc.stdout)
    assert watched is not None and other is not None
    start, lines, buffer = time.monotonic(), [], b""
    try:
        while time.monotonic() - start < timeout:
            ready, _, _ = select.select([watched], [], [], 0.5)
            data = os.read(watched.fileno(), 65536) if ready else None
            if data == b"":
                break
            buffer += data or b""
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                lines.append((time.monotonic() - start, line.decode()))
        code = proc.wait(timeout=timeout)
        return lines, other.read().decode(), code
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def arrival(lines: list[tuple[float, str]], text: str) -> float:
    return next(at for at, line in lines if text in line)


def test_exec_stream_shows_the_first_line_before_the_command_ends():
    lines, err, code = lines_as_they_come(["exec", "--env", "bwrap", "--stream", "--", COUNT])
    assert code == 3, err
    assert [line for _, line in lines] == ["line1", "line2", "line3"]
    ended = lines[-1][0]
    assert arrival(lines, "line1") < ended - 0.8, lines  # the first line came a second before the last
    assert arrival(lines, "line2") < ended - 0.3, lines


def test_exec_stream_keeps_the_final_handling():
    """A timeout's message on stderr and exit 124; a submission exits 0 with the whole output;
    --json stays one JSON document (not streamed)."""
    lines, err, code = lines_as_they_come(["exec", "--env", "bwrap", "--stream", "--timeout", "1", "--",
                                           "echo before; sleep 30"])
    assert code == 124 and "timed out after 1" in err and [line for _, line in lines] == ["before"]
    lines, err, code = lines_as_they_come(["exec", "--env", "bwrap", "--stream", "--", SUBMIT])
    assert code == 0 and [line for _, line in lines] == ["COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "the answer"]
    lines, err, code = lines_as_they_come(["exec", "--env", "bwrap", "--stream", "--json", "--", COUNT])
    assert code == 3 and len(lines) == 1, lines
    assert json.loads(lines[0][1])["output"] == "line1\nline2\nline3\n"


def test_exec_streams_by_default_on_a_terminal_escaped():
    """stdout a pseudo-terminal, no flag: streamed, and an escape sequence split across chunks
    (a CRLF line end too) is shown as it would be whole."""
    import pty
    import tty

    master, slave = pty.openpty()
    tty.setraw(slave)
    command = "printf 'a\\r'; sleep 0.5; printf '\\nb\\033'; sleep 0.5; printf ']0;t\\007\\n'; " + COUNT
    proc = subprocess.Popen([sys.executable, "-m", "swe_sandbox", "exec", "--env", "bwrap", "--", command],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    start, got, first = time.monotonic(), b"", None
    try:
        while time.monotonic() - start < 60:
            ready, _, _ = select.select([master], [], [], 0.5)
            try:
                data = os.read(master, 65536) if ready else None
            except OSError:  # EIO: the process closed the terminal
                break
            if data == b"":
                break
            got += data or b""
            if first is None and b"line1" in got:
                first = time.monotonic() - start
        code = proc.wait(timeout=60)
        ended = time.monotonic() - start
    finally:
        os.close(master)
        proc.stderr.close()
    assert code == 3
    assert got == b"a\r\nb\\x1b]0;t\\x07\nline1\nline2\nline3\n", got
    assert first is not None and first < ended - 0.8, (first, ended)


def test_exec_no_stream_prints_the_output_at_the_end():
    lines, err, code = lines_as_they_come(["exec", "--env", "bwrap", "--no-stream", "--", COUNT])
    assert code == 3 and [line for _, line in lines] == ["line1", "line2", "line3"]
    assert lines[-1][0] - lines[0][0] < 0.2, lines  # all at once


def test_run_shows_a_long_commands_output_as_it_arrives(tmp_path: Path):
    """``run --stream`` (progress on stderr, a pipe here) with a scripted model: the first line of a
    slow command shows before it ends; its escape sequences are shown escaped; the run submits."""
    outputs = json.dumps(["printf '\\033]0;pwned\\007\\n'; " + COUNT, SUBMIT])
    lines, out, code = lines_as_they_come(["run", "--env", "bwrap", "--stream", "-t", "count", "-o",
                                           str(tmp_path / "t.traj.json"), "-c", "model.model_class=deterministic",
                                           "-c", f"model.outputs={outputs}"], pipe="stderr")
    assert code == 0, (lines, out)
    shown = [line for _, line in lines]
    assert arrival(lines, "line1") < arrival(lines, "returncode 3") - 0.8, lines
    assert "\\x1b]0;pwned\\x07" in shown and not any("\x1b]0" in line for line in shown)
    assert "exit status: Submitted" in out
    traj = json.loads((tmp_path / "t.traj.json").read_text())
    assert traj["info"]["exit_status"] == "Submitted"
    assert "line1\nline2\nline3\n" in json.dumps(traj["messages"]).replace("\\n", "\n")


def test_run_no_stream_shows_no_output(tmp_path: Path):
    outputs = json.dumps([COUNT, SUBMIT])
    lines, out, code = lines_as_they_come(["run", "--env", "bwrap", "--no-stream", "-t", "count", "-o",
                                           str(tmp_path / "t.traj.json"), "-c", "model.model_class=deterministic",
                                           "-c", f"model.outputs={outputs}"], pipe="stderr")
    assert code == 0 and not [line for _, line in lines if "line1" in line]
