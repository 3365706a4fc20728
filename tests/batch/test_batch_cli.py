"""``swe-sandbox batch`` as a user runs it: killed with SIGKILL mid-run and resumed (exactly one
result, prediction and trajectory per instance, ``preds.json`` as an uninterrupted run's, no
sandbox left), bad task files (nothing written), and ``report``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from batch_fixtures import MARKER, batch_argv, bwrap_ok, calc_repo, calc_task, run, wait_for, write_tasks  # noqa: F401

from swe_sandbox.batch.records import ResultsLog

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("bwrap_ok")]
N = 6



def marker_processes() -> list[str]:
    done = subprocess.run(["pgrep", "-af", MARKER], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "pgrep" not in line]


def test_sigkill_then_resume_is_exactly_once(calc_repo, tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(f"k{n}", calc_repo) for n in range(N)])
    reference = run(batch_argv(tasks, tmp_path / "ref"))
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "out"
    proc = subprocess.Popen(batch_argv(tasks, out), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: len(ResultsLog(out / "results.jsonl").read()) >= 2 and marker_processes(), 60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert wait_for(lambda: not marker_processes(), 10), marker_processes()  # bwrap died with its parent
    json.loads((out / "preds.json").read_text())  # valid JSON whatever the moment of the kill
    killed_records = len(ResultsLog(out / "results.jsonl").read())
    assert 2 <= killed_records < N

    resumed = run(batch_argv(tasks, out))
    assert resumed.returncode == 0, resumed.stderr
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted(r.instance_id for r in records) == [f"k{n}" for n in range(N)]  # one line each
    assert all(r.done and r.attempt == 1 for r in records)
    assert json.loads((out / "preds.json").read_text()) == json.loads((tmp_path / "ref" / "preds.json").read_text())
    assert sorted(p.name for p in out.glob("*/*.traj.json")) == [f"k{n}.traj.json" for n in range(N)]
    assert f"{N} done" in resumed.stdout

    report = run([sys.executable, "-m", "swe_sandbox", "report", str(out), "--json"])
    summary = json.loads(report.stdout)
    assert (summary["done"], summary["exit_status"], summary["api_calls"]) == (N, {"Submitted": N}, 3 * N)


@pytest.mark.parametrize("rows, expected", [
    ([{"problem_statement": "p"}], "line 1: instance_id: missing (required)"),
    ([{"instance_id": "a", "problem_statement": "p"}, {"instance_id": "a", "problem_statement": "q"}],
     "line 2: instance_id: 'a' duplicates line 1"),
    ([{"instance_id": "x/y", "problem_statement": "p"}], "line 1: instance_id: 'x/y' is not a safe file name"),
    ([{"instance_id": "a", "problem_statement": "p", "workspace": "missing-dir"}], "line 1: workspace:"),
])
def test_bad_task_file_writes_nothing(tmp_path, rows, expected):
    tasks = write_tasks(tmp_path / "tasks.jsonl", rows)
    done = run(batch_argv(tasks, tmp_path / "out"), timeout=60)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_a_bad_environment_field_is_refused_before_anything_runs(calc_repo, tmp_path):
    """A typo in ``-c environment.*`` was recorded as every instance's (done) result, exit 0, and
    stuck on resume (hostile review): it is the command's usage error, and nothing is written."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("t", calc_repo)])
    done = run(batch_argv(tasks, tmp_path / "out", "-c", "environment.bogus=1"), timeout=60)
    assert done.returncode == 2 and "bogus" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["batch", "eval"])
def test_an_output_directory_that_cannot_be_made_is_a_usage_error(calc_repo, tmp_path, command):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("t", calc_repo)])
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "sub"
    if command == "batch":
        argv = batch_argv(tasks, out)
    else:
        preds = tmp_path / "preds.json"
        preds.write_text(json.dumps({"t": {"instance_id": "t", "model_patch": "", "model_name_or_path": "m"}}))
        argv = [sys.executable, "-m", "swe_sandbox", "eval", str(preds), "--tasks", str(tasks), "-o", str(out),
                "--env", "bwrap"]
    done = run(argv, timeout=60)
    assert done.returncode == 2 and "--output: cannot create the directory" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
