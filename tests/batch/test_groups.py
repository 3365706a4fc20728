"""Groups of K rollouts per task (``--rollouts K``, ``rollout_group``): real engines, few sandboxes.

- pass@k: the unbiased estimator against values computed by hand;
- three tasks of the bundled suite with ``--rollouts 3`` on docker and a recorded model that
  solves 1, 2 and 0 of each task's 3 samples: the exact pass@1, pass@3, avg@3, group rewards,
  the layout on disk and SWE-bench's one prediction per instance (sample 0);
- ``--reuse`` on bwrap and docker: the samples run one after another in one sandbox, each from
  the snapshot's state (what a sample left is gone for the next); a reset that fails (more changes
  than a container reset undoes) gives the next sample a new sandbox, recorded;
- a batch SIGKILLed in the middle of a group (two samples committed, the third running): the same
  command runs only the missing sample;
- Ray: a group spread over two nodes (two Ray tasks of one group's samples).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from batch_fixtures import (  # noqa: F401 - fixtures
    FIX,
    SUBMIT,
    bwrap_ok,
    calc_repo,
    calc_task,
    docker_ok,
    run,
    run_config,
    wait_for,
    write_tasks,
)
from ray_fixtures import ray_cluster  # noqa: F401 - fixture
from suite_fixtures import SCRIPTED_FAILURE, rows, suite  # noqa: F401 - fixture

from swe_sandbox.batch import arollout_group, load_tasks, run_batch
from swe_sandbox.batch.batch_run import check_layout
from swe_sandbox.batch.groups import rollout_group
from swe_sandbox.batch.passk import group_report, group_rewards, pass_at_k
from swe_sandbox.batch.progress import Tally
from swe_sandbox.batch.records import AttemptRecord, ResultsLog
from swe_sandbox.batch.rollouts import RolloutResult, model_config_for
from swe_sandbox.environments.container.snapshot import MAX_RESET_CHANGES
from swe_sandbox.environments.snapshot import gc_stores
from swe_sandbox.errors import ConfigError

#: The empty submission: a sample that gives up (reward 0, no evaluation sandbox needed).
GIVE_UP = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def cli_argv(*args: str) -> list[str]:
    """``swe-sandbox ARGS`` in a new process."""
    return [sys.executable, "-m", "swe_sandbox", *args]


def recording(path: Path, commands: list[str]) -> Path:
    """A trajectory for the replay model: one assistant turn per command."""
    messages = [{"role": "assistant", "content": "", "extra": {"actions": [{"command": c}]}} for c in commands]
    path.write_text(json.dumps({"messages": messages, "info": {}}))
    return path


def test_pass_at_k_is_the_unbiased_estimator():
    # 1 - C(n-c, k) / C(n, k), by hand
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 2, 1) == pytest.approx(2 / 3)
    assert pass_at_k(3, 1, 3) == 1.0 and pass_at_k(3, 0, 3) == 0.0
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)            # C(2,2)/C(3,2) = 1/3
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)           # C(3,2)/C(5,2) = 3/10
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)        # C(7,5)/C(10,5) = 21/252
    assert pass_at_k(4, 4, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_group_rewards_and_report_from_records():
    def line(sample: int, reward: float | None, done: bool = True, **fields: Any) -> AttemptRecord:
        return AttemptRecord(instance_id="a", sample=sample, exit_status="Submitted", done=done, reward=reward, **fields)

    final = {"a/0": line(0, 1.0, group="g1", prepare_s=2.0, fork_s=0.5),
             "a/1": line(1, None, done=False, group="g1", prepare_s=2.0, fork_s=0.5)}
    assert group_rewards(["a"], 3, final, exhausted=set()) == {"a": [1.0, None, None]}
    rewards = group_rewards(["a"], 3, final, exhausted={"a/1", "a/2"})  # out of attempts: 0
    assert rewards == {"a": [1.0, 0.0, 0.0]}
    report = group_report(rewards, 3, [*final.values(), line(2, 0.0, group="g2", prepare_s=3.0, fork_s=0.0)])
    assert report["pass@1"] == pytest.approx(1 / 3, abs=1e-6) and report["pass@3"] == 1.0
    assert report["timing"] == {"groups": 2, "samples": 3, "prepare_s": 5.0, "fork_s": 1.0,
                                "prepare_s_per_sample": round(5 / 3, 3), "fork_s_per_sample": round(1 / 3, 3)}
    assert group_report({"a": [1.0, None, 0.0]}, 3, [])["pass@1"] is None  # no task has all its rewards


def test_the_live_rows_of_a_group_end_with_its_samples():
    tally = Tally()
    tally.update("a/0", phase="running")
    tally.update("a/1,2", phase="running")  # a Ray task holding two samples
    tally.update("ab/1", phase="running")
    tally.finished(None, RolloutResult(instance_id="a", sample=0, exit_status="Submitted", done=True))
    tally.finished(None, RolloutResult(instance_id="a", sample=2, exit_status="Submitted", done=True))
    assert list(tally.running) == ["ab/1"]


def test_a_directory_belongs_to_one_rollouts_count():
    grouped = [AttemptRecord(instance_id="a", sample=s, exit_status="Submitted", done=True) for s in range(3)]
    check_layout(grouped, 3)
    check_layout(grouped, 5)  # a larger K adds samples to each group
    with pytest.raises(ConfigError, match="--rollouts at least 3, not 2"):
        check_layout(grouped, 2)
    with pytest.raises(ConfigError, match="--rollouts at least 3"):
        check_layout(grouped, 1)
    with pytest.raises(ConfigError, match="--rollouts 1"):
        check_layout([AttemptRecord(instance_id="a", exit_status="Submitted", done=True)], 3)


@pytest.mark.docker
def test_suite_with_rollouts_3_gives_the_exact_pass_at_k(suite, docker_ok, tmp_path):
    solved = {"tartley__colorama-3": {0}, "networkx__networkx-1": {1, 2}, SCRIPTED_FAILURE: set()}
    chosen = [r for r in rows(build=suite) if r["instance_id"] in solved]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    for instance_id, wins in solved.items():
        for sample in range(3):
            target = recordings / f"{instance_id}.{sample}.traj.json"
            if sample in wins:
                target.write_text((suite / "solutions" / f"{instance_id}.traj.json").read_text())
            else:
                recording(target, [GIVE_UP])
    out = tmp_path / "out"
    done = run(cli_argv("batch", str(tasks), "-o", str(out), "--env", "docker", "-w", "3", "--eval", "--rollouts", "3",
                        "-c", "model.model_class=replay",
                        "-c", f"model.trajectory={recordings}/{{instance_id}}.{{sample}}.traj.json"), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    # by hand: rewards [1,0,0], [0,1,1], [0,0,0] -> pass@1 = (1/3 + 2/3 + 0) / 3, pass@3 = (1 + 1 + 0) / 3
    assert report["group_rewards"] == {"tartley__colorama-3": [1.0, 0.0, 0.0],
                                       "networkx__networkx-1": [0.0, 1.0, 1.0], SCRIPTED_FAILURE: [0.0, 0.0, 0.0]}
    assert report["pass@1"] == pytest.approx(1 / 3, abs=1e-6) and report["pass@3"] == pytest.approx(2 / 3, abs=1e-6)
    assert report["avg@3"] == pytest.approx(3 / 9, abs=1e-6) and report["rollouts"] == 3 and report["scored_tasks"] == 3
    timing = report["timing"]
    assert timing["groups"] == 3 and timing["samples"] == 9 and timing["prepare_s"] > 0 and timing["fork_s"] > 0
    # SWE-bench's shape for sample 0; every sample in preds.samples.json
    assert "pass@1 0.333, pass@3 0.667, avg@3 0.333 over 3 tasks" in done.stdout
    assert report["resolved_ids"] == ["tartley__colorama-3"]
    assert report["empty_patch_ids"] == sorted(["networkx__networkx-1", SCRIPTED_FAILURE])
    preds = json.loads((out / "preds.json").read_text())
    samples = json.loads((out / "preds.samples.json").read_text())
    assert sorted(preds) == sorted(solved) and preds["tartley__colorama-3"]["model_patch"]
    assert [p["sample"] for p in samples["networkx__networkx-1"]] == [0, 1, 2]
    assert [bool(p["model_patch"]) for p in samples["networkx__networkx-1"]] == [False, True, True]
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted((r.instance_id, r.sample) for r in records) == sorted((i, s) for i in solved for s in range(3))
    assert all(r.attempt == 1 and r.group_mode == "fork" and r.group for r in records)
    for instance_id, wins in solved.items():
        for sample in range(3):
            assert (out / instance_id / str(sample) / f"{instance_id}.traj.json").is_file()
            assert (out / instance_id / str(sample) / "eval" / "report.json").is_file() == (sample in wins)


def _listing_task(tmp_path: Path, calc_repo: Path) -> Any:
    path = write_tasks(tmp_path / "tasks.jsonl", [calc_task("reuse", calc_repo)])
    return load_tasks(path)[0]


@pytest.mark.parametrize("backend", [pytest.param("bwrap", marks=pytest.mark.bwrap),
                                     pytest.param("docker", marks=pytest.mark.docker)])
def test_reuse_runs_every_sample_from_the_snapshot_in_one_sandbox(backend, request, calc_repo, tmp_path):
    request.getfixturevalue(f"{backend}_ok")
    # each sample submits what it found, then leaves a file behind: the reset must take it away;
    # on docker sample 0 also leaves more changes than a container reset undoes (ResetFailed: the
    # next sample gets a new sandbox from the snapshot)
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    leave = f"{GIVE_UP}; ls -A; touch leftover"
    junk = f"; mkdir junk && cd junk && seq {MAX_RESET_CHANGES + 50} | xargs touch" if backend == "docker" else ""
    recording(recordings / "0.traj.json", [leave + junk])
    for sample in (1, 2):
        recording(recordings / f"{sample}.traj.json", [leave])
    config = run_config([])
    config["model"] = {"model_class": "replay", "trajectory": f"{recordings}/{{sample}}.traj.json"}
    task = _listing_task(tmp_path, calc_repo)
    group = rollout_group(task, 3, config, {"backend": backend}, evaluate=False, reuse=True)
    assert group.mode == "reuse" and [r.sample for r in group.results] == [0, 1, 2]
    assert all(r.exit_status == "Submitted" for r in group.results), [r.error for r in group.results]
    listings = [r.submission.split() for r in group.results]
    assert "calc.py" in listings[0] and "leftover" not in listings[0] and listings == [listings[0]] * 3
    infos = [r.group for r in group.results]
    assert len({i.group for i in infos}) == 1 and infos[0].fork_s == 0 and all(i.fork_s > 0 for i in infos[1:])
    drifted = [bool(i.reset_drift) for i in infos]
    assert drifted == ([False, True, False] if backend == "docker" else [False] * 3), [i.reset_drift for i in infos]


@pytest.mark.bwrap
def test_arollout_group_forks_each_sample_and_seeds_it(bwrap_ok, calc_repo, tmp_path):
    task = _listing_task(tmp_path, calc_repo)
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    for sample in range(2):  # {sample} in the model config: each sample its own recording
        recording(recordings / f"{sample}.traj.json", [f"{GIVE_UP}; echo sample-{sample}; ls -A; touch leftover"])
    config = run_config([])
    config["model"] = {"model_class": "replay", "trajectory": f"{recordings}/{{sample}}.traj.json"}
    seen: list[int | None] = []
    group = asyncio.run(arollout_group(task, 2, config, {"backend": "bwrap"}, evaluate=False, workers=2,
                                       trajectory_dir=tmp_path / "out", on_sample=lambda r: seen.append(r.sample)))
    assert group.mode == "fork" and sorted(seen) == [0, 1]
    assert [r.submission.split()[0] for r in group.results] == ["sample-0", "sample-1"]
    assert all("leftover" not in r.submission and "calc.py" in r.submission for r in group.results)
    assert all((tmp_path / "out" / "reuse" / str(s) / "reuse.traj.json").is_file() for s in range(2))
    assert model_config_for(task, {"model_kwargs": {"seed": 7, "temperature": 1.0}}, 2)["model_kwargs"] == {
        "seed": 9, "temperature": 1.0}


@pytest.mark.bwrap
def test_the_cost_limit_counts_every_sample_of_a_group(bwrap_ok, calc_repo, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"c{n}", calc_repo) for n in range(2)]))
    config = run_config(["true"] * 20 + [SUBMIT])
    config["model"]["cost_per_call"] = 1.0
    out = run_batch(tasks, tmp_path / "out", run_config=config, env_config="bwrap", cost_limit=6.0, workers=2,
                    rollouts=3)
    records = ResultsLog(out / "results.jsonl").read()
    # the first group's samples 0 and 1 ran at once and stopped together; its sample 2 (waiting for
    # a worker) and the second group never started: nothing recorded, they run on resume
    assert sorted((r.instance_id, r.sample, r.exit_status) for r in records) == [
        ("c0", s, "LimitsExceeded") for s in range(2)]
    assert 6.0 <= sum(r.cost for r in records) <= 6.0 + 2, [r.cost for r in records]


def _slow_argv(tasks: Path, out: Path, recordings: Path) -> list[str]:
    return cli_argv("batch", str(tasks), "-o", str(out), "--env", "bwrap", "-w", "3", "--rollouts", "3",
                    "-c", "model.model_class=replay",
                    "-c", f"model.trajectory={recordings}/{{sample}}.traj.json")


@pytest.mark.bwrap
def test_sigkill_in_the_middle_of_a_group_then_only_the_missing_sample_runs(bwrap_ok, calc_repo, tmp_path):
    marker = f"sleep 6.{secrets.randbelow(10**6) + 10**6}"  # this test's own
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    for sample in (0, 1):
        recording(recordings / f"{sample}.traj.json", [FIX, SUBMIT])
    recording(recordings / "2.traj.json", [FIX, marker, SUBMIT])
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("g", calc_repo)])
    out = tmp_path / "out"

    def two_in_and_third_running() -> bool:
        return len(ResultsLog(out / "results.jsonl").read()) == 2 and bool(_processes(marker))

    proc = subprocess.Popen(_slow_argv(tasks, out, recordings), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, text=True)
    try:
        assert wait_for(two_in_and_third_running, 120), "never two samples committed and the third running"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert wait_for(lambda: not _processes(marker), 30)  # the sandbox died with its parent
    swept = [e for e in gc_stores() if e["owner_pid"] == str(proc.pid)]  # its snapshot store: gc's
    assert [e["action"] for e in swept] == ["removed"], swept
    first = ResultsLog(out / "results.jsonl").read()
    assert sorted(r.sample for r in first) == [0, 1]

    resumed = run(_slow_argv(tasks, out, recordings), timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = ResultsLog(out / "results.jsonl").read()
    assert [r.sample for r in records[2:]] == [2]  # only the missing sample ran
    assert all(r.done and r.attempt == 1 and r.exit_status == "Submitted" for r in records)
    samples = json.loads((out / "preds.samples.json").read_text())
    assert [p["sample"] for p in samples["g"]] == [0, 1, 2] and all(p["model_patch"] for p in samples["g"])
    assert {r.group for r in records[:2]} != {records[2].group}  # the resumed sample: a preparation of its own


def _processes(marker: str) -> list[str]:
    done = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "pgrep" not in line and "python" not in line]


@pytest.mark.bwrap
def test_ray_runs_one_group_across_nodes(ray_cluster, bwrap_ok, calc_repo, tmp_path):
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    for sample in range(3):
        recording(recordings / f"{sample}.traj.json", [FIX, "sleep 2", SUBMIT])
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("ray-group", calc_repo)])
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "-o", str(out), "--env", "bwrap",
                           "-w", "2", "--rollouts", "3", f"--ray={ray_cluster.address}", "-c", "model.model_class=replay",
                           "-c", f"model.trajectory={recordings}/{{sample}}.traj.json"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=ray_cluster.env)
    assert done.returncode == 0, done.stdout + done.stderr
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted(r.sample for r in records) == [0, 1, 2] and all(r.done and r.attempt == 1 for r in records)
    by_node = {r.ray_node: {x.sample for x in records if x.ray_node == r.ray_node} for r in records}
    # -w 2: samples [0, 1] in one Ray task (2 slots, one node), [2] in another, at once: a node offers 2
    assert sorted(map(sorted, by_node.values())) == [[0, 1], [2]]
    assert all((out / "ray-group" / str(s) / "ray-group.traj.json").is_file() for s in range(3))
