#!/usr/bin/env python3
"""Per-command round trip of two checkouts of swe-sandbox, side by side in one run.

    python benchmarks/bench_checkouts.py --baseline PATH [--candidate PATH] [--backends local,bwrap,docker,podman]
                                         [--n 400] [--rounds 20] [--command true]

Used to show that a change (a refactor above all) costs nothing per command: ``--baseline`` is a
checkout of main before the change (``git worktree add --detach ../base <commit>``), ``--candidate``
the checkout to judge (default: this one).

Method. Per backend, one child process per checkout imports ``swe_sandbox`` from that checkout's
``src`` (``PYTHONPATH``), builds ``get_environment(backend)`` through the public API only (so any two
versions compare), starts it and runs a warm-up of 20 commands. The parent then asks the two children
for ``n / rounds`` commands each, in turn, ``rounds`` times, the order swapped every round, so drift in
machine load hits both alike. Each child times every ``env.execute({"command": COMMAND})`` with
``time.perf_counter`` and checks its returncode. Reported per backend and checkout: median and p90 in
ms, and the candidate's median over the baseline's.

Target checked (PASS/FAIL): the candidate's median is at most 5% above the baseline's, per backend
(issue 14: a redesign that "shows no slowdown against main before the change"). The 5% margin is
noise: two runs of one checkout against itself differ by up to ~3% here. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchlib import median_ms, p90_ms

HERE = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.05
WARMUP = 20

#: The child: reads a count per line, answers with the latencies (seconds) of that many commands.
CHILD = r"""
import json, sys, time
import swe_sandbox
backend, command = sys.argv[1], sys.argv[2]
env = swe_sandbox.get_environment(backend)
env.start()
def one():
    t = time.perf_counter()
    result = env.execute({"command": command})
    took = time.perf_counter() - t
    if result["returncode"] != 0:
        raise SystemExit(f"{command!r} failed: {result}")
    return took
try:
    for _ in range(WARMUP):
        one()
    print(json.dumps({"ready": swe_sandbox.__file__}), flush=True)
    for line in sys.stdin:
        print(json.dumps([one() for _ in range(int(line))]), flush=True)
finally:
    env.close()
""".replace("WARMUP", str(WARMUP))


class Child:
    """One checkout's worker process for one backend."""

    def __init__(self, checkout: Path, backend: str, command: str):
        env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, backend, command], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        ready = json.loads(self.read())
        expected = str(checkout / "src" / "swe_sandbox" / "__init__.py")
        if ready["ready"] != expected:
            raise SystemExit(f"{checkout}: imported {ready['ready']}, not {expected}")
        self.times: list[float] = []

    def read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"a benchmark child exited with {self.proc.wait()}")
        return line

    def run(self, n: int) -> None:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        self.times.extend(json.loads(self.read()))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def compare(backend: str, checkouts: dict[str, Path], args: argparse.Namespace) -> float:
    """Runs both checkouts on ``backend``, prints their figures, returns candidate / baseline median."""
    children = {name: Child(path, backend, args.command) for name, path in checkouts.items()}
    try:
        order = list(children)
        for _ in range(args.rounds):
            for name in order:
                children[name].run(args.n // args.rounds)
            order.reverse()
    finally:
        for child in children.values():
            child.close()
    for name, child in children.items():
        print(f"  {backend:8} {name:10} median {median_ms(child.times):7.3f} ms   p90 {p90_ms(child.times):7.3f} ms"
              f"   ({len(child.times)} commands)")
    return median_ms(children["candidate"].times) / median_ms(children["baseline"].times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="checkout of main before the change")
    parser.add_argument("--candidate", type=Path, default=HERE, help="checkout to judge (default: this one)")
    parser.add_argument("--backends", default="local,bwrap,docker,podman")
    parser.add_argument("--n", type=int, default=400, help="commands per checkout and backend")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--command", default="true")
    args = parser.parse_args()
    checkouts = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    print(f"baseline  {checkouts['baseline']}\ncandidate {checkouts['candidate']}\ncommand   {args.command!r}")
    failed = False
    for backend in args.backends.split(","):
        ratio = compare(backend, checkouts, args)
        ok = ratio <= TARGET_RATIO
        failed |= not ok
        print(f"  {backend:8} candidate/baseline {ratio:5.3f}   {'PASS' if ok else 'FAIL'} (<= {TARGET_RATIO})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
