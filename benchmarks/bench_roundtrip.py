#!/usr/bin/env python3
"""Per-command round trip and sandbox start of each backend, side by side with baselines, in one run.

    python benchmarks/bench_roundtrip.py [--n 200] [--backends local,bwrap,docker,podman] [--starts 10]

Round trip. Methods, each timed from Python around one call, interleaved round-robin (so drift in
machine load hits every method alike), after a warm-up; the per-command baselines (``bwrap/cmd``,
``exec/cmd``) in a second round of their own with ``fork`` again (``fork (own round)``), n/5 times:

- ``fork``: a bare ``bash -c CMD`` from Python (``subprocess.run``, output captured): the floor.
- ``bwrap/cmd``: a fresh ``bwrap`` per command with the same policy flags as the bwrap backend
  (``bwrap.bwrap_policy``) and the same cleared environment:
  what the backend would cost without a long-lived runner.
- ``docker exec/cmd``, ``podman exec/cmd``: one ``CLI exec CONTAINER bash -c CMD`` per command into
  one already-running container of the backend's image (``CLI run -d --network none IMAGE sleep
  infinity``, removed at the end), CLI and socket from the backend's own ``Engine.cli_argv()``:
  what the container backends would cost with one exec per command.
- ``docker socket/bare``, ``podman socket/bare``: a trivial server in a container of the backend's
  image, on a unix socket bound in from the host, forking ``bash -c`` per request
  (``benchlib.SocketContainer``): the floor of any channel into that container.
- ``local``, ``bwrap``, ``docker``, ``podman``: ``env.execute({"command": CMD})`` on one environment
  reused for every call (docker and podman over the direct channel, ``environments.direct``).
- ``docker attach``, ``podman attach``: the same with ``channel: attach`` (every frame through the
  engine's attach stream): the direct channel's before and after, in one run.
- ``docker unlimited``, ``podman unlimited``: the backend without its cgroup limits (``cpus``,
  ``memory``, ``pids_limit`` null), as the bare-socket container runs: what the limits cost.
- ``NAME stream``: ``env.stream({"command": CMD})`` iterated to its result, on a second environment of
  the backend (the runner then sends chunk frames as output comes): the cost of streaming.

Reported per command: median and p90 in ms, the ratio to the fork median, and the overhead (median
minus the fork median).

Sandbox start (interleaved too, one warm-up round dropped): per backend, ``get_environment`` + the
first ``true`` on a new environment each time (closed after, untimed; its close time is shown
apart); for docker and podman also a bare ``CLI run --rm --network none IMAGE true`` of the same
image through the same CLI, and the ratio backend start / bare run.

Targets checked (PASS/FAIL): the bwrap, docker and podman backends' per-command overhead over a bare
fork is <= 3 ms (median, each command); docker and podman per command <= 1.2x the bare fork (issue
26's goal); the docker backend's start is <= 1.2x a bare ``docker run`` (podman's ratio is checked
against the same bound and reported). A measurement, not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import shutil
import sys
from collections.abc import Callable
from typing import Any

from benchlib import Call, ExecContainer, SocketContainer, bare_run_argv, median_ms, p90_ms, round_robin, run_checked

from swe_sandbox import get_environment
from swe_sandbox.environments import environment_class
from swe_sandbox.environments.bwrap import BASE_ENV as BWRAP_BASE_ENV
from swe_sandbox.environments.bwrap import bwrap_policy, launch_argv
from swe_sandbox.environments.container.environment import ContainerEnvironment

ALL_BACKENDS = ("local", "bwrap", "docker", "podman")
COMMANDS = ("true", "echo hi")
EXPECTED = {"true": "", "echo hi": "hi\n"}
TARGET_OVERHEAD_MS = 3.0
TARGET_START_RATIO = 1.2
#: docker and podman per command, median, as a multiple of the bare fork's median (each command).
TARGET_FORK_RATIO = 1.2
#: Backends whose per-command overhead is checked against TARGET_OVERHEAD_MS.
OVERHEAD_CHECKED = ("bwrap", "docker", "podman")
LABELS = {
    "fork": "fork: bash -c via subprocess.run",
    "bwrap/cmd": "bwrap/cmd: fresh bwrap per command",
    "docker exec/cmd": "docker exec/cmd: docker exec per command",
    "podman exec/cmd": "podman exec/cmd: podman exec per command",
    "docker socket/bare": "docker socket/bare: bare unix socket server",
    "podman socket/bare": "podman socket/bare: bare unix socket server",
    "docker attach": "docker backend, channel attach",
    "podman attach": "podman backend, channel attach",
    "docker unlimited": "docker backend, no cpus/memory/pids limit",
    "podman unlimited": "podman backend, no cpus/memory/pids limit",
    "local": "local backend (execute)",
    "bwrap": "bwrap backend (execute)",
    "docker": "docker backend (execute)",
    "podman": "podman backend (execute)",
}

Method = Callable[[str], None]
#: The container backends' settings without their cgroup limits (what the bare-socket container has).
UNLIMITED: dict[str, Any] = {"cpus": None, "memory": None, "pids_limit": None}


def is_container(name: str) -> bool:
    return issubclass(environment_class(name), ContainerEnvironment)


def usable_backends(requested: list[str]) -> list[str]:
    """The requested backends that can run here (the others are reported and skipped)."""
    usable = []
    for name in requested:
        reason = environment_class(name).unavailable_reason()
        if reason:
            print(f"skipping backend {name}: {reason}", file=sys.stderr)
        else:
            usable.append(name)
    return usable


def cli_of(name: str, stack: contextlib.ExitStack) -> tuple[list[str], dict[str, str], str]:
    """(CLI argv, CLI environment, image) of a container backend, from a never-started environment."""
    probe = get_environment(name)
    stack.callback(probe.close)
    return probe.engine.cli_argv(), probe.engine.cli_env(), probe.config.image


def bwrap_cmd_method(stack: contextlib.ExitStack) -> Method:
    probe = get_environment("bwrap")  # never started: only its policy is used
    stack.callback(probe.close)
    ids = probe.host_ids()  # started as the backend starts it: as root, dropped to the sandbox's uid
    policy = bwrap_policy(probe.config, probe.workspace, uid0=ids is not None)
    policy[0] = shutil.which(policy[0])
    env = probe.sandbox_env(dict(BWRAP_BASE_ENV))
    return lambda cmd: run_checked(launch_argv([*policy, "bash", "-c", cmd], rlimits=[], ids=ids, bpf=None),
                                   EXPECTED[cmd], env)


def exec_cmd_method(name: str, stack: contextlib.ExitStack) -> Method:
    cli, env, image = cli_of(name, stack)
    box = stack.enter_context(ExecContainer(cli, env, image, podman=name == "podman"))
    return lambda cmd: run_checked(box.exec_argv(cmd), EXPECTED[cmd], env)


def socket_method(name: str, stack: contextlib.ExitStack) -> Method:
    cli, env, image = cli_of(name, stack)
    box = stack.enter_context(SocketContainer(cli, env, image, podman=name == "podman"))

    def call(cmd: str) -> None:
        if box.call(cmd) != EXPECTED[cmd]:
            raise SystemExit(f"{name} bare socket failed on {cmd!r}")

    return call


def backend_method(name: str, stack: contextlib.ExitStack, **settings: Any) -> Method:
    environment = get_environment(name, **settings)
    stack.callback(environment.close)
    environment.start()

    def call(cmd: str) -> None:
        result = environment.execute({"command": cmd}, timeout=30)
        if result["returncode"] != 0 or result["output"] != EXPECTED[cmd]:
            raise SystemExit(f"backend {name} failed on {cmd!r}: {result}")

    return call


def stream_method(name: str, stack: contextlib.ExitStack) -> Method:
    environment = get_environment(name)
    stack.callback(environment.close)
    environment.start()

    def call(cmd: str) -> None:
        events = list(environment.stream({"command": cmd}, timeout=30))
        result = events[-1].result
        if result is None or result["returncode"] != 0 or "".join(e.text for e in events) != EXPECTED[cmd]:
            raise SystemExit(f"backend {name} (stream) failed on {cmd!r}: {events}")

    return call


def make_methods(backends: list[str], stack: contextlib.ExitStack) -> dict[str, Method]:
    methods: dict[str, Method] = {"fork": lambda cmd: run_checked(["bash", "-c", cmd], EXPECTED[cmd])}
    if "bwrap" in backends:
        methods["bwrap/cmd"] = bwrap_cmd_method(stack)
    for name in filter(is_container, backends):
        methods[f"{name} exec/cmd"] = exec_cmd_method(name, stack)
        methods[f"{name} socket/bare"] = socket_method(name, stack)
    for name in backends:
        methods[name] = backend_method(name, stack)
        if is_container(name):
            methods[f"{name} attach"] = backend_method(name, stack, channel="attach")
            methods[f"{name} unlimited"] = backend_method(name, stack, **UNLIMITED)
        methods[f"{name} stream"] = stream_method(name, stack)
    return methods


#: Baselines that start a process per command (tens of ms, and engine work after each that
#: overlaps what comes next): timed in a round of their own, beside ``fork``, so they do not slow
#: the millisecond methods measured together.
SLOW_METHODS = ("bwrap/cmd", "docker exec/cmd", "podman exec/cmd")


def measure_roundtrips(backends: list[str], n: int, warmup: int) -> tuple[list[str], dict]:
    """Round-trip samples keyed by (method, command), in two rounds: the fast methods, then the
    per-command baselines (``SLOW_METHODS``, with ``fork`` again, whose ratios use their round's
    fork); every environment and container is gone after."""
    with contextlib.ExitStack() as stack:
        methods = make_methods(backends, stack)
        fast = {(m, c): functools.partial(fn, c) for c in COMMANDS for m, fn in methods.items()
                if m not in SLOW_METHODS}
        samples, _ = round_robin(fast, n, warmup)
        slow = {(m, c): functools.partial(methods[m], c) for c in COMMANDS for m in ("fork", *SLOW_METHODS)
                if m in methods}
        slow_samples, _ = round_robin(slow, max(10, n // 5), max(2, warmup // 5))
        samples.update({(f"{m} (own round)" if m == "fork" else m, c): xs for (m, c), xs in slow_samples.items()})
    order = [m for m in methods if m not in SLOW_METHODS]
    return order + (["fork (own round)"] if len(slow) > len(COMMANDS) else []) + \
        [m for m in SLOW_METHODS if m in methods], samples


def backend_start(name: str) -> Callable[[], None]:
    """One sandbox start: a new environment and its first command; returns its close (untimed)."""
    environment = get_environment(name)
    try:
        result = environment.execute({"command": "true"}, timeout=60)
        if result["returncode"] != 0:
            raise SystemExit(f"backend {name} failed to start: {result}")
    except BaseException:
        environment.close()
        raise
    return environment.close


def measure_starts(backends: list[str], runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Start samples keyed by backend, and ``"NAME run"`` for the bare-run baselines; close samples."""
    calls: dict[str, Call] = {}
    with contextlib.ExitStack() as stack:
        for name in backends:
            calls[name] = functools.partial(backend_start, name)
            if is_container(name):
                cli, env, image = cli_of(name, stack)
                calls[f"{name} run"] = functools.partial(run_checked, bare_run_argv(cli, image), None, env)
        return round_robin(calls, runs, warmup=1)


def print_roundtrips(methods: list[str], samples: dict) -> tuple[dict[str, dict[str, float]],
                                                                 dict[str, dict[str, float]]]:
    """The per-command tables; returns the overhead over fork (ms) and the x-fork ratio, per
    method and command."""
    overheads: dict[str, dict[str, float]] = {}
    fork_ratios: dict[str, dict[str, float]] = {}
    for cmd in COMMANDS:
        base = median_ms(samples[("fork", cmd)])
        print(f"\ncommand `{cmd}`")
        print(f"  {'method':42} {'median ms':>10} {'p90 ms':>8} {'x fork':>7} {'overhead ms':>12}")
        own = samples.get(("fork (own round)", cmd))
        for method in methods:
            xs = samples[(method, cmd)]
            med = median_ms(xs)
            base = median_ms(own) if own and (method in SLOW_METHODS or method == "fork (own round)") else \
                median_ms(samples[("fork", cmd)])
            overheads.setdefault(method, {})[cmd] = med - base
            fork_ratios.setdefault(method, {})[cmd] = med / base
            print(f"  {LABELS.get(method, method):42} {med:10.2f} {p90_ms(xs):8.2f} {med / base:7.2f} "
                  f"{med - base:+12.2f}")
    return overheads, fork_ratios


def print_starts(starts: dict[str, list[float]], closes: dict[str, list[float]], runs: int) -> dict[str, float]:
    """The start table; returns backend start / bare run (medians) per container backend."""
    print(f"\nsandbox start: get_environment + first `true` (new environment each time, n={runs}); "
          "`NAME run`: bare `CLI run --rm --network none IMAGE true`")
    print(f"  {'method':42} {'median ms':>10} {'p90 ms':>8} {'x bare run':>11} {'close ms':>9}")
    ratios: dict[str, float] = {}
    for key, xs in starts.items():
        bare = starts.get(f"{key} run")
        ratio = f"{median_ms(xs) / median_ms(bare):11.2f}" if bare else f"{'':11}"
        if bare:
            ratios[key] = median_ms(xs) / median_ms(bare)
        close = f"{median_ms(closes[key]):9.2f}" if key in ALL_BACKENDS else ""
        print(f"  {key:42} {median_ms(xs):10.2f} {p90_ms(xs):8.2f} {ratio} {close}")
    return ratios


def print_targets() -> None:
    print(f"targets: per-command overhead of the bwrap, docker and podman backends over a bare fork "
          f"<= {TARGET_OVERHEAD_MS:g} ms (median, each command); docker and podman per command <= "
          f"{TARGET_FORK_RATIO:g}x the fork; docker backend start <= "
          f"{TARGET_START_RATIO:g}x a bare `docker run` of the same image (podman: same bound, reported)")


def print_verdicts(overheads: dict[str, dict[str, float]], ratios: dict[str, float],
                   fork_ratios: dict[str, dict[str, float]]) -> None:
    print()
    for name in ("docker", "podman"):
        if name in fork_ratios:
            worst = max(fork_ratios[name].values())
            detail = ", ".join(f"`{c}` {v:.2f}x" for c, v in fork_ratios[name].items())
            print(f"{'PASS' if worst <= TARGET_FORK_RATIO else 'FAIL'} {name} per command / bare fork (median): "
                  f"{detail} (target <= {TARGET_FORK_RATIO:g}x)")
    for name in OVERHEAD_CHECKED:
        if name not in overheads:
            print(f"SKIP {name} per-command overhead: backend not measured")
            continue
        worst = max(overheads[name].values())
        detail = ", ".join(f"`{c}` {v:+.2f} ms" for c, v in overheads[name].items())
        verdict = "PASS" if worst <= TARGET_OVERHEAD_MS else "FAIL"
        print(f"{verdict} {name} per-command overhead over fork (median): {detail} "
              f"(target <= {TARGET_OVERHEAD_MS:g} ms)")
    for name in ("docker", "podman"):
        if name not in ratios:
            print(f"SKIP {name} start ratio: backend not measured")
            continue
        verdict = "PASS" if ratios[name] <= TARGET_START_RATIO else "FAIL"
        note = "" if name == "docker" else "; reported, the target names docker"
        print(f"{verdict} {name} start / bare `{name} run`: {ratios[name]:.2f}x "
              f"(target <= {TARGET_START_RATIO:g}x{note})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="timed iterations per method and command (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed iterations first (default 20)")
    parser.add_argument("--backends", default=",".join(ALL_BACKENDS),
                        help="comma-separated backends (default: every available one of local,bwrap,docker,podman)")
    parser.add_argument("--starts", type=int, default=10, help="sandbox starts timed per method (default 10)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = usable_backends([b.strip() for b in args.backends.split(",") if b.strip()])
    print(f"swe-sandbox round-trip benchmark: backends {','.join(backends) or '(none)'}, n={args.n} per method "
          f"and command (after {args.warmup} warm-up), Python {platform.python_version()}, {platform.system()} "
          f"{platform.release()}, {os.cpu_count()} CPUs, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_targets()
    methods, samples = measure_roundtrips(backends, args.n, args.warmup)
    overheads, fork_ratios = print_roundtrips(methods, samples)
    ratios: dict[str, float] = {}
    if backends and args.starts > 0:
        starts, closes = measure_starts(backends, args.starts)
        ratios = print_starts(starts, closes, args.starts)
    print_verdicts(overheads, ratios, fork_ratios)
    print(f"load at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
