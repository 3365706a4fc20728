"""A batch with evaluation through the real litellm client against the scripted OpenAI-compatible
server, several workers, on bwrap and docker; one instance is scripted to fail its evaluation."""

from __future__ import annotations

import json
import sys

import pytest
from batch_fixtures import FIX, SUBMIT, calc_repo, calc_task, run, write_tasks  # noqa: F401
from conftest import require_backend
from helpers.openai_server import ScriptedOpenAIServer, tool_call

pytest.importorskip("litellm")
API_KEY = "sk-test-batch-0123456789abcdef"
N = 3


@pytest.mark.parametrize("backend", [pytest.param("bwrap", marks=pytest.mark.bwrap),
                                     pytest.param("docker", marks=pytest.mark.docker)])
def test_batch_through_litellm(backend, calc_repo, tmp_path):
    require_backend(backend)
    rows = [calc_task(f"l{n}", calc_repo) for n in range(N)]
    rows.append(calc_task("fails_eval", calc_repo, eval_command="python3 check.py && exit 1", FAIL_TO_PASS=[],
                          PASS_TO_PASS=[], test_patch=rows[0]["test_patch"], log_parser="exit_status"))
    tasks = write_tasks(tmp_path / "tasks.jsonl", rows)
    # one reply per instance, whatever order the workers ask in: fix and submit in one command
    with ScriptedOpenAIServer([tool_call(f"{FIX} && {SUBMIT}") for _ in rows], require_tools=True) as server:
        done = run([sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "-o", str(tmp_path / "out"),
                    "--env", backend, "-w", "3", "--eval", "-m", "openai/scripted",
                    "-c", f"model.model_kwargs.api_base={server.url}/v1", "-c", f"model.model_kwargs.api_key={API_KEY}",
                    "-c", "model.cost_tracking=ignore_errors"], timeout=240)
        statuses = [r.status for r in server.log]
    assert done.returncode == 0, done.stdout + done.stderr
    assert statuses == [200] * len(rows)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["resolved_ids"] == [f"l{n}" for n in range(N)] and report["unresolved_ids"] == ["fails_eval"]
    assert f"resolved: {N}/{N + 1}" in done.stdout
    traj = (tmp_path / "out" / "l0" / "l0.traj.json").read_text()
    assert API_KEY not in traj and json.loads(traj)["info"]["model_stats"]["api_calls"] == 1
