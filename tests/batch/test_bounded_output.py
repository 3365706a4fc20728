"""An agent whose every command prints 10 MiB: what the model sees, the trajectory's size and the
driver's memory stay bounded (before: 25 such steps wrote a 262 MB trajectory 25 times and held
855 MB in the driver)."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from batch_fixtures import bwrap_ok, run_config  # noqa: F401 - fixture

from swe_sandbox.agent.observation import OBSERVATION_LIMIT, TRAJECTORY_OUTPUT_LIMIT, bounded
from swe_sandbox.batch import run_batch
from swe_sandbox.batch.tasks import Task

STEPS = 25
#: Just under the runner's 10 MiB cap, so what is cut is cut by the agent alone.
TEN_MIB = "head -c 10485000 /dev/zero | tr '\\0' x; echo END"


@pytest.mark.bwrap
def test_ten_mib_outputs_stay_bounded_in_the_trajectory_and_the_driver(tmp_path, bwrap_ok):  # noqa: F811
    config = run_config([TEN_MIB] * STEPS + ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"], step_limit=0)
    tracemalloc.start()
    try:
        run_batch([Task(instance_id="loud", problem_statement="-")], tmp_path / "out", run_config=config,
                  env_config="bwrap")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    trajectory = tmp_path / "out" / "loud" / "loud.traj.json"
    data = json.loads(trajectory.read_text())
    assert data["info"]["exit_status"] == "Submitted"
    observations = [m for m in data["messages"] if m["role"] == "tool"][:STEPS]
    assert len(observations) == STEPS
    for message in observations:
        assert len(message["content"]) < OBSERVATION_LIMIT + 500  # head, note, tail and the template
        assert "characters elided" in message["content"] and message["content"].rstrip().endswith("</output>")
        assert "END" in message["content"]  # the tail is there
        assert TRAJECTORY_OUTPUT_LIMIT <= len(message["extra"]["raw_output"]) < TRAJECTORY_OUTPUT_LIMIT + 500
    size = trajectory.stat().st_size
    assert size < STEPS * (OBSERVATION_LIMIT + TRAJECTORY_OUTPUT_LIMIT + 4000), size  # about 1.5 MB, not 262 MB
    assert peak < 96 << 20, f"driver peak {peak / 2**20:.0f} MiB"  # one 10 MiB output in flight, not 25
    print(f"trajectory {size / 1e6:.2f} MB, driver peak {peak / 2**20:.0f} MiB")


def test_bounded_keeps_head_and_tail_and_says_how_much_is_gone():
    output = "".join(f"{i:05d}\n" for i in range(10_000))  # 60 000 characters
    result = {"output": output, "returncode": 0, "extra": {"truncated": False}}
    cut = bounded(result, limit=1000, keep=4000)
    assert cut["output"].startswith(output[:500]) and cut["output"].endswith(output[-500:])
    assert cut["extra"]["elided_chars"] == 59_000 and "59000 characters elided" in cut["output"]
    assert cut["extra"]["raw_output"].startswith(output[:2000]) and cut["extra"]["raw_output"].endswith(output[-2000:])
    assert result["output"] == output and "elided_chars" not in result["extra"]  # the original is unchanged
    assert bounded(result, limit=60_000) is result and bounded(result, limit=0) is result
    assert "raw_output" not in bounded(result, limit=1000, keep=0)["extra"]


def test_the_limits_are_agent_config(tmp_path):
    from swe_sandbox.agent import DefaultAgent, load_run_config
    from swe_sandbox.environments import get_environment
    from swe_sandbox.models.test_models import DeterministicModel

    model = DeterministicModel(outputs=["seq 1 5000", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"])
    agent_config = {**load_run_config(overrides=["agent.observation_limit=100",
                                                 "agent.trajectory_output_limit=0"])["agent"]}
    with get_environment("local", cwd=str(tmp_path)) as env:
        agent = DefaultAgent(model, env, **agent_config)
        agent.run("t")
    (observation,) = [m for m in agent.messages if m["role"] == "tool"][:1]
    assert "1\n2\n" in observation["content"] and "4999\n5000" in observation["content"]
    assert observation["extra"]["elided_chars"] == len("".join(f"{i}\n" for i in range(1, 5001))) - 100
    assert "raw_output" not in observation["extra"]
