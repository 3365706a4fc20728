#!/usr/bin/env python3
"""Per-command round trip of each backend, side by side with two baselines, in one run.

    python benchmarks/bench_roundtrip.py [--n 200] [--backends local,bwrap] [--starts 10]

Methods, each timed from Python around one call, interleaved round-robin (so drift in machine load
hits every method alike), after a warm-up:

- ``fork``: a bare ``bash -c CMD`` from Python (``subprocess.run``, output captured): the floor.
- ``bwrap/cmd``: a fresh ``bwrap`` per command with the same policy flags as the bwrap backend
  (``BwrapEnvironment.bwrap_argv()`` minus the runner part) and the same cleared environment:
  what the backend would cost without a long-lived runner.
- ``local``, ``bwrap``: ``env.execute({"command": CMD})`` on one environment reused for every call.

Reported per command: median and p90 in ms, the ratio to the fork median, and the overhead
(median minus the fork median). Also the sandbox start time per backend (``get_environment`` +
first ``true``, a new environment each time). The target checked: the bwrap backend's per-command
overhead over a bare fork is <= 3 ms (median). This is a measurement, not a timed test.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable

from swe_sandbox import get_environment
from swe_sandbox.config import SANDBOX_PATH
from swe_sandbox.environments import environment_class

COMMANDS = ("true", "echo hi")
EXPECTED = {"true": "", "echo hi": "hi\n"}
TARGET_OVERHEAD_MS = 3.0
#: The base environment the bwrap backend gives its sandbox (mirrors BwrapEnvironment._open_channel).
BWRAP_BASE_ENV = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "USER": "root"}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_checked(argv: list[str], expect: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0 or done.stdout.decode() != expect:
        raise SystemExit(f"baseline failed: {argv[-3:]} -> {done.returncode} {done.stdout!r}")


def make_methods(backends: list[str], cleanup: list[Callable[[], None]]) -> dict[str, Callable[[str], None]]:
    methods: dict[str, Callable[[str], None]] = {}
    methods["fork"] = lambda cmd: run_checked(["bash", "-c", cmd], EXPECTED[cmd])

    bwrap_usable = "bwrap" in backends and environment_class("bwrap").unavailable_reason() is None
    if bwrap_usable:
        probe = get_environment("bwrap")  # never started: only its policy is used
        cleanup.append(probe.close)
        argv = probe.bwrap_argv()
        policy = argv[: argv.index("--") + 1]
        env = probe.sandbox_env(dict(BWRAP_BASE_ENV))
        methods["bwrap/cmd"] = lambda cmd: run_checked([*policy, "bash", "-c", cmd], EXPECTED[cmd], env)

    for name in backends:
        reason = environment_class(name).unavailable_reason()
        if reason:
            print(f"skipping backend {name}: {reason}", file=sys.stderr)
            continue
        environment = get_environment(name)
        environment.start()
        cleanup.append(environment.close)

        def call(cmd: str, environment=environment, name=name) -> None:
            result = environment.execute({"command": cmd}, timeout=30)
            if result["returncode"] != 0 or result["output"] != EXPECTED[cmd]:
                raise SystemExit(f"backend {name} failed on {cmd!r}: {result}")

        methods[name] = call
    return methods


def measure(methods: dict[str, Callable[[str], None]], n: int, warmup: int) -> dict[tuple[str, str], list[float]]:
    """Round-robin over (method, command), rotating the order each round; seconds per call."""
    pairs = [(m, c) for c in COMMANDS for m in methods]
    samples: dict[tuple[str, str], list[float]] = {p: [] for p in pairs}
    clock = time.perf_counter
    for i in range(warmup + n):
        shift = i % len(pairs)
        for method, cmd in pairs[shift:] + pairs[:shift]:
            fn = methods[method]
            t0 = clock()
            fn(cmd)
            took = clock() - t0
            if i >= warmup:
                samples[(method, cmd)].append(took)
    return samples


def measure_starts(backends: list[str], runs: int) -> dict[str, list[float]]:
    starts: dict[str, list[float]] = {}
    for name in backends:
        if environment_class(name).unavailable_reason():
            continue
        times = []
        for _ in range(runs + 1):  # the first one warms caches and is dropped
            t0 = time.perf_counter()
            environment = get_environment(name)
            try:
                environment.execute({"command": "true"}, timeout=30)
                times.append(time.perf_counter() - t0)
            finally:
                environment.close()
        starts[name] = times[1:]
    return starts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="timed iterations per method and command (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed iterations first (default 20)")
    parser.add_argument("--backends", default="local,bwrap", help="comma-separated backends (default local,bwrap)")
    parser.add_argument("--starts", type=int, default=10, help="sandbox starts timed per backend (default 10)")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]

    print(f"swe-sandbox round-trip benchmark: n={args.n} per method and command (after {args.warmup} warm-up), "
          f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
          f"{os.cpu_count()} CPUs, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cleanup: list[Callable[[], None]] = []
    try:
        methods = make_methods(backends, cleanup)
        samples = measure(methods, args.n, args.warmup)
    finally:
        for close in cleanup:
            close()

    labels = {
        "fork": "fork: bash -c via subprocess.run",
        "bwrap/cmd": "bwrap/cmd: fresh bwrap per command",
        "local": "local backend (execute)",
        "bwrap": "bwrap backend (execute)",
    }
    overheads: dict[str, float] = {}
    for cmd in COMMANDS:
        base = statistics.median(samples[("fork", cmd)]) * 1000
        print(f"\ncommand `{cmd}`")
        print(f"  {'method':38} {'median ms':>10} {'p90 ms':>8} {'x fork':>7} {'overhead ms':>12}")
        for method in methods:
            xs = samples[(method, cmd)]
            med, p90 = statistics.median(xs) * 1000, percentile(xs, 0.9) * 1000
            if method == "bwrap":
                overheads[cmd] = med - base
            print(f"  {labels.get(method, method):38} {med:10.2f} {p90:8.2f} {med / base:7.2f} {med - base:+12.2f}")

    starts = measure_starts(backends, args.starts)
    if starts:
        print(f"\nsandbox start: get_environment + first `true` (new environment each time, n={args.starts})")
        print(f"  {'backend':38} {'median ms':>10} {'p90 ms':>8}")
        for name, xs in starts.items():
            print(f"  {name:38} {statistics.median(xs) * 1000:10.2f} {percentile(xs, 0.9) * 1000:8.2f}")

    print()
    if overheads:
        worst = max(overheads.values())
        verdict = "MET" if worst <= TARGET_OVERHEAD_MS else "NOT MET"
        detail = ", ".join(f"`{c}` {v:+.2f} ms" for c, v in overheads.items())
        print(f"bwrap backend per-command overhead over a bare fork (median): {detail}; "
              f"target <= {TARGET_OVERHEAD_MS:g} ms: {verdict}")
    else:
        print("bwrap backend not measured (unavailable or not selected): overhead target not checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
