#!/usr/bin/env python3
"""The Ray executor's cost: the same short rollouts through the thread pool and through Ray.

    python benchmarks/bench_ray.py [--rollouts 200] [--workers 4] [--rounds 2]

- Work: ``--rollouts`` instances of one tiny task (a git repository with a bug, copied into each
  sandbox), on bwrap, agents only (no evaluation). The model replays a recorded 3-step run
  (``replay``: read the file, fix it, submit), recorded once at the start with the in-process
  ``deterministic`` model.
- Paths, in one process, alternating per round (``--rounds``; medians reported): ``run_batch(...,
  workers=W)`` on the thread pool, and ``run_batch(..., executor="ray")`` on a local Ray of one
  node offering W ``swe_sandbox`` slots, started once before the rounds (its start is reported
  apart: a cluster is started once and serves many batches) and reused by every Ray round.
- Measured per run: wall time of ``run_batch`` (its output directory fresh), rollouts started per
  second (= rollouts / wall), every rollout checked to be ``Submitted``.
- Ray's overhead: ``wall(ray) - wall(threads)`` as a share of ``wall(ray)``, and per rollout in
  slot time, ``W * (wall(ray) - wall(threads)) / rollouts`` (ms): what each rollout costs a slot
  more than on the thread pool (negative: Ray was faster, e.g. its workers are separate
  processes and do not share the driver's GIL).

A measurement, not a timed test. Needs bubblewrap and Ray (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIX = "sed -i 's/a - b/a + b/' calc.py"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"


def make_repo(root: Path) -> Path:
    repo = root / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "i"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    repo.chmod(0o755)
    return repo


def record(root: Path, task: dict) -> Path:
    """One 3-step run with the ``deterministic`` model; returns its trajectory (to replay)."""
    from swe_sandbox.agent.config import load_run_config
    from swe_sandbox.batch import load_tasks, rollout

    config = load_run_config()
    config["model"] = {"model_class": "deterministic", "outputs": ["cat calc.py", FIX, SUBMIT]}
    path = root / "recorded.traj.json"
    tasks = load_tasks(write_tasks(root / "one.jsonl", [task]))
    result = rollout(tasks[0], config, {"backend": "bwrap"}, evaluate=False, trajectory_path=path)
    assert result.exit_status == "Submitted" and result.steps == 3, result
    return path


def write_tasks(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_run(tasks: list, root: Path, config: dict, workers: int, executor: str) -> float:
    from swe_sandbox.batch import run_batch
    from swe_sandbox.batch.records import ResultsLog

    out = Path(tempfile.mkdtemp(prefix=f"{executor}-", dir=root))
    started = time.monotonic()
    run_batch(tasks, out, run_config=config, env_config="bwrap", workers=workers, executor=executor)
    wall = time.monotonic() - started
    records = ResultsLog(out / "results.jsonl").read()
    assert len(records) == len(tasks) and {r.exit_status for r in records} == {"Submitted"}, records[:3]
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import ray

    from swe_sandbox.agent.config import load_run_config
    from swe_sandbox.batch import load_tasks
    from swe_sandbox.batch.ray_settings import RESOURCE

    with tempfile.TemporaryDirectory(prefix="bench-ray-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        task = {"instance_id": "calc", "problem_statement": "add() subtracts", "workspace": str(make_repo(root))}
        config = load_run_config()
        config["model"] = {"model_class": "replay", "trajectory": str(record(root, task))}
        tasks = load_tasks(write_tasks(root / "tasks.jsonl", [{**task, "instance_id": f"r{n}"}
                                                              for n in range(args.rollouts)]))
        started = time.monotonic()
        ray.init(address="local", num_cpus=1, resources={RESOURCE: args.workers}, include_dashboard=False,
                 object_store_memory=128 * 2**20, log_to_driver=False)
        ray_start = time.monotonic() - started
        walls: dict[str, list[float]] = {"threads": [], "ray": []}
        for n in range(args.rounds):
            for executor in (("threads", "ray") if n % 2 == 0 else ("ray", "threads")):
                walls[executor].append(one_run(tasks, root, config, args.workers, executor))
                print(f"round {n + 1} {executor}: {walls[executor][-1]:.2f} s", file=sys.stderr)
        ray.shutdown()
    report(walls, args.rollouts, args.workers, ray_start)
    return 0


def report(walls: dict[str, list[float]], rollouts: int, workers: int, ray_start: float) -> None:
    threads, on_ray = statistics.median(walls["threads"]), statistics.median(walls["ray"])
    extra = on_ray - threads
    print(f"{rollouts} rollouts (recorded 3-step task, bwrap), -w {workers}, median of {len(walls['ray'])} rounds")
    print("| path | wall s | rollouts/s |\n| --- | --- | --- |")
    print(f"| thread pool | {threads:.2f} | {rollouts / threads:.1f} |")
    print(f"| Ray (1 local node, {workers} slots) | {on_ray:.2f} | {rollouts / on_ray:.1f} |")
    print(f"Ray overhead: {1000 * workers * extra / rollouts:.1f} ms per rollout (slot time), "
          f"{100 * extra / on_ray:.1f}% of wall time; local Ray start {ray_start:.1f} s (once)")


if __name__ == "__main__":
    raise SystemExit(main())
