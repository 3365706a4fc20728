"""Trajectories cross over both ways: our ``replay`` model re-runs, in our sandboxes, a trajectory
that mini-swe-agent's own CLI wrote (with mini's own local environment), and mini's inspector
(``TrajectoryInspector``, the app behind ``mini-extra inspector``) opens the trajectory that
``swe-sandbox run`` wrote of that replay, on bwrap and docker.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.mini import SENTINEL, backend_params, deterministic_outputs, environment_fields, quiet_mini, run_mini

COMMANDS = ["printf 'b\\na\\nc\\n' > letters.txt && sort letters.txt",
            "wc -l < letters.txt; cat missing.txt",
            f"echo {SENTINEL} && sort -r letters.txt"]
SUBMISSION = "c\nb\na\n"


def mini_cli_trajectory(tmp_path: Path) -> dict:
    """What ``mini`` writes with its own LocalEnvironment (stock ``mini.yaml``, deterministic model)."""
    work, out = tmp_path / "mini-work", tmp_path / "mini.traj.json"
    work.mkdir()
    done = run_mini(["mini", "-c", "mini.yaml", "--environment-class", "local", "-c", f"environment.cwd={work}",
                     "-m", "deterministic", "-c", "model.model_class=deterministic",
                     "-c", f"model.outputs={json.dumps(deterministic_outputs(*COMMANDS))}",
                     "-y", "--exit-immediately", "-t", "Sort the letters.", "-o", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["info"]["exit_status"] == "Submitted" and data["info"]["submission"] == SUBMISSION
    assert data["info"]["config"]["environment_type"] == "minisweagent.environments.local.LocalEnvironment"
    return data


def inspect(path: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every step as mini's inspector shows it: (title, [(header, content), ...])."""
    quiet_mini()
    from minisweagent.run.utilities.inspector import TrajectoryInspector

    async def browse() -> list[tuple[str, list[tuple[str, str]]]]:
        app = TrajectoryInspector([path])
        pages = []
        async with app.run_test() as pilot:
            for _ in range(app.n_steps):
                headers = [str(w.content) for w in app.query(".message-header")]
                contents = [str(w.content) for w in app.query(".message-content")]
                pages.append((app.title, list(zip(headers, contents, strict=True))))
                await pilot.press("l")  # next step
                await pilot.pause()
        return pages

    return asyncio.run(browse())


@pytest.mark.parametrize("backend", backend_params(["bwrap", "docker"]))
def test_replay_of_a_mini_cli_trajectory_then_mini_inspector_on_ours(backend, tmp_path):
    environment_fields(backend, tmp_path)  # skips (fails under CI) when the backend cannot run here
    recorded = mini_cli_trajectory(tmp_path)
    ours = tmp_path / "ours.traj.json"
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "run", "--env", backend, "-t", "Sort the letters.",
                           "-c", "model.model_class=replay", "-c", f"model.trajectory={tmp_path / 'mini.traj.json'}",
                           "-o", str(ours)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(ours.read_text())
    assert (data["info"]["exit_status"], data["info"]["submission"]) == ("Submitted", SUBMISSION)
    # the same outputs, in the sandbox, as mini's own environment produced on the host
    theirs = [json.loads(m["content"])["output"] for m in recorded["messages"][3:] if m["role"] == "user"]
    replayed = [m["content"].split("<output>\n", 1)[1].removesuffix("</output>")
                for m in data["messages"] if m["role"] == "tool"]
    assert replayed[:2] == theirs and "No such file or directory" in replayed[1]

    pages = inspect(ours)
    assert len(pages) == 1 + len(COMMANDS)  # the task, then one page per assistant turn
    assert pages[0][0] == f"Trajectory 1/1 - {ours.name} - Step 1/{len(pages)}"
    assert [h for h, _ in pages[0][1]] == ["SYSTEM", "USER"] and "Sort the letters." in pages[0][1][1][1]
    for page, command, output in zip(pages[1:], COMMANDS, replayed, strict=True):
        assert [h for h, _ in page[1]][:2] == ["ASSISTANT", "TOOL"]
        assert command in page[1][0][1] and output in page[1][1][1]
    assert pages[-1][1][-1][0] == "EXIT"
