#!/usr/bin/env python3
"""N sandboxes at once, each running M short commands: the asyncio bridge (``swe_sandbox.aio``)
against a plain thread pool of the sync API and a native asyncio prototype.

    python benchmarks/bench_async.py [--n 200] [--m 10] [--backend local] [--methods aio,threads,native]

Methods (each in a fresh Python process of its own, so CPU, threads and RSS are its own):

- ``aio``: ``swe_sandbox.aio``: N AsyncEnvironments on one event loop, each task awaiting
  ``env.execute("true")`` M times (one worker thread per environment).
- ``threads``: the sync API from ``ThreadPoolExecutor(N)``: N threads, each calling
  ``env.execute("true")`` M times.
- ``native``: a prototype without threads (``local`` only): the runner's pipe is awaited with
  ``loop.add_reader`` and frames parsed in the loop. ``base.Channel`` has no public sans-I/O
  parser, so the prototype subclasses it and feeds it through ``_read_some`` (the documented
  override point for transports), raising ``NeedMore`` where a frame is incomplete. What a real
  native backend would need: a public ``Channel.feed(data) -> list[frame]`` (framing and
  authentication apart from reading), and per-backend async transports for everything ``local``
  does not have (docker/podman attach, paramiko, the exec fallback, start and removal through
  the SDKs), i.e. a second implementation of the host side of the contract.

Phases: start (all N at once, timed apart), one warm-up command each (untimed), then the timed
phase: every sandbox runs its M commands in series, all sandboxes at once. Reported: per-command
latency (median, p99, ms), wall of the timed phase (s), commands/s, process CPU of the phase (s,
``time.process_time``: all threads of the driving process, not the runners), max lateness of a
10 ms ticker (on the loop for ``aio`` and ``native``, a thread for ``threads``), threads alive
during the phase, RSS (current at the end of the phase and peak, MiB).

Measured on this host (2 CPUs, shared with other jobs: load 5-30 before a run; Python 3.11; the
local backend; 3 rounds each, ranges over the rounds):

    N=200, M=10   median ms  p99 ms     wall s     CPU s      lag ms    threads  RSS MiB
    aio           310-410    845-1005   3.9-4.1    0.91-0.94  345-430   202      48
    threads       155-255    1015-1324  3.9-4.3    0.55-0.69  290-535   203      46
    native        315-360    650-1430   3.3-4.5    0.17-0.22  420-495   1        37

    N=20, M=50
    aio           27-45      88-116     1.6-2.5    0.39-0.61  21-30     22       39
    threads       26-49      70-137     1.5-2.8    0.15-0.35  35-66     23       39
    native        29-36      85-94      1.7-2.0    0.12-0.16  23-35     1        36

    N=1, M=500
    aio           2.3-2.8    4.4-9.7    1.2-1.6    0.16-0.22  2-5       3        37
    threads       2.2-3.1    4.6-15     1.2-2.3    0.10-0.15  1-14      4        36
    native        2.3-3.1    8-12       1.5-2.2    0.10-0.14  4-17      1        36

At 200 sandboxes the runners forking ``bash`` saturate the 2 CPUs (load ~59 during the run):
wall, latency and lag are then the host's and the same for all three (the native loop, with no
thread at all, lags as much). What the bridge costs is CPU in the driving process: ~0.46 ms per
command at N=200 (threads ~0.3 ms, native ~0.1 ms), against ~2 ms per command of the runner's own
work; and ~200 threads (+11 MiB RSS over native). bwrap holds 200 too (one round: aio 3.56 s
wall, 0.86 s CPU; threads 3.65 s, 0.57 s; start of the 200: 9.4 s and 11.7 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchlib import percentile

import swe_sandbox
from swe_sandbox import aio, runner
from swe_sandbox.config import DEFAULT_ENV
from swe_sandbox.environments.base import Channel, check_result
from swe_sandbox.environments.local import PASSTHROUGH_ENV

METHODS = ("aio", "threads", "native")
COMMAND = "true"
TICK_S = 0.01


# -- measurement helpers -----------------------------------------------------------------------


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set size of this process, MiB (``VmRSS``, ``VmHWM``)."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def check(result: dict[str, Any]) -> None:
    if result["returncode"] != 0 or result["output"] != "":
        raise SystemExit(f"`{COMMAND}` failed: {result}")


async def loop_ticker(stop: asyncio.Event, lateness: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(TICK_S)
        lateness.append(loop.time() - before - TICK_S)


async def timed_phase(per_sandbox: list[Callable[[], Awaitable[dict[str, Any]]]], m: int) -> dict[str, Any]:
    """The timed phase on the loop: each callable M times in series, all at once; a ticker beside."""
    latencies: list[float] = []

    async def series(call: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        for _ in range(m):
            before = time.perf_counter()
            check(await call())
            latencies.append(time.perf_counter() - before)

    stop, lateness = asyncio.Event(), list[float]()
    ticker = asyncio.create_task(loop_ticker(stop, lateness))
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(series(call) for call in per_sandbox))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    threads = threading.active_count()
    stop.set()
    await ticker
    return summary(latencies, wall, cpu, max(lateness), threads)


def summary(latencies: list[float], wall: float, cpu: float, lag: float, threads: int) -> dict[str, Any]:
    current, peak = rss_mib()
    return {"median_ms": statistics.median(latencies) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
            "wall_s": wall, "per_s": len(latencies) / wall, "cpu_s": cpu, "lag_ms": lag * 1000,
            "threads": threads, "rss_mib": current, "peak_rss_mib": peak}


# -- the methods -------------------------------------------------------------------------------


async def run_aio(backend: str, n: int, m: int) -> dict[str, Any]:
    envs = [await aio.get_environment(backend, timeout=60) for _ in range(n)]
    started = time.perf_counter()
    await asyncio.gather(*(env.start() for env in envs))
    start_s = time.perf_counter() - started
    await asyncio.gather(*(env.execute(COMMAND) for env in envs))
    figures = await timed_phase([lambda env=env: env.execute(COMMAND) for env in envs], m)
    await asyncio.gather(*(env.close() for env in envs))
    return {**figures, "start_s": start_s}


def run_threads(backend: str, n: int, m: int) -> dict[str, Any]:
    envs = [swe_sandbox.get_environment(backend, timeout=60) for _ in range(n)]
    latencies: list[float] = []

    def series(env: Any) -> None:
        for _ in range(m):
            before = time.perf_counter()
            check(env.execute(COMMAND))
            latencies.append(time.perf_counter() - before)

    lateness: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            before = time.monotonic()
            time.sleep(TICK_S)
            lateness.append(time.monotonic() - before - TICK_S)

    with ThreadPoolExecutor(n) as pool:
        started = time.perf_counter()
        list(pool.map(lambda env: env.start(), envs))
        start_s = time.perf_counter() - started
        list(pool.map(lambda env: check(env.execute(COMMAND)), envs))
        ticker = threading.Thread(target=tick)
        ticker.start()
        cpu, wall = time.process_time(), time.perf_counter()
        list(pool.map(series, envs))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        threads = threading.active_count()
        stop.set()
        ticker.join()
        figures = summary(latencies, wall, cpu, max(lateness), threads)
        list(pool.map(lambda env: env.close(), envs))
    return {**figures, "start_s": start_s}


class NeedMore(Exception):
    """The fed bytes end inside a frame: wait for the pipe to be readable again."""


class FedChannel(Channel):
    """The local runner's ``Channel``, fed by the loop: blocking reads until ``feeding``, then only
    the bytes the loop read (``pending``); an incomplete frame raises ``NeedMore`` out of ``recv``
    (which keeps what it buffered for the next try)."""

    feeding = False

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.pending = bytearray()

    def _read_some(self, timeout: float | None) -> bytes | None:
        if not self.feeding:
            return super()._read_some(timeout)
        if not self.pending:
            raise NeedMore
        data, self.pending = bytes(self.pending), bytearray()
        return data


class NativeSandbox:
    """A local runner driven from the loop: send a request, await its result frame."""

    def __init__(self) -> None:
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        env.update(DEFAULT_ENV)
        argv = [sys.executable, *runner.ISOLATED, "-c", runner.BOOTSTRAP]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=tempfile.TemporaryFile(),
                                env=env, start_new_session=True, close_fds=True)
        self.channel = FedChannel(proc, None)
        self.channel.start_runner()
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.seq = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait (blocking, untimed) for the ready frame, then hand the pipe to ``loop``."""
        self.channel.ready(30)
        self.channel.feeding = True
        assert self.channel.proc is not None and self.channel.proc.stdout is not None
        self.fd = self.channel.proc.stdout.fileno()
        loop.add_reader(self.fd, self.readable)

    def readable(self) -> None:
        data = os.read(self.fd, 1 << 20)
        if not data:
            raise SystemExit("a runner exited")
        self.channel.pending += data
        while True:
            try:
                frame = self.channel.recv(None)
            except NeedMore:
                return
            check_result(frame, 10 << 20)
            self.waiting.pop(frame["id"]).set_result(frame)

    async def execute(self, command: str) -> dict[str, Any]:
        self.seq += 1
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.seq] = future
        self.channel.send({"op": "exec", "id": self.seq, "command": command, "cwd": "", "env": {}, "timeout": 60,
                           "max_output_bytes": 10 << 20})
        frame = await future
        return {k: frame[k] for k in ("output", "returncode", "exception_info", "extra")}

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self.fd)
        self.channel.close()


async def run_native(backend: str, n: int, m: int) -> dict[str, Any]:
    if backend != "local":
        raise SystemExit("the native prototype drives the local runner only")
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    boxes = [NativeSandbox() for _ in range(n)]
    for box in boxes:
        box.start(loop)
    start_s = time.perf_counter() - started
    await asyncio.gather(*(box.execute(COMMAND) for box in boxes))
    figures = await timed_phase([lambda box=box: box.execute(COMMAND) for box in boxes], m)
    for box in boxes:
        box.close(loop)
    return {**figures, "start_s": start_s}


def measure(method: str, backend: str, n: int, m: int) -> dict[str, Any]:
    """One method's figures, in this process."""
    if method == "threads":
        return run_threads(backend, n, m)
    return asyncio.run((run_aio if method == "aio" else run_native)(backend, n, m))


# -- driver ------------------------------------------------------------------------------------

COLUMNS = [("median_ms", "median ms", 9, ".2f"), ("p99_ms", "p99 ms", 8, ".1f"), ("wall_s", "wall s", 7, ".2f"),
           ("per_s", "cmds/s", 7, ".0f"), ("cpu_s", "CPU s", 6, ".2f"), ("lag_ms", "lag ms", 7, ".1f"),
           ("threads", "threads", 7, "d"), ("rss_mib", "RSS MiB", 8, ".0f"), ("peak_rss_mib", "peak", 6, ".0f"),
           ("start_s", "start s", 7, ".2f")]


def in_child(method: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", method, "--backend", args.backend, "--n", str(args.n), "--m",
            str(args.m)]
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    print(f"{'method':8} " + " ".join(f"{title:>{width}}" for _, title, width, _ in COLUMNS))
    for method, figures in rows.items():
        print(f"{method:8} " + " ".join(f"{figures[key]:>{width}{fmt}}" for key, _, width, fmt in COLUMNS))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="sandboxes at once (default 200)")
    parser.add_argument("--m", type=int, default=10, help="commands per sandbox, timed (default 10)")
    parser.add_argument("--backend", default="local", help="backend (default local; native needs local)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated (default {','.join(METHODS)})")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each method, interleaved (default 1)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.backend, args.n, args.m)))
        return 0
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    print(f"swe-sandbox async benchmark: {args.backend}, {args.n} sandboxes x {args.m} `{COMMAND}`, Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.rounds):
        print_table({method: in_child(method, args) for method in methods})
    return 0


if __name__ == "__main__":
    sys.exit(main())
