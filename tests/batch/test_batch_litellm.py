"""The bundled suite (one task per project) with evaluation through the real litellm client against
the scripted OpenAI-compatible server, several workers, on bwrap and docker; one instance's fix
is scripted to be incomplete, so it fails its evaluation."""

from __future__ import annotations

import json
import sys

import pytest
from batch_fixtures import run
from conftest import require_backend
from helpers.openai_server import ScriptedOpenAIServer, tool_call
from suite_fixtures import SCRIPTED_FAILURE, SUBSET, fix_any, suite  # noqa: F401 - fixture

pytest.importorskip("litellm")
API_KEY = "sk-test-batch-0123456789abcdef"
BACKENDS = {"bwrap": ("tasks-workspace.jsonl", "bwrap.yaml"), "docker": ("tasks.jsonl", "docker")}


@pytest.mark.parametrize("backend", [pytest.param("bwrap", marks=pytest.mark.bwrap),
                                     pytest.param("docker", marks=pytest.mark.docker)])
def test_suite_through_litellm(backend, suite, tmp_path):
    require_backend(backend)
    tasks, env = BACKENDS[backend]
    env = str(suite / env) if env.endswith(".yaml") else env
    pattern = "|".join(SUBSET) + "$"
    # one reply per instance, whatever order the workers ask in: the fix of whichever task it is, then submit
    with ScriptedOpenAIServer([tool_call(fix_any(SUBSET)) for _ in SUBSET], require_tools=True) as server:
        done = run([sys.executable, "-m", "swe_sandbox", "batch", str(suite / tasks), "-o", str(tmp_path / "out"),
                    "--env", env, "-w", "3", "--eval", "--filter", pattern, "-m", "openai/scripted",
                    "-c", f"model.model_kwargs.api_base={server.url}/v1", "-c", f"model.model_kwargs.api_key={API_KEY}",
                    "-c", "model.cost_tracking=ignore_errors"], timeout=300)
        statuses = [r.status for r in server.log]
    assert done.returncode == 0, done.stdout + done.stderr
    assert statuses == [200] * len(SUBSET)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["resolved_ids"] == sorted(set(SUBSET) - {SCRIPTED_FAILURE})
    assert report["unresolved_ids"] == [SCRIPTED_FAILURE]
    assert f"resolved: {len(SUBSET) - 1}/{len(SUBSET)}" in done.stdout
    traj = (tmp_path / "out" / SUBSET[0] / f"{SUBSET[0]}.traj.json").read_text()
    assert API_KEY not in traj and json.loads(traj)["info"]["model_stats"]["api_calls"] == 1
