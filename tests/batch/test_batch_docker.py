"""The batch on docker: with image_pull: never, an unknown image is a task-file error (line and
field, nothing written);
a batch with evaluation runs and leaves no container behind."""

from __future__ import annotations

import json
import subprocess

import pytest
from batch_fixtures import FIX, SUBMIT, batch_argv, calc_repo, calc_task, run, run_config, write_tasks  # noqa: F401
from conftest import require_backend

from swe_sandbox.batch import load_tasks, run_batch
from swe_sandbox.batch.records import ResultsLog

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def docker_ok() -> None:
    require_backend("docker")


def own_containers(marker: str) -> list[str]:
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=swe-sandbox.test={marker}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_unknown_image_is_named_with_its_line_when_pulls_are_off(calc_repo, tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("ok", calc_repo, image="swe-sandbox/base"),
                                                   calc_task("bad", calc_repo, image_name="swe-sandbox/no-such-image")])
    argv = [*batch_argv(tasks, tmp_path / "out"), "-c", "environment.image_pull=never"]
    argv[argv.index("bwrap")] = "docker"
    done = run(argv, timeout=60)
    assert done.returncode == 2, done.stderr
    assert ("(line 2): image: docker: swe-sandbox/no-such-image is not in docker's images and "
            "environment.image_pull is never") in done.stderr
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
