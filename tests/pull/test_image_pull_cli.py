"""The command line against the loopback registry: ``exec`` pulls a missing image with progress on
the terminal's stream, and ``image pull`` pre-pulls a task file's images with a summary of failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pull_fixtures import engine  # noqa: F401 - fixture

from swe_sandbox import get_environment

from helpers.engine_images import MARKER_PATH, has_image, pull_children, remove_pushed
from helpers.interrupts import interrupt_when


def swe_sandbox(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swe_sandbox", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def test_exec_pulls_a_missing_image_with_progress(engine, pushed):
    remove_pushed(engine, pushed)
    done = swe_sandbox("exec", "--env", engine, "-c", f"environment.image={pushed.name}", "--", f"cat {MARKER_PATH}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == pushed.token
    lines = done.stderr.splitlines()
    assert f"{engine}: pulling {pushed.name}" in lines, done.stderr
    assert any(line.startswith(f"{engine}: pulled {pushed.name} (") and "layers" in line for line in lines), done.stderr


def test_image_pull_names_the_missing_image_and_its_instances(engine, registry, pushed, tmp_path):
    remove_pushed(engine, pushed)
    missing = f"{registry.address}/swe-sandbox-test/missing:{pushed.token}"
    # no "image" field: --image-template names them from the tasks' own "repo" field
    tasks = [("a1", "base"), ("b1", "second"), ("b2", "second"), ("m1", "missing"), ("m2", "missing")]
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps({"instance_id": i, "problem_statement": "-", "repo": repo}) + "\n"
                                 for i, repo in tasks))
    template = f"{registry.address}/swe-sandbox-test/{{repo}}:{pushed.token}"
    done = swe_sandbox("image", "pull", str(task_file), "--env", engine, "-w", "3", "--image-template", template)
    assert done.returncode == 1, done.stdout + done.stderr
    summary = done.stdout.splitlines()
    assert summary[0] == "2 of 3 image(s) ready, 1 failed", done.stdout
    assert summary[1].startswith(f"FAILED {missing} (not_found): {engine}: {missing} was not found in the registry "
                                 f"{registry.address}"), done.stdout
    assert summary[2] == "  needed by 2 instance(s): m1, m2", done.stdout
    assert has_image(engine, pushed.name) and has_image(engine, pushed.second)
    assert not has_image(engine, missing)


def test_image_pull_of_a_task_file_without_images_is_a_usage_error(tmp_path: Path):
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text(json.dumps({"instance_id": "x", "problem_statement": "-"}) + "\n")
    done = swe_sandbox("image", "pull", str(task_file))
    assert done.returncode == 2
    assert "no task names an image (give --image-template)" in done.stderr


@pytest.mark.parametrize("command", ["batch", "image pull"])
def test_ctrl_c_stops_the_pulls_under_way(command, engine, silent_registry, tmp_path):
    """Ctrl-C while ``batch`` or ``image pull`` waits for a pull (a registry that never answers,
    ``pull_timeout`` 120 s): the pull is stopped at once, the command exits 130 within seconds,
    and no pull process or container is left."""
    image = f"{silent_registry}/swe-sandbox-test/hangs:{tmp_path.name.lower()}"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"instance_id": f"p{n}", "problem_statement": "-", "image": image}) + "\n"
                             for n in range(2)))
    common = ["--env", engine, "-c", "environment.pull_timeout=120", "-c",
              f'environment.labels={{"swe-sandbox.test": "{tmp_path.name}"}}']
    argv = (["batch", str(tasks), "-o", str(tmp_path / "out"), "-w", "2", *common,
             "-c", "model.model_class=deterministic", "-c", 'model.outputs=["true"]']
            if command == "batch" else ["image", "pull", str(tasks), *common[:4]])
    done = interrupt_when(argv, lambda: bool(pull_children(image)))
    assert done.returncode == 130, done.stderr
    assert done.exit_s < 10, done
    assert pull_children(image) == []
    labelled = get_environment(engine).engine.list_managed()
    assert not [c for c in labelled if tmp_path.name in json.dumps(c)], labelled
