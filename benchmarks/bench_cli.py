#!/usr/bin/env python3
"""The command line's own start cost, as whole processes, side by side with baselines, in one run.

    python benchmarks/bench_cli.py [--n 20] [--warmup 2] [--compare SRC] [--no-docker]

Method: each command is run as a new process (``subprocess.run``, stdin empty, output captured and
checked), the methods interleaved round-robin with the order rotated each round
(``benchlib.round_robin``), so drift in machine load hits every method alike; the warm-up rounds
are dropped. Wall time is measured around the process, CPU time (user + sys) from the children's
resource usage. The CLI of this checkout runs as ``python -m swe_sandbox`` with ``PYTHONPATH`` set
to its ``src`` (the ``swe-sandbox`` script on PATH may be another checkout's):

- ``python -c pass``: the interpreter's own start, with this Python's site-packages (reference);
- ``--help``: ``swe-sandbox --help``;
- ``exec bwrap``: ``swe-sandbox exec --env bwrap -- true`` (a sandbox started, one command, removed);
- ``exec docker``: ``swe-sandbox exec --env docker -- true``;
- ``docker run``: ``docker run --rm swe-sandbox/base true``, the baseline of ``exec docker``;
- ``exec podman``, ``podman run``: the same with podman (``--no-podman`` leaves them out).

``--compare SRC`` also times the three CLI commands of another checkout's ``src`` (e.g. main before
a change) in the same rounds, and prints the ratio this / that per command. Both checkouts' modules
are compiled to bytecode first (``compile_bytecode``), as an installed package's are.

Targets checked (PASS/FAIL, medians): ``exec bwrap`` <= 0.2 s; ``exec docker`` <= 1.5x
``docker run``. A measurement, not a timed test.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchlib import median_ms, p90_ms, round_robin

from swe_sandbox.environments import environment_class

SRC = Path(__file__).resolve().parents[1] / "src"
IMAGE = "swe-sandbox/base"
TARGET_BWRAP_S = 0.2
TARGET_DOCKER_RATIO = 1.5
CLI_COMMANDS = {
    "--help": ["--help"],
    "exec bwrap": ["exec", "--env", "bwrap", "--", "true"],
    "exec docker": ["exec", "--env", "docker", "--", "true"],
    "exec podman": ["exec", "--env", "podman", "--", "true"],
}

#: CPU seconds (user + sys) of each timed process, per method, in the order run.
cpu_samples: dict[str, list[float]] = {}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_process(key: str, argv: list[str], env: dict[str, str] | None) -> None:
    """Run ``argv`` once; exit when it fails (a benchmark of a failing command measures nothing)."""
    before = children_cpu()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=env, timeout=120)
    cpu_samples.setdefault(key, []).append(children_cpu() - before)
    if done.returncode != 0:
        raise SystemExit(f"{key} failed: {argv} -> exit {done.returncode}: {done.stdout[-500:]!r}")


def compile_bytecode(src: Path) -> None:
    """Compile ``src``'s modules to bytecode (``__pycache__``, ignored by git), as an installed
    package has them: a checkout run with ``PYTHONDONTWRITEBYTECODE`` set (this host sets it) would
    compile every module it imports at every start instead, which is not the CLI's own cost."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, stdout=subprocess.DEVNULL)


def cli_env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def methods(args: argparse.Namespace) -> dict[str, functools.partial]:
    """Every method to time: key -> a call running one process."""
    calls = {"python -c pass": functools.partial(run_process, "python -c pass", [sys.executable, "-c", "pass"], None)}
    checkouts = [("", SRC)] + ([(" (compare)", Path(args.compare).resolve())] if args.compare else [])
    for suffix, src in checkouts:
        for name, words in CLI_COMMANDS.items():
            if ("docker" in name and not args.docker) or ("podman" in name and not args.podman):
                continue
            key = name + suffix
            argv = [sys.executable, "-m", "swe_sandbox", *words]
            calls[key] = functools.partial(run_process, key, argv, cli_env(src))
    if args.docker:
        argv = ["docker", "run", "--rm", IMAGE, "true"]
        calls["docker run"] = functools.partial(run_process, "docker run", argv, None)
    if args.podman:
        argv = [*environment_class("podman").engine_class().cli_argv(), "run", "--rm", IMAGE, "true"]
        calls["podman run"] = functools.partial(run_process, "podman run", argv, None)
    return calls


def print_table(samples: dict[str, list[float]], warmup: int) -> None:
    print(f"\n  {'method':28} {'median s':>9} {'p90 s':>8} {'cpu s':>8} {'vs CLI run':>14} {'vs compare':>11}")
    for key, xs in samples.items():
        cpu = median_ms(cpu_samples[key][warmup:]) / 1000
        engine = next((e for e in ("docker", "podman") if e in key), None)
        bare = samples.get(f"{engine} run") if engine and not key.endswith(" run") else None
        vs_docker = f"{median_ms(xs) / median_ms(bare):13.2f}x" if bare else ""
        other = samples.get(f"{key} (compare)")
        vs_compare = f"{median_ms(xs) / median_ms(other):10.2f}x" if other else ""
        times = f"{median_ms(xs) / 1000:9.3f} {p90_ms(xs) / 1000:8.3f} {cpu:8.3f}"
        print(f"  {key:28} {times} {vs_docker:>14} {vs_compare:>11}")


def print_verdicts(samples: dict[str, list[float]]) -> None:
    print()
    bwrap = median_ms(samples["exec bwrap"]) / 1000
    print(f"{'PASS' if bwrap <= TARGET_BWRAP_S else 'FAIL'} exec --env bwrap -- true: {bwrap:.3f} s "
          f"(target <= {TARGET_BWRAP_S:g} s)")
    if "exec docker" not in samples:
        print("SKIP exec --env docker -- true: docker not measured")
        return
    for engine in ("docker", "podman"):
        if f"exec {engine}" in samples:
            ratio = median_ms(samples[f"exec {engine}"]) / median_ms(samples[f"{engine} run"])
            print(f"{'PASS' if ratio <= TARGET_DOCKER_RATIO else 'FAIL'} exec --env {engine} -- true / {engine} run "
                  f"--rm: {ratio:.2f}x (target <= {TARGET_DOCKER_RATIO:g}x{'' if engine == 'docker' else ', reported'})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="timed runs per method (default 20)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--compare", metavar="SRC", help="another checkout's src directory, timed in the same rounds")
    parser.add_argument("--no-docker", dest="docker", action="store_false", help="skip exec docker and docker run")
    parser.add_argument("--no-podman", dest="podman", action="store_false", help="skip exec podman and podman run")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in ("bwrap",) + (("docker",) if args.docker else ()) + (("podman",) if args.podman else ()):
        reason = environment_class(name).unavailable_reason()
        if reason:
            hint = " (try --no-docker)" if name == "docker" else ""
            raise SystemExit(f"{name} is not usable here: {reason}{hint}")
    print(f"swe-sandbox CLI start benchmark: n={args.n} per method (after {args.warmup} warm-up rounds), "
          f"Python {platform.python_version()}, {platform.system()} {platform.release()}, {os.cpu_count()} CPUs, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"targets: exec --env bwrap -- true <= {TARGET_BWRAP_S:g} s; exec --env docker -- true <= "
          f"{TARGET_DOCKER_RATIO:g}x docker run --rm {IMAGE} true (medians, whole processes)")
    for src in [SRC] + ([Path(args.compare).resolve()] if args.compare else []):
        compile_bytecode(src)
    started = time.perf_counter()
    samples, _ = round_robin(methods(args), args.n, args.warmup)
    print_table(samples, args.warmup)
    print_verdicts(samples)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"took {time.perf_counter() - started:.0f} s; load at the end: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
