"""The bundled suite (one task per project) with evaluation through the real litellm client against
the scripted OpenAI-compatible server, several workers, on bwrap and docker; one instance's fix
is scripted to be incomplete, so it fails its evaluation."""

from __future__ import annotations

import json
import sys

import pytest
from batch_fixtures import calc_repo, calc_task, run, write_tasks  # noqa: F401 - fixture
from suite_fixtures import SCRIPTED_FAILURE, SUBSET, fix_any, suite  # noqa: F401 - fixture

from swe_sandbox.batch.driver import CANCEL_GRACE_S
from swe_sandbox.batch.records import ResultsLog

from helpers.interrupts import interrupt_when
from helpers.openai_server import ScriptedOpenAIServer, SilentProvider, rate_limited, tool_call
from helpers.variants import require_backend

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


@pytest.mark.bwrap
def test_ctrl_c_does_not_sit_out_a_rate_limit(calc_repo, tmp_path):
    """Ctrl-C while every agent waits out a provider's ``Retry-After: 60``: the waits end at once,
    the batch exits 130 within seconds, nothing is recorded (everything runs again on resume)."""
    require_backend("bwrap")
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(f"r{n}", calc_repo) for n in range(2)])
    with ScriptedOpenAIServer([rate_limited(retry_after=60) for _ in range(2)]) as server:
        # settle: nothing to poll once both agents are inside their retry waits
        done = interrupt_when(["batch", str(tasks), "-o", str(tmp_path / "out"), "--env", "bwrap", "-w", "2",
                               *scripted_model(server.url)], lambda: len(server.log) == 2, settle=0.5)
    assert done.returncode == 130, done.stderr
    assert done.exit_s < 10, done
    assert len(server.log) == 2  # no retry after the interrupt
    assert ResultsLog(tmp_path / "out" / "results.jsonl").read() == []


def scripted_model(url: str) -> list[str]:
    """The batch options of a litellm model at ``url`` (an OpenAI-compatible server)."""
    return ["-m", "openai/scripted", "-c", f"model.model_kwargs.api_base={url}/v1",
            "-c", f"model.model_kwargs.api_key={API_KEY}", "-c", "model.cost_tracking=ignore_errors"]


@pytest.mark.bwrap
def test_ctrl_c_abandons_a_request_in_flight_after_the_grace(calc_repo, tmp_path):
    """A provider that never answers: after Ctrl-C the batch waits ``CANCEL_GRACE_S`` for the
    agent's request, then exits 130 at once, saying so; nothing is recorded."""
    require_backend("bwrap")
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("h0", calc_repo)])
    silent = SilentProvider()
    try:
        done = interrupt_when(["batch", str(tasks), "-o", str(tmp_path / "out"), "--env", "bwrap",
                               *scripted_model(f"http://127.0.0.1:{silent.port}")], silent.asked.is_set,
                              wait=CANCEL_GRACE_S + 30)
    finally:
        silent.close()
    assert done.returncode == 130, done.stderr
    assert CANCEL_GRACE_S - 1 < done.exit_s < CANCEL_GRACE_S + 10, done
    assert "still busy" in done.stderr
    assert ResultsLog(tmp_path / "out" / "results.jsonl").read() == []
