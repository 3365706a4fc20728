"""What a hostile review found in the run's files and displays (issue 21's item 5, second pass).

- A line of ``results.jsonl`` holding U+2028 / U+0085 raw (a provider's error text, a setup's
  output) was cut in two by ``str.splitlines`` and dropped: a done instance ran again on every resume.
- Task files with such characters inside strings did not load.
- Instance ids with C1 controls, line separators, bidi overrides, lone surrogates or more bytes
  than a file name holds passed the check, and crashed or misled the run later.
- A closed stderr pipe (``2> >(head -c 20)``) stopped the batch from its plain progress lines.
- A backend unusable on this host spent every attempt of every instance (exit 1, then exit 0
  with empty patches): now the run stops with exit 3 and spends none.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swe_sandbox.batch.progress import LineProgress
from swe_sandbox.batch.records import AttemptRecord, ResultsLog
from swe_sandbox.batch.tasks import MAX_ID_BYTES, load_tasks
from swe_sandbox.errors import TaskFileError
from swe_sandbox.files import jsonl_lines

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x0b", "\x0c"]


@pytest.mark.parametrize("char", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_a_results_line_holding_a_line_separator_is_read_back(tmp_path, char):
    log = ResultsLog(tmp_path / "results.jsonl")
    log.append(AttemptRecord(instance_id="a", attempt=1, exit_status="ModelError", done=True,
                             error=f"provider said: bad{char}thing"))
    log.append(AttemptRecord(instance_id="b", attempt=1, exit_status="Submitted", done=True))
    records = log.read()
    assert [r.instance_id for r in records] == ["a", "b"]
    assert records[0].error == f"provider said: bad{char}thing"


def test_json_lines_end_at_newline_alone():
    assert jsonl_lines('{"a": "x\u2028y"}\r\n{"b": 1}\n') == ['{"a": "x\u2028y"}', '{"b": 1}', ""]


def test_a_task_file_with_a_line_separator_inside_a_string_loads(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": "ok1", "problem_statement": "line1\u2028line2\u0085end"},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_tasks(path)[0].problem_statement == "line1\u2028line2\u0085end"


HOSTILE_IDS = {"c1": "a\u009bb", "del": "a\x7fb", "line-separator": "a\u2028b", "next-line": "a\u0085b",
               "bidi-override": "a\u202eb", "bidi-isolate": "a\u2067b", "lone-surrogate": "sur\ud800id",
               "too-many-bytes": "wide" + "\u0301" * 100 + "\U0001f600" * 50}


@pytest.mark.parametrize("instance_id", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_an_instance_id_a_file_name_or_a_terminal_would_mishandle_is_refused_at_load(tmp_path, instance_id):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": instance_id, "problem_statement": "x"}) + "\n")
    with pytest.raises(TaskFileError, match="instance_id"):
        load_tasks(path)


def test_the_longest_id_allowed_fits_every_file_name_of_the_run(tmp_path):
    instance_id = "é" * (MAX_ID_BYTES // 2)
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": instance_id, "problem_statement": "x"}) + "\n")
    assert load_tasks(path)[0].instance_id == instance_id
    (tmp_path / f"{instance_id}.submission.txt").write_text("fits")  # raises ENAMETOOLONG if not


class ClosedPipe:
    """A stream whose reader went away (``| head``)."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_plain_progress_lines_to_a_closed_pipe_stop_quietly():
    stream = ClosedPipe()
    progress = LineProgress(stream)  # type: ignore[arg-type]
    progress.started(total=2, pending=2, finished=[])
    progress.started(total=2, pending=2, finished=[])  # nothing raised, nothing written any more
    assert stream.writes == 1


def test_a_backend_unusable_here_stops_batch_and_eval_with_3_and_spends_no_attempt(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "tasks.jsonl").write_text(
        "".join(json.dumps({"instance_id": f"s{n}", "problem_statement": "x", "workspace": "ws"}) + "\n"
                for n in range(3)))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "swe_sandbox", "batch", str(tmp_path / "tasks.jsonl"), "-o", str(out),
            "--env", "bwrap", "-c", "model.model_class=deterministic",
            "-c", 'model.outputs=["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]',
            "-c", "environment.bwrap_path=/nonexistent/bwrap"]
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({f"s{n}": {"instance_id": f"s{n}", "model_name_or_path": "m",
                                           "model_patch": "diff --git a/f b/f\n"} for n in range(3)}))
    evaluate = [sys.executable, "-m", "swe_sandbox", "eval", str(preds), "--tasks", str(tmp_path / "tasks.jsonl"),
                "-o", str(tmp_path / "eval"), "--env", "bwrap", "-c", "environment.bwrap_path=/nonexistent/bwrap"]
    for command, directory in ((argv, out), (argv, out), (evaluate, tmp_path / "eval")):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 3, done.stderr
        assert "backend unavailable" in done.stderr and "/nonexistent/bwrap" in done.stderr
        assert ResultsLog(directory / "results.jsonl").read() == []
    assert not Path(out / "preds.json").exists() or json.loads((out / "preds.json").read_text()) == {}


def test_a_symlink_or_a_file_planted_as_an_instance_directory_is_refused(tmp_path):
    from swe_sandbox.batch.records import instance_directory
    from swe_sandbox.errors import ConfigError

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "b").symlink_to(elsewhere)
    (out / "c").mkdir()
    (out / "c" / "eval").symlink_to(elsewhere)
    (out / "d").write_text("a file")
    for instance_id, parts in (("b", ()), ("c", ("eval",)), ("d", ())):
        with pytest.raises(ConfigError, match="not a directory of the run"):
            instance_directory(out, instance_id, *parts)
    assert instance_directory(out, "a", "eval") == out / "a" / "eval" and (out / "a" / "eval").is_dir()
    assert list(elsewhere.iterdir()) == []


def test_bidi_controls_and_line_separators_are_shown_escaped():
    from swe_sandbox.terminal import escape_controls

    assert escape_controls("id\u202eexe.txt\u2066x\u2069\u2028end") == "id\\u202eexe.txt\\u2066x\\u2069\\u2028end"
    assert escape_controls("naïve – ok\n") == "naïve – ok\n"


def test_a_results_line_with_a_nan_cost_is_not_read(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"instance_id": "a", "exit_status": "Submitted", "done": true, "cost": "NaN"}\n'
                    '{"instance_id": "b", "exit_status": "Submitted", "done": true, "cost": 0.5}\n')
    assert [(r.instance_id, r.cost) for r in ResultsLog(path).read()] == [("b", 0.5)]


def test_a_workspace_swapped_for_a_symlink_after_load_is_not_copied(tmp_path):
    from swe_sandbox.batch.sandbox import task_sandbox
    from swe_sandbox.errors import ConfigError

    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("secret")
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": "a", "problem_statement": "x", "workspace": "ws"}) + "\n")
    task, = load_tasks(path)
    (tmp_path / "ws").rename(tmp_path / "ws.old")
    (tmp_path / "ws").symlink_to(tmp_path / "outside")
    with pytest.raises(ConfigError, match="a symlink took its place"):
        with task_sandbox(task, {"backend": "local"}):
            pass
