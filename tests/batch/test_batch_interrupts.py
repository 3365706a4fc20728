"""``swe-sandbox batch`` on docker stopped the hard ways: ``kill -9`` mid-run then the same command
again (exactly once, ``preds.json`` as an uninterrupted run writes it, ``swe-sandbox gc`` finds
nothing of the killed run once its attaches broke), and Ctrl-C once or twice (exit 130, no
container left)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from batch_fixtures import (  # noqa: F401
    MARKER,
    batch_argv,
    calc_repo,
    calc_task,
    fix_patch,
    run,
    wait_for,
    write_tasks,  # noqa: F401
)

from swe_sandbox.batch.records import ResultsLog

from helpers.variants import require_backend

pytestmark = pytest.mark.docker
N = 4


@pytest.fixture(autouse=True)
def docker_ok() -> None:
    require_backend("docker")


def docker_argv(tasks, out, label: str) -> list[str]:
    argv = batch_argv(tasks, out, "-c", f'environment.labels={{"swe-sandbox.test": "{label}"}}')
    argv[argv.index("bwrap")] = "docker"
    return argv


def containers(label: str, *states: str) -> list[str]:
    """Ids of the test's containers (any state, or those in ``states``: running, created, ...)."""
    filters = ["--filter", f"label=swe-sandbox.test={label}"] + [f for s in states for f in ("--filter", f"status={s}")]
    done = subprocess.run(["docker", "ps", "-aq", *filters], capture_output=True, text=True, check=True)
    return done.stdout.split()


def all_running(label: str, count: int) -> bool:
    """``count`` containers, all started. (A kill between a container's create and its start
    leaves it "created", without a process to end: ``swe-sandbox gc`` removes those.)"""
    return len(containers(label, "running")) == count and not containers(label, "created")


def gc_entries(owner_pid: int) -> list[dict]:
    done = run([sys.executable, "-m", "swe_sandbox", "gc", "--env", "docker", "--dry-run", "--json"], timeout=60)
    return [c for c in json.loads(done.stdout or "[]") if str(c.get("owner_pid")) == str(owner_pid)]



def start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)


def test_sigkill_then_resume_on_docker(calc_repo, fix_patch, tmp_path):
    label, out = tmp_path.name, tmp_path / "out"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(f"k{n}", calc_repo) for n in range(N)])
    proc = start(docker_argv(tasks, out, label))
    try:
        assert wait_for(lambda: len(ResultsLog(out / "results.jsonl").read()) >= 1 and all_running(label, 2), 120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert wait_for(lambda: not containers(label), 60), containers(label)  # attaches broke: they ended
    assert gc_entries(proc.pid) == []
    json.loads((out / "preds.json").read_text())
    assert len(ResultsLog(out / "results.jsonl").read()) < N

    resumed = run(docker_argv(tasks, out, label), timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted(r.instance_id for r in records) == [f"k{n}" for n in range(N)] and all(r.attempt == 1 for r in records)
    expected = {f"k{n}": {"model_name_or_path": "deterministic", "instance_id": f"k{n}", "model_patch": fix_patch}
                for n in range(N)}  # what an uninterrupted run writes
    assert json.loads((out / "preds.json").read_text()) == expected
    assert containers(label) == []


@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_exits_130_and_leaves_no_container(interrupts, calc_repo, tmp_path):
    label, out = tmp_path.name, tmp_path / "out"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(f"c{n}", calc_repo) for n in range(N)])
    proc = start(docker_argv(tasks, out, label) + ["-c", f'model.outputs=["{MARKER}", "sleep 60"]'])
    try:
        assert wait_for(lambda: all_running(label, 2), 120)
        for _ in range(interrupts):
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
            time.sleep(0.05)  # the second one lands while the first one's cleanup runs
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert ("interrupted twice" in stderr) == (interrupts == 2), stderr
    assert wait_for(lambda: not containers(label), 60), containers(label)
    assert ResultsLog(out / "results.jsonl").read() == []  # nothing finished: everything runs again on resume
