"""Small helpers shared by the benchmarks in this directory (measurement scripts, not tests).

- statistics: ``percentile`` (nearest rank), ``median_ms``, ``p90_ms``;
- ``run_checked``: run one command from Python, fail loudly if its exit status or output is off;
- ``round_robin``: time zero-argument callables interleaved, the order rotated each round, so
  drift in machine load hits every method alike;
- ``ExecContainer``: one long-running container (``CLI run -d IMAGE sleep infinity``) for the
  ``docker exec`` / ``podman exec`` per-command baselines, always force-removed on exit;
- ``SocketContainer``: one container running a trivial server on a unix socket bound in from the
  host, which forks ``bash -c`` per request: the floor of any channel into that container;
- ``bare_run_argv``: a bare ``CLI run --rm IMAGE true``, the sandbox-start baseline.

The CLI argv and environment come from the backend's own ``Engine`` (``cli_argv()``,
``cli_env()``), so a baseline talks to the same engine and storage as the backend it is compared to.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import statistics
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

#: A method's call, and optionally an untimed teardown it returns (e.g. closing an environment).
Call = Callable[[], Callable[[], None] | None]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def p90_ms(values: list[float]) -> float:
    return percentile(values, 0.9) * 1000


def run_checked(argv: list[str], expect: str | None, env: dict[str, str] | None = None) -> None:
    """Run ``argv`` (stdin empty, stdout+stderr captured); exit if it fails or prints other than ``expect``."""
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=env, timeout=120)
    if done.returncode != 0 or (expect is not None and done.stdout.decode() != expect):
        raise SystemExit(f"baseline failed: {argv[-3:]} -> {done.returncode} {done.stdout!r}")


def round_robin(calls: dict[Any, Call], n: int, warmup: int) -> tuple[dict[Any, list[float]], dict[Any, list[float]]]:
    """Time every call ``warmup + n`` times, interleaved; the first ``warmup`` rounds are dropped.

    Returns (call seconds, teardown seconds) per key; teardowns (what a call returns) run untimed
    for the call itself and are timed separately.
    """
    keys = list(calls)
    samples: dict[Any, list[float]] = {k: [] for k in keys}
    teardowns: dict[Any, list[float]] = {k: [] for k in keys}
    clock = time.perf_counter
    for i in range(warmup + n):
        shift = i % len(keys)
        for key in keys[shift:] + keys[:shift]:
            t0 = clock()
            teardown = calls[key]()
            t1 = clock()
            if teardown is not None:
                teardown()
            if i >= warmup:
                samples[key].append(t1 - t0)
                teardowns[key].append(clock() - t1)
    return samples, teardowns


def bare_run_argv(cli: list[str], image: str) -> list[str]:
    """A bare container start of ``image`` (same network policy as the backends' default)."""
    return [*cli, "run", "--rm", "--network", "none", image, "true"]


class ExecContainer:
    """``with ExecContainer(cli, env, image) as c:`` one running container to ``docker exec`` into.

    Created with a unique name, so it can be removed by name even if ``run -d`` failed half-way;
    removed with ``rm -f`` (podman: ``--time 0``, no 10 s stop grace) on exit, whatever happened.
    """

    def __init__(self, cli: list[str], env: dict[str, str], image: str, podman: bool = False):
        self.cli, self.env, self.image = cli, env, image
        self.name = f"swe-sandbox-bench-{uuid.uuid4().hex[:12]}"
        self.rm_extra = ["--time", "0"] if podman else []

    def __enter__(self) -> ExecContainer:
        try:
            run_checked([*self.cli, "run", "-d", "--network", "none", "--name", self.name,
                         self.image, "sleep", "infinity"], None, self.env)
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def exec_argv(self, command: str) -> list[str]:
        return [*self.cli, "exec", self.name, "bash", "-c", command]

    def remove(self) -> None:
        subprocess.run([*self.cli, "rm", "-f", *self.rm_extra, self.name], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env, timeout=120)
        left = subprocess.run([*self.cli, "ps", "-aq", "--filter", f"name=^{self.name}$"], env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
        if left.stdout.strip():
            print(f"WARNING: could not remove container {self.name}", flush=True)


#: The in-container server of ``SocketContainer``: per request (4-byte length, command) it runs
#: ``bash -c`` with stdout and stderr on one pipe and answers (4-byte length, output).
SOCKET_SERVER = r"""
import os, socket, struct, subprocess
path = "/bench/s.sock"
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o666)
server.listen(1)
conn, _ = server.accept()
stream = conn.makefile("rwb")
while True:
    head = stream.read(4)
    if len(head) < 4:
        break
    command = stream.read(struct.unpack(">I", head)[0]).decode()
    out = subprocess.run(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT).stdout
    stream.write(struct.pack(">I", len(out)) + out)
    stream.flush()
"""


class SocketContainer(ExecContainer):
    """``with SocketContainer(cli, env, image) as c: c.call("echo hi")``: the bare-socket baseline.

    A host directory (mode 0777, so the remapped root can make its socket there) is bound at
    ``/bench``; the container (no network) runs ``SOCKET_SERVER`` as its main process.
    """

    def __enter__(self) -> SocketContainer:
        self.dir = tempfile.mkdtemp(prefix="swe-sandbox-bench-sock-")
        os.chmod(self.dir, 0o777)
        try:
            run_checked([*self.cli, "run", "-d", "--network", "none", "--name", self.name, "-v", f"{self.dir}:/bench",
                         self.image, "python3", "-c", SOCKET_SERVER], None, self.env)
            self.sock = self._connect(os.path.join(self.dir, "s.sock"))
        except BaseException:
            self.remove()
            raise
        self.stream = self.sock.makefile("rwb")
        return self

    @staticmethod
    def _connect(path: str, within: float = 30.0) -> socket.socket:
        deadline = time.monotonic() + within
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                return sock
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # the server is starting: nothing to poll but the socket itself

    def call(self, command: str) -> str:
        data = command.encode()
        self.stream.write(struct.pack(">I", len(data)) + data)
        self.stream.flush()
        size = struct.unpack(">I", self.stream.read(4))[0]
        return self.stream.read(size).decode()

    def remove(self) -> None:
        for closer in ("stream", "sock"):
            if hasattr(self, closer):
                getattr(self, closer).close()
        super().remove()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)
