"""The bundled task suite (examples/tasks): what the build makes, and the whole suite replayed on
docker with evaluation: the resolved count as recorded, the one wrong recording unresolved."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time

import pytest
from batch_fixtures import run
from suite_fixtures import SCRIPTED_FAILURE, replay_args, rows, suite  # noqa: F401 - fixture

from swe_sandbox.batch import load_tasks

from helpers.variants import require_backend

#: The label that tells this test's containers apart.
LABEL = "swe-sandbox.test"


def git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_build_makes_swebench_style_tasks(suite):
    tasks = load_tasks(suite / "tasks.jsonl")
    by_repo = {t.model_extra["repo"] for t in tasks}
    assert len(tasks) >= 20 and len(by_repo) >= 4
    assert [t.instance_id for t in load_tasks(suite / "tasks-workspace.jsonl")] == [t.instance_id for t in tasks]
    for task in tasks:
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS and task.cwd == "/testbed"
        assert task.image == f"swe-sandbox-suite/{task.instance_id}"
        repo = suite / "workspaces" / task.instance_id
        assert git(repo, "rev-list", "--count", "HEAD").strip() == "1" and git(repo, "status", "--porcelain") == ""
        assert (suite / "solutions" / f"{task.instance_id}.traj.json").is_file()
        # the tests that catch the bug are hidden from the agent (out of the workspace, so out of the
        # image), Jinja's doctests too (a test file made of them): test_patch adds them
        added = {line.split("def ", 1)[1].split("(")[0] for line in task.test_patch.splitlines()
                 if line.startswith("+") and "def test" in line}
        assert {name.split("::")[-1].split("[")[0] for name in task.FAIL_TO_PASS} <= added
        for name in task.FAIL_TO_PASS:
            file, *path = name.split("[")[0].split("::")
            assert not _defines(repo / file, path), name
        assert "--doctest-modules" not in task.eval_command  # graded by docstrings the agent could edit


def _defines(file, path: list[str]) -> bool:
    """Whether the Python file ``file`` (if it exists) defines ``Class::...::function`` (``path``)."""
    if not file.is_file():
        return False
    body = ast.parse(file.read_text()).body
    for name in path:
        found = [node for node in body if getattr(node, "name", None) == name]
        if not found:
            return False
        body = getattr(found[0], "body", [])
    return True


@pytest.mark.docker
def test_suite_replayed_on_docker_resolves_as_recorded(suite, tmp_path):
    require_backend("docker")
    label = f"suite-{tmp_path.name}"  # this batch's containers, apart from other runs' on the same images
    out = tmp_path / "out"
    done = run([sys.executable, "-m", "swe_sandbox", "batch", str(suite / "tasks.jsonl"), "-o", str(out),
                "--env", "docker", "-w", "4", "--eval", *replay_args(suite),
                "-c", f'environment.labels={{"{LABEL}": "{label}"}}'], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    expected = sorted(r["instance_id"] for r in rows(build=suite) if r["instance_id"] != SCRIPTED_FAILURE)
    assert report["resolved_ids"] == expected and report["unresolved_ids"] == [SCRIPTED_FAILURE]
    assert f"resolved: {len(expected)}/{len(expected) + 1}" in done.stdout
    deadline = time.monotonic() + 10  # removal by the engine may lag a moment behind the batch's exit
    while (left := _containers(label)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"containers of this batch left: {left}"


def _containers(label: str) -> set[str]:
    """Ids of docker containers (any state) labelled ``LABEL=label``."""
    done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}={label}"],
                          capture_output=True, text=True)
    return set(done.stdout.split())
