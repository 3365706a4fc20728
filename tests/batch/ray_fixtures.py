"""A real multi-node Ray cluster on this machine, shared by the Ray tests of a session.

Each node is one ``ray start --block`` of its own (its own raylet, object store and workers), in its
own process group: the head (``swe_sandbox: 2`` slots, the GCS) and two more nodes that join it
(``swe_sandbox: 2`` each). A test that removes a node adds one of its own (``add_node``) and kills
that node's raylet with SIGKILL (``kill_raylet``), as a lost machine would; the shared nodes stay.
Tokens: the cluster authenticates with a token of its own (``RAY_AUTH_TOKEN_PATH``), which
``env`` carries to the drivers the tests start. Everything is stopped at the end of the session,
by process group (no ``ray stop``: other Ray sessions of this machine are not ours).

Without Ray installed the tests skip, or fail under CI (``CI`` set).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Slots every node of the shared cluster offers.
SLOTS = 2
#: Object store of each node, bytes (Ray's minimum is ~75 MiB).
OBJECT_STORE = 80 * 2**20
#: Seconds a node may take to join.
JOIN_S = 60.0
#: Seconds the nodes get to stop after SIGTERM before their process groups are killed.
STOP_S = 3.0


def require_ray() -> None:
    from importlib.util import find_spec

    if find_spec("ray") is not None:
        return
    if "CI" in os.environ:
        pytest.fail("Ray is not installed in CI (the [dev] extra carries it)", pytrace=False)
    pytest.skip("Ray is not installed (pip install 'swe-sandbox[ray]')")


class LocalCluster:
    """Ray nodes on this machine, each a ``ray start --block`` process group (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        token = root / "token"
        token.write_text(secrets.token_hex(32))
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}
        self.node_ids: dict[str, str] = {}

    def start_head(self) -> None:
        self._start("head", ["--head", f"--port={self.port}", "--num-cpus=1", "--include-dashboard=false",
                             f"--temp-dir={self.root / 'tmp'}"])

    def add_node(self, name: str, slots: int = SLOTS) -> str:
        """Start a node offering ``slots``; returns its Ray node id once it joined."""
        self._start(name, [f"--address={self.address}", "--num-cpus=0"], slots)
        return self.node_ids[name]

    def _start(self, name: str, args: list[str], slots: int = SLOTS) -> None:
        known = set(self.node_ids.values())
        log = open(self.root / f"{name}.log", "wb")
        self.nodes[name] = subprocess.Popen(
            ["ray", "start", "--block", *args, f"--resources={{\"swe_sandbox\": {slots}, \"test-node-{name}\": 1}}",
             f"--object-store-memory={OBJECT_STORE}", "--disable-usage-stats"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + JOIN_S
        while not (new := self._alive_ids(f"test-node-{name}") - known):
            assert self.nodes[name].poll() is None, (self.root / f"{name}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"node {name} did not join"
            time.sleep(0.2)
        self.node_ids[name] = new.pop()

    def _alive_ids(self, resource: str) -> set[str]:
        code = ("import json, ray; ray.init(address=%r, log_to_driver=False, configure_logging=False);"
                "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive'] and %r in n['Resources']]))")
        done = subprocess.run(["python", "-c", code % (self.address, resource)], env=self.env,
                              capture_output=True, text=True, timeout=60)
        lines = done.stdout.strip().splitlines()
        return set(__import__("json").loads(lines[-1])) if done.returncode == 0 and lines else set()

    def raylet_pid(self, name: str) -> int:
        """The pid of node ``name``'s raylet (in that node's process group)."""
        group = os.getpgid(self.nodes[name].pid)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.getpgid(int(pid)) == group and Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                    return int(pid)
            except (OSError, ProcessLookupError):
                continue
        raise AssertionError(f"no raylet in node {name}'s process group")

    def kill_raylet(self, name: str) -> None:
        """SIGKILL node ``name``'s raylet: the node is lost (its workers end with it)."""
        os.kill(self.raylet_pid(name), signal.SIGKILL)

    def stop(self) -> None:
        """End every node: its ``ray start`` (SIGTERM, which stops the node), then its whole group."""
        for proc in self.nodes.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for proc in self.nodes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalCluster]:
    """The shared cluster: head and nodes ``a`` and ``b``, ``SLOTS`` slots each."""
    require_ray()
    root = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    cluster = LocalCluster(root)
    try:
        cluster.start_head()
        for name in ("a", "b"):
            cluster.add_node(name)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def ray_argv(cluster: LocalCluster) -> list[str]:
    """Command-line options that run a batch or eval on ``cluster``."""
    return [f"--ray={cluster.address}"]


def run_env(cluster: LocalCluster) -> dict[str, Any]:
    """The environment of a driver process started by a test (the cluster's token)."""
    return dict(cluster.env)
