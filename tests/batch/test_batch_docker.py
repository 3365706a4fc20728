"""The batch on docker: with image_pull: never, an unknown image is a task-file error (line and
field, nothing written);
a batch with evaluation runs and leaves no container behind."""

from __future__ import annotations

import json
import subprocess

import pytest
from batch_fixtures import FIX, SUBMIT, batch_argv, calc_repo, calc_task, fix_patch, run, run_config, write_tasks  # noqa: F401

from swe_sandbox.batch import load_tasks, run_batch, run_eval
from swe_sandbox.batch.records import ResultsLog

from helpers.variants import require_backend

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def docker_ok() -> None:
    require_backend("docker")


def own_containers(marker: str) -> list[str]:
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=swe-sandbox.test={marker}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.parametrize("image, pulls, says", [
    ("example.invalid/no-such-image", "never", "is not in docker's images and environment.image_pull is never"),
    ("swe-sandbox/no-such-image", "missing", "is not in docker's images; it is built here, never pulled"),
])
def test_an_image_that_will_not_be_pulled_is_named_with_its_line(image, pulls, says, calc_repo, tmp_path):
    """Missing and never pulled (``image_pull: never``, or an image this project builds): refused
    before anything runs, the task's line and field named."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("ok", calc_repo, image="swe-sandbox/base"),
                                                   calc_task("bad", calc_repo, image_name=image)])
    argv = [*batch_argv(tasks, tmp_path / "out"), "-c", f"environment.image_pull={pulls}"]
    argv[argv.index("bwrap")] = "docker"
    done = run(argv, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"(line 2): image: docker: {image} {says}" in done.stderr
    assert not (tmp_path / "out").exists()


def test_batch_with_eval_on_docker(calc_repo, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"d{n}", calc_repo) for n in range(2)]))
    env = {"backend": "docker", "labels": {"swe-sandbox.test": tmp_path.name}}
    out = run_batch(tasks, tmp_path / "out", run_config=run_config([FIX, SUBMIT]), env_config=env,
                    workers=2, evaluate=True)
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted((r.instance_id, r.eval_status, r.backend) for r in records) == [
        ("d0", "resolved", "docker"), ("d1", "resolved", "docker")]
    assert json.loads((out / "report.json").read_text())["resolved_instances"] == 2
    assert own_containers(tmp_path.name) == []


#: An agent's command that raises the runner's OOM score and fills the sandbox's memory: the OOM
#: killer takes the runner and the sandbox dies (DESIGN.md §9: the agent's outcome, not the
#: infrastructure's, so it is not run again for three times the model calls).
KILL_THE_RUNNER = ("echo 1000 > /proc/1/oom_score_adj; echo 0 > /proc/self/oom_score_adj; "
                   "python3 -c 'x = []\nwhile True: x.append(bytearray(32 << 20))'")


def test_an_agent_that_kills_its_sandbox_is_done_in_one_attempt(calc_repo, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task("oom", calc_repo)]))
    env = {"backend": "docker", "memory": "256m", "labels": {"swe-sandbox.test": tmp_path.name}}
    out = run_batch(tasks, tmp_path / "out", run_config=run_config([KILL_THE_RUNNER, SUBMIT]), env_config=env,
                    max_attempts=3)
    records = ResultsLog(out / "results.jsonl").read()
    assert [(r.attempt, r.exit_status, r.done) for r in records] == [(1, "SandboxDied", True)], records
    assert "gone" in records[0].error or "died" in records[0].error
    assert own_containers(tmp_path.name) == []


def test_the_evaluation_sandbox_has_no_network_unless_the_task_says(calc_repo, fix_patch, tmp_path):
    """The agent's environment has a network (``bridge``); the evaluation's has only loopback, unless
    the task's ``eval_network`` is ``on`` (the patch could send the hidden tests out)."""
    only_loopback = "test \"$(ls /sys/class/net)\" = lo"
    rows = [calc_task(name, calc_repo, FAIL_TO_PASS=[], PASS_TO_PASS=[], test_patch="", log_parser="exit_status",
                      eval_command=only_loopback, **fields)
            for name, fields in (("offline", {}), ("online", {"eval_network": "on"}))]
    preds = [{"instance_id": r["instance_id"], "model_name_or_path": "m", "model_patch": fix_patch} for r in rows]
    env = {"backend": "docker", "network": "bridge", "labels": {"swe-sandbox.test": tmp_path.name}}
    report = run_eval(preds, load_tasks(write_tasks(tmp_path / "t.jsonl", rows)), tmp_path / "out", env_config=env)
    assert (report["resolved_ids"], report["unresolved_ids"]) == (["offline"], ["online"])
