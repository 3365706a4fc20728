"""``run_batch`` and ``rollout`` through the Python API, on bwrap with a scripted model: the output
directory, resume, retries of infrastructure failures, the batch's cost limit and cancellation."""

from __future__ import annotations

import json
import threading
import time

import pytest
from batch_fixtures import FIX, SUBMIT, bwrap_ok, calc_repo, calc_task, run_config, write_tasks  # noqa: F401

from swe_sandbox.batch import Cancellation, load_tasks, rollout, run_batch
from swe_sandbox.batch.records import ResultsLog
from swe_sandbox.errors import BackendUnavailable

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("bwrap_ok")]


def test_rollout_returns_everything_a_trainer_needs(calc_repo, tmp_path):
    task = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task("one", calc_repo)]))[0]
    result = rollout(task, run_config([FIX, SUBMIT]), {"backend": "bwrap"}, evaluate=True)
    assert (result.exit_status, result.done, result.steps) == ("Submitted", True, 2)
    assert result.submission.startswith("diff --git a/calc.py")
    assert result.resolved is True and result.reward == 1.0 and result.evaluation.status == "resolved"
    assert [m["role"] for m in result.messages][:2] == ["system", "user"]
    assert "check.py" not in json.dumps(result.messages)  # the hidden test never reached the agent


def test_batch_writes_the_directory_and_resumes(calc_repo, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"i{n}", calc_repo) for n in range(3)]
                                   + [calc_task("lazy", calc_repo, setup_command="exit 3")]))
    out = run_batch(tasks, tmp_path / "out", run_config=run_config([FIX, SUBMIT]), env_config="bwrap",
                    workers=2, evaluate=True)
    records = {r.instance_id: r for r in ResultsLog(out / "results.jsonl").read()}
    assert len(records) == 4 and all(r.done for r in records.values())
    assert records["lazy"].exit_status == "SetupFailed" and "setup_command exited 3" in records["lazy"].error
    assert {i: r.eval_status for i, r in records.items() if i != "lazy"} == {f"i{n}": "resolved" for n in range(3)}
    preds = json.loads((out / "preds.json").read_text())
    assert sorted(preds) == ["i0", "i1", "i2", "lazy"] and preds["lazy"]["model_patch"] == ""
    assert preds["i0"]["model_name_or_path"] == "deterministic"
    traj = json.loads((out / "i1" / "i1.traj.json").read_text())
    assert traj["info"]["exit_status"] == "Submitted" and traj["trajectory_format"] == "mini-swe-agent-1.1"
    report = json.loads((out / "report.json").read_text())
    assert report["resolved_ids"] == ["i0", "i1", "i2"] and report["empty_patch_ids"] == ["lazy"]
    before = (out / "results.jsonl").read_text()
    run_batch(tasks, out, run_config=run_config([]), env_config="bwrap", evaluate=True)  # all done: nothing runs
    assert (out / "results.jsonl").read_text() == before


def test_a_backend_unusable_here_stops_the_run_and_spends_no_attempt(calc_repo, tmp_path):
    """Every instance needs this host's backend: the first one that finds it unusable stops the run
    (``BackendUnavailable``, exit 3 on the command line), nothing is recorded; once it is usable, the
    run goes on as if it had never been tried (it used to spend every attempt, then write empty patches)."""
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task("broken", calc_repo)]))
    env = {"backend": "bwrap", "start_timeout": 5, "env": {}, "bwrap_path": "/nonexistent/bwrap"}
    with pytest.raises(BackendUnavailable, match="/nonexistent/bwrap"):
        run_batch(tasks, tmp_path / "out", run_config=run_config([SUBMIT]), env_config=env, max_attempts=2)
    assert ResultsLog(tmp_path / "out" / "results.jsonl").read() == []
    out = run_batch(tasks, tmp_path / "out", run_config=run_config([FIX, SUBMIT]), env_config="bwrap", max_attempts=2)
    assert [(r.attempt, r.done) for r in ResultsLog(out / "results.jsonl").read()] == [(1, True)]
    assert json.loads((out / "preds.json").read_text())["broken"]["model_patch"].startswith("diff --git")


def test_total_cost_limit_stops_running_and_new_instances(calc_repo, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"c{n}", calc_repo) for n in range(3)]))
    config = run_config(["true"] * 10 + [SUBMIT])
    config["model"]["cost_per_call"] = 1.0
    out = run_batch(tasks, tmp_path / "out", run_config=config, env_config="bwrap", cost_limit=3.0)
    records = ResultsLog(out / "results.jsonl").read()
    assert [(r.instance_id, r.exit_status, r.cost) for r in records] == [("c0", "LimitsExceeded", 3.0)]


def test_cancel_stops_at_once_and_records_nothing(calc_repo, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"s{n}", calc_repo) for n in range(2)]))
    cancel = Cancellation()
    threading.Timer(1.5, cancel.cancel).start()
    started = time.monotonic()
    run_batch(tasks, tmp_path / "out", run_config=run_config(["sleep 60", SUBMIT]), env_config="bwrap",
              workers=2, cancel=cancel)
    assert time.monotonic() - started < 10
    assert ResultsLog(tmp_path / "out" / "results.jsonl").read() == []
    saved = json.loads((tmp_path / "out" / "s0" / "s0.traj.json").read_text())
    assert saved["info"]["exit_status"] in ("KeyboardInterrupt", "SandboxDied", "SandboxError")


def test_an_evaluation_without_verdict_keeps_the_agent_and_is_evaluated_again(calc_repo, tmp_path, monkeypatch):
    from swe_sandbox.batch import evaluation
    from swe_sandbox.batch.progress import Tally

    real, calls = evaluation.evaluate, []

    def flaky(task, patch, env, **kwargs):  # the evaluation's sandbox dies the first time
        calls.append(patch)
        if len(calls) == 1:
            return evaluation.EvalResult(instance_id=task.instance_id, status="error", infra_failure=True,
                                         error="SandboxDied: the sandbox is gone", patch=patch)
        return real(task, patch, env, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", flaky)
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task("e", calc_repo)]))
    out = run_batch(tasks, tmp_path / "out", run_config=run_config([FIX, SUBMIT]), env_config="bwrap",
                    evaluate=True, max_attempts=1)
    first, = ResultsLog(out / "results.jsonl").read()
    assert (first.exit_status, first.done, first.eval_pending, first.api_calls) == ("Submitted", True, True, 2)
    assert json.loads((out / "report.json").read_text())["error_ids"] == ["e"]
    # resumed: only the evaluation runs (a model with no reply left would fail if the agent ran)
    tally = Tally()
    run_batch(tasks, out, run_config=run_config([]), env_config="bwrap", evaluate=True, max_attempts=2,
              progress=tally)
    assert (tally.done, tally.total, tally.resolved, tally.statuses["Submitted"]) == (1, 1, 1, 1)  # not done twice
    again = ResultsLog(out / "results.jsonl").read()[-1]
    assert (again.eval_only, again.eval_status, again.api_calls, again.exit_status) == (True, "resolved", 0, "Submitted")
    assert calls[0] == calls[1] and json.loads((out / "preds.json").read_text())["e"]["model_patch"] == calls[0]
    assert json.loads((out / "report.json").read_text())["resolved_ids"] == ["e"]


def test_redo_existing_interrupted_then_resumed_redoes_each_instance_once(calc_repo, tmp_path):
    from swe_sandbox.batch.progress import BatchProgress

    class CancelAfterFirst(BatchProgress):
        def finished(self, record, result):
            cancel.cancel()

    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"r{n}", calc_repo) for n in range(3)]))
    config = run_config([FIX, SUBMIT])
    out = run_batch(tasks, tmp_path / "out", run_config=config, env_config="bwrap")
    cancel = Cancellation()
    run_batch(tasks, out, run_config=config, env_config="bwrap", redo_existing=True, cancel=cancel,
              progress=CancelAfterFirst())  # stopped after one redone instance, as a kill would
    redone = [r.instance_id for r in ResultsLog(out / "results.jsonl").read() if r.generation == 1]
    assert len(redone) == 1
    run_batch(tasks, out, run_config=config, env_config="bwrap", redo_existing=True)  # the same command again
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted(r.instance_id for r in records if r.generation == 1) == ["r0", "r1", "r2"]  # each redone once
    run_batch(tasks, out, run_config=config, env_config="bwrap", redo_existing=True)  # finished: a new redo
    assert sorted(r.instance_id for r in ResultsLog(out / "results.jsonl").read() if r.generation == 2) == ["r0", "r1", "r2"]
