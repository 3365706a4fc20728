"""``swe-sandbox run --env docker|podman`` leaves no container behind: not after a normal run, and
not after ``kill -9`` of the run once ``swe-sandbox gc`` has run. Also ``gc``'s own output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import swe_sandbox
from swe_sandbox.environments.container.engine import LABEL_OWNER_PID
from swe_sandbox.testing.kit import host_processes_with, unique_marker

CLI = [sys.executable, "-m", "swe_sandbox"]


def containers_of(engine: str, pid: int) -> list[str]:
    """Ids of the swe-sandbox containers (any state) whose owner label is ``pid``."""
    managed = swe_sandbox.get_environment(engine).engine.list_managed()
    return [c["id"][:12] for c in managed if c["labels"].get(LABEL_OWNER_PID) == str(pid)]


def sleepers(marker: str) -> list[str]:
    """Host processes ``sleep MARKER`` (not the run itself, whose argv holds the model's replies)."""
    return [p for p in host_processes_with(marker) if "swe_sandbox" not in p]


def run_argv(engine: str, out, *outputs: str) -> list[str]:
    return [*CLI, "run", "--env", engine, "-t", "x", "-o", str(out), "-c", "model.model_class=deterministic",
            "-c", f"model.outputs={json.dumps(list(outputs))}"]


def test_a_normal_run_leaves_no_container(engine, tmp_path):
    proc = subprocess.Popen(run_argv(engine, tmp_path / "t.json", "echo hi",
                                     "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo done"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    assert json.loads((tmp_path / "t.json").read_text())["info"]["exit_status"] == "Submitted"
    assert containers_of(engine, proc.pid) == []


def test_kill_9_of_a_run_then_gc_leaves_no_container(engine, tmp_path):
    marker = unique_marker()
    proc = subprocess.Popen(run_argv(engine, tmp_path / "t.json", f"sleep {marker}"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not sleepers(marker):
            assert proc.poll() is None, "the run ended before its command started"
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        assert containers_of(engine, proc.pid) != []
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    done = subprocess.run([*CLI, "gc", "--env", engine], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert containers_of(engine, proc.pid) == [], done.stdout
    deadline = time.monotonic() + 10  # the engine reaps the container's processes asynchronously
    while sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleepers(marker) == []


def test_gc_dry_run_keeps_and_reports_in_json(engine):
    with swe_sandbox.get_environment(engine) as live:
        live.start()
        done = subprocess.run([*CLI, "gc", "--env", engine, "--dry-run", "--json"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        report = {entry["id"]: entry for entry in json.loads(done.stdout)}
        assert report[live.container_id[:12]]["action"] == "kept (owner alive)"
        assert live.execute({"command": "echo still here"})["output"] == "still here\n"


def test_gc_refuses_an_unknown_backend():
    done = subprocess.run([*CLI, "gc", "--env", "bwrap"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert done.returncode == 2 and "gc knows docker and podman" in done.stderr
