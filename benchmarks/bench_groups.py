#!/usr/bin/env python3
"""A group of K rollouts of one task whose setup takes 5 s: K fresh sandboxes, against K forks of
one prepared sandbox (``snap.fork``), against one sandbox reset in place between the rollouts
(``env.reset``), side by side in one run.

    python benchmarks/bench_groups.py [--k 8] [--backends docker,podman,bwrap] [--rounds 1]

The task: a ``setup_command`` of about 5 s on an idle core (``SETUP``: a 1 s wait, as on a package
index, then 3000 files written and ~3.5 s of CPU, as an install resolving and compiling) and a rollout of a few commands (``ROLLOUT``:
edits in the workspace and under /tmp, a test run, a background job left running). Methods:

- ``fresh``: K sandboxes at once, each starts, runs the setup, then the rollout (today's batch).
- ``fork``: one sandbox starts and runs the setup, ``snapshot()``, ``fork(K)``; the K rollouts at once.
- ``reset``: one sandbox starts and runs the setup, ``snapshot()``; the K rollouts one after the
  other in it, ``reset(snap)`` before each but the first (``--reuse``: one sandbox, no parallelism).

Reported per method: the group's wall time (s), the host's CPU time during it (s, all processes:
``/proc/stat``), the time to have the K sandboxes ready (prepare; for ``fork`` the snapshot and
forks apart), the ratio of ``fresh``'s wall to each, and the median start of one fork (s).
Every sandbox is closed and every snapshot removed before the next method runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from swe_sandbox import get_environment  # noqa: E402

SETUP = ("sleep 1 && mkdir -p deps && for i in $(seq 3000); do echo \"v$i\" > deps/m$i.py; done "
         "&& python3 -c 'sum(i * i for i in range(35_000_000))'")
ROLLOUT = ["echo 'fix' >> deps/m1.py", "echo scratch > /tmp/notes", "python3 -c 'import sys; print(sys.version)'",
           "(sleep 300 &) ; true", "ls deps | wc -l"]


def cpu_seconds() -> float:
    """Busy CPU seconds of the whole host so far (``/proc/stat``: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / 100.0


def rollout(env) -> None:
    for command in ROLLOUT:
        result = env.execute({"command": command}, timeout=60)
        assert result["returncode"] == 0, result


def prepared(backend: str):
    env = get_environment(backend, timeout=120)
    assert env.execute({"command": SETUP}, timeout=120)["returncode"] == 0
    return env


def fresh(backend: str, k: int) -> dict[str, float]:
    began, envs = time.monotonic(), []
    try:
        with ThreadPoolExecutor(k) as pool:
            envs = list(pool.map(lambda _: prepared(backend), range(k)))
            ready = time.monotonic() - began
            list(pool.map(rollout, envs))
    finally:
        for env in envs:
            env.close()
    return {"prepare": ready}


def fork(backend: str, k: int) -> dict[str, float]:
    began = time.monotonic()
    env = prepared(backend)
    prepare = time.monotonic() - began
    snap = env.snapshot()
    env.close()
    forked = time.monotonic()
    envs = snap.fork(k)
    fork_s = time.monotonic() - forked
    one = time.monotonic()
    single = snap.environment()
    single_s = time.monotonic() - one
    single.close()
    try:
        with ThreadPoolExecutor(k) as pool:
            list(pool.map(rollout, envs))
    finally:
        for env in envs:
            env.close()
        snap.remove()
    return {"prepare": prepare, "snapshot": snap.taken_s, "fork_k": fork_s, "one_fork": single_s}


def reset(backend: str, k: int) -> dict[str, float]:
    began = time.monotonic()
    env = prepared(backend)
    prepare = time.monotonic() - began
    snap = env.snapshot()
    resets = []
    try:
        for i in range(k):
            if i:
                at = time.monotonic()
                env.reset(snap)
                resets.append(time.monotonic() - at)
            rollout(env)
    finally:
        env.close()
        snap.remove()
    return {"prepare": prepare, "snapshot": snap.taken_s, "reset_median": statistics.median(resets)}


METHODS = {"fresh": fresh, "fork": fork, "reset": reset}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--backends", default="docker,podman,bwrap")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        for round_ in range(args.rounds):
            walls: dict[str, float] = {}
            for name, method in METHODS.items():
                cpu, began = cpu_seconds(), time.monotonic()
                parts = method(backend, args.k)
                walls[name] = time.monotonic() - began
                cpu = cpu_seconds() - cpu
                ratio = walls["fresh"] / walls[name]
                detail = "  ".join(f"{key} {value:.2f}" for key, value in parts.items())
                print(f"{backend:7} round {round_ + 1}  {name:6} wall {walls[name]:6.2f} s  cpu {cpu:6.2f} s  "
                      f"fresh/this {ratio:4.2f}x  {detail}", flush=True)


if __name__ == "__main__":
    main()
