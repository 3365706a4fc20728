"""The live display under a real pseudo-terminal: the real CLI, the real rich ``Live``, with
markup-looking commands and hostile instance ids. Before, ``sed 's/[/]/_/'`` (a rich closing
tag to the display) killed its refresh thread, then the whole batch, and running instances went
unrecorded."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from batch_fixtures import bwrap_ok, write_tasks  # noqa: F401 - fixture

#: Ids that are rich markup (no '/': an id is a file name), a link, and a C1 CSI (U+009B, which
#: some terminals honour).
#: (An id holding a C1 control is refused at load: tests/unit/test_hostile_text.py; one a results file holds is
#: shown escaped by `report`: tests/unit/test_output_files.py. Here the commands carry one.)
HOSTILE_IDS = ["a[bold]b", "[bold red]x", "c[i]2Jz", "d[link=file:etc]e"]
#: Commands that look like markup, or carry a CSI, all shown as the running instances' last command.
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # no repository here: the submission is empty
COMMANDS = ["sed 's/[/]/_/' /dev/null; sleep 1.2", "echo '[/bold]' '[red]'; : '\u009b31m'; sleep 1.2"]


def run_on_a_terminal(argv: list[str], timeout: float = 180) -> tuple[int, bytes]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal (200 columns); return
    its exit status and everything it wrote to the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "COLUMNS": "200", "LINES": "50", "TERM": "xterm-256color"}
    env.pop("CI", None), env.pop("NO_COLOR", None)
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(out)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


@pytest.mark.bwrap
def test_markup_looking_commands_and_hostile_ids_on_a_terminal(tmp_path: Path, bwrap_ok):  # noqa: F811
    tasks = write_tasks(tmp_path / "tasks.jsonl", [{"instance_id": i, "problem_statement": "-"} for i in HOSTILE_IDS])
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "-o", str(out), "--env", "bwrap", "-w", "4",
            "-c", "model.model_class=deterministic", "-c", f"model.outputs={json.dumps([*COMMANDS, SUBMIT])}"]
    status, screen = run_on_a_terminal(argv)
    text = screen.decode("utf-8", "replace")
    assert status == 0, text[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in records) == sorted(HOSTILE_IDS)  # every instance recorded
    assert all(r["done"] and r["exit_status"] == "Submitted" for r in records), records
    assert "a[bold]b" in text and "[bold red]x" in text and "d[link=file:etc]e" in text and "sed 's/[/]/_/'" in text  # shown as text
    assert "\u009b" not in text and "c[i]2Jz" in text  # the C1 CSI of the commands never reaches the terminal
    assert "live display failed" not in text and "display error" not in text
    assert "exit status: Submitted 4" in text


def test_a_display_that_fails_never_takes_the_batch_down(monkeypatch):
    """Whatever breaks rendering (here: rich itself raises), the events keep being counted and no
    call raises; the first failure stops the live display, with one warning."""
    from swe_sandbox.batch.live import LiveProgress

    progress = LiveProgress()
    progress.console.file = open(os.devnull, "w")  # noqa: SIM115 - closed below
    try:
        def broken(*args, **kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(progress.live, "start", broken)
        progress.started(total=2, pending=2, finished=[])
        assert progress.failed
        progress.update("x", phase="running", command="sed 's/[/]/_/'")
        progress.stopped()
        assert progress.running["x"]["command"] == "sed 's/[/]/_/'"
    finally:
        progress.console.file.close()


def test_the_render_never_raises_into_the_refresh_thread():
    from rich.console import Console

    from swe_sandbox.batch.live import LiveProgress

    progress = LiveProgress()
    progress.update("[/]", phase="running", command="sed 's/[/]/_/'\u009b", step=1, cost=0.5)
    console = Console(record=True, width=200, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(progress.render())
    shown = console.export_text()
    assert "[/]" in shown and "sed 's/[/]/_/'\\x9b" in shown
    progress.running["[/]"]["cost"] = "not a number"  # a bug in a field: one line, not a dead thread
    console.print(progress.render())
    assert "display error: ValueError" in console.export_text()
    console.file.close()
