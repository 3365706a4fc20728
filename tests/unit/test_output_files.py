"""The output directory's files: never written through a symlink, and a directory of another user
is refused; what a results file holds is shown with its control characters escaped."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from swe_sandbox.batch import records as rec
from swe_sandbox.batch.report import render, summarize
from swe_sandbox.errors import ConfigError
from swe_sandbox.files import append_bytes, atomic_write_text


def test_an_atomic_write_replaces_a_planted_symlink_and_leaves_its_target_alone(tmp_path):
    target = tmp_path / "bashrc"
    target.write_text("mine\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / rec.PREDS_FILE).symlink_to(target)
    atomic_write_text(tmp_path / "out" / rec.PREDS_FILE, "{}\n")
    assert target.read_text() == "mine\n"
    assert not (tmp_path / "out" / rec.PREDS_FILE).is_symlink()
    assert (tmp_path / "out" / rec.PREDS_FILE).read_text() == "{}\n"
    assert [p.name for p in (tmp_path / "out").iterdir()] == [rec.PREDS_FILE]  # no temporary file left


def test_an_append_refuses_a_planted_symlink(tmp_path):
    target = tmp_path / "bashrc"
    target.write_text("mine\n")
    (tmp_path / rec.RESULTS_FILE).symlink_to(target)
    log = rec.ResultsLog(tmp_path / rec.RESULTS_FILE)
    with pytest.raises(OSError) as caught:
        log.append(rec.AttemptRecord(instance_id="a", exit_status="Submitted", done=True))
    assert caught.value.errno == errno.ELOOP
    assert target.read_text() == "mine\n"


def test_an_append_ends_a_torn_line_first(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b'{"torn')
    append_bytes(path, b"next\n", end_torn_line=True)
    append_bytes(path, b"more\n", end_torn_line=True)
    assert path.read_bytes() == b'{"torn\nnext\nmore\n'


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_an_output_directory_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    with pytest.raises(ConfigError, match=r"belongs to another user \(uid 12345\)"):
        rec.output_directory(theirs)
    assert rec.output_directory(tmp_path / "new" / "mine") == tmp_path / "new" / "mine"  # made, ours
    assert rec.output_directory(tmp_path) == tmp_path


def hostile_results(directory):
    directory.mkdir()
    lines = [rec.AttemptRecord(instance_id="x\u009b2J[/]", exit_status="Bad\u009b31m[/red]", done=True,
                               eval_status="res\x1b]52;c;AAAA\x07olved").model_dump_json()]
    (directory / rec.RESULTS_FILE).write_text("\n".join(lines) + "\n")


def test_the_summary_escapes_what_a_results_file_holds(tmp_path):
    hostile_results(tmp_path / "out")
    text = render(summarize(tmp_path / "out"), tmp_path / "out")
    assert "\u009b" not in text and "\x1b" not in text and "\x07" not in text
    assert "Bad\\x9b31m[/red] 1" in text and "res\\x1b]52;c;AAAA\\x07olved 1" in text


def test_swe_sandbox_report_escapes_what_a_results_file_holds(tmp_path):
    hostile_results(tmp_path / "out")
    shown = subprocess.run([sys.executable, "-m", "swe_sandbox", "report", str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "\u009b" not in shown.stdout and "Bad\\x9b31m[/red] 1" in shown.stdout
    as_json = subprocess.run([sys.executable, "-m", "swe_sandbox", "report", "--json", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=60)
    assert "\u009b" not in as_json.stdout and json.loads(as_json.stdout)["exit_status"] == {"Bad\u009b31m[/red]": 1}


def test_the_run_summary_shows_markup_looking_paths_and_statuses_as_text(tmp_path):
    from swe_sandbox.cli.display import show_summary

    console = Console(record=True, width=300, file=open(os.devnull, "w"))  # noqa: SIM115
    show_summary(console, "Submitted", "line [/]\u009b\n", tmp_path / "a[/]b.traj.json")
    show_summary(console, "Odd[/]\u009b", "", tmp_path / "c.traj.json")
    text = console.export_text()
    console.file.close()
    assert "a[/]b.traj.json" in text and "line [/]\\x9b" in text and "Odd[/]\\x9b" in text
    assert "\u009b" not in text
