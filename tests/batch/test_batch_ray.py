"""``--ray`` on a real multi-node Ray cluster on this machine (``ray_fixtures``: a head and two
nodes, each its own raylet offering 2 ``swe_sandbox`` slots), no mocks:

- the bundled task suite with evaluation, on bwrap and on docker: the same ``preds.json`` and
  ``report.json`` as the thread pool's run of the same tasks and recordings; on docker, sampled
  from the engine during the run, no node ever runs more containers than the 2 slots it offers;
- a node lost midway (its raylet SIGKILLed): every task ends exactly once on the other nodes, the
  lost attempts recorded with their node, no container left, nothing for ``gc``;
- the driver SIGKILLed, then the same command: it resumes, each instance exactly once, no sandbox left;
- the cost limit holds across the cluster: the driver counts, running tasks stop when told.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from batch_fixtures import (  # noqa: F401
    FIX,
    MARKER,
    SUBMIT,
    bwrap_ok,
    calc_repo,
    calc_task,
    docker_ok,
    fix_patch,
    run_config,
    wait_for,
    write_tasks,
)
from ray_fixtures import LocalCluster, ray_cluster, require_ray  # noqa: F401 - fixture
from suite_fixtures import replay_args, suite  # noqa: F401 - fixture

from swe_sandbox.batch.ray.settings import LABEL_RAY_NODE
from swe_sandbox.batch.records import ResultsLog

#: Seconds a whole suite run may take (20 tasks with evaluation).
SUITE_S = 600


def cli(cluster: LocalCluster, *args: str, timeout: float = SUITE_S) -> subprocess.CompletedProcess:
    """``swe-sandbox ARGS`` with the cluster's token in its environment."""
    return subprocess.run([sys.executable, "-m", "swe_sandbox", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=cluster.env)


def start_cli(cluster: LocalCluster, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "swe_sandbox", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env,
                            start_new_session=True)


def read(path: Path) -> object:
    return json.loads(path.read_text())


def containers(label: str, *, running: bool = False) -> list[str]:
    """``org.swe-sandbox.ray-node`` label of each of the test's containers (any state, or running)."""
    args = ["--filter", f"label=swe-sandbox.test={label}"] + (["--filter", "status=running"] if running else [])
    done = subprocess.run(["docker", "ps", "-a", *args, "--format", f'{{{{.Label "{LABEL_RAY_NODE}"}}}}'],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


class PerNodePeak(threading.Thread):
    """Samples ``docker ps`` until stopped: the most running containers seen at once on each node."""

    def __init__(self, label: str) -> None:
        super().__init__(daemon=True)
        self.label, self.peak, self.samples = label, Counter(), 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for node, count in Counter(containers(self.label, running=True)).items():
                self.peak[node] = max(self.peak[node], count)
            self.samples += 1

    def stop(self) -> Counter:
        self.done.set()
        self.join()
        return self.peak


#: How many of the bundled suite's tasks the Ray comparison runs.
RAY_SLICE = 12


def suite_args(suite: Path, backend: str, label: str) -> list[str]:
    if backend == "bwrap":
        return [str(suite / "tasks-workspace.jsonl"), "--env", str(suite / "bwrap.yaml")]
    return [str(suite / "tasks.jsonl"), "--env", "docker", "-c", f'environment.labels={{"swe-sandbox.test": "{label}"}}']


@pytest.mark.parametrize("backend", [pytest.param("bwrap", marks=pytest.mark.bwrap),
                                     pytest.param("docker", marks=pytest.mark.docker)])
def test_suite_on_ray_writes_what_the_thread_pool_writes(backend, suite, ray_cluster, request, tmp_path):
    request.getfixturevalue(f"{backend}_ok")
    label = tmp_path.name
    # 12 of the 20 tasks: two rounds of the cluster's 6 slots, at half the cost of the whole suite
    args = ["batch", *suite_args(suite, backend, label), "--slice", f"0:{RAY_SLICE}", "--eval", *replay_args(suite)]
    pool = cli(ray_cluster, *args, "-o", str(tmp_path / "pool"), "-w", "4")
    assert pool.returncode == 0, pool.stdout + pool.stderr
    sampler = PerNodePeak(label)
    if backend == "docker":
        sampler.start()
    on_ray = cli(ray_cluster, *args, "-o", str(tmp_path / "ray"), f"--ray={ray_cluster.address}")
    peak = sampler.stop() if backend == "docker" else None
    assert on_ray.returncode == 0, on_ray.stdout + on_ray.stderr
    for name in ("preds.json", "report.json"):
        assert read(tmp_path / "ray" / name) == read(tmp_path / "pool" / name), name
    records = ResultsLog(tmp_path / "ray" / "results.jsonl").read()
    nodes = {r.ray_node for r in records}
    assert len(records) == RAY_SLICE and len(nodes) == 3 and nodes <= set(ray_cluster.node_ids.values())
    assert all((tmp_path / "ray" / r.instance_id / f"{r.instance_id}.traj.json").is_file() for r in records)
    if peak is not None:  # checked from the engine: never more than a node's 2 slots at once there
        assert set(peak) == nodes and max(peak.values()) == 2, (peak, sampler.samples)
        assert wait_for(lambda: not containers(label), 30), containers(label)
    else:  # `eval --ray` of the same predictions grades them as the batch did
        evaluated = cli(ray_cluster, "eval", str(tmp_path / "pool" / "preds.json"), "--tasks",
                        *suite_args(suite, backend, label), "-o", str(tmp_path / "eval"), f"--ray={ray_cluster.address}")
        assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
        report, expected = read(tmp_path / "eval" / "report.json"), read(tmp_path / "pool" / "report.json")
        for key in ("resolved_ids", "unresolved_ids", "empty_patch_ids", "error_ids"):
            assert report[key] == expected[key], key


def calc_argv(tasks: Path, out: Path, cluster: LocalCluster, backend: str, label: str,
              marker: str = MARKER) -> list[str]:
    outputs = json.dumps([FIX, marker, SUBMIT])
    return ["batch", str(tasks), "-o", str(out), "--env", backend, f"--ray={cluster.address}",
            "-c", "model.model_class=deterministic", "-c", f"model.outputs={outputs}",
            *(["-c", f'environment.labels={{"swe-sandbox.test": "{label}"}}'] if backend == "docker" else [])]


def expected_preds(ids: list[str], patch: str) -> dict:
    return {i: {"model_name_or_path": "deterministic", "instance_id": i, "model_patch": patch} for i in ids}


@pytest.mark.docker
def test_a_node_lost_midway_every_task_once_nothing_left(ray_cluster, docker_ok, calc_repo, fix_patch, tmp_path):
    label, out, ids = tmp_path.name, tmp_path / "out", [f"n{n}" for n in range(10)]
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(i, calc_repo) for i in ids])
    victim = ray_cluster.add_node("victim")
    proc = start_cli(ray_cluster, *calc_argv(tasks, out, ray_cluster, "docker", label))
    try:
        assert wait_for(lambda: containers(label, running=True).count(victim) == 2, 120), containers(label)
        ray_cluster.kill_raylet("victim")
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stdout + stderr
    records = ResultsLog(out / "results.jsonl").read()
    done = [r for r in records if r.done]
    assert sorted(r.instance_id for r in done) == ids and {r.exit_status for r in done} == {"Submitted"}
    lost = [r for r in records if not r.done]
    assert len(lost) >= 2 and {r.ray_node for r in lost} == {victim}
    assert all(r.attempt == 1 and r.exit_status in ("NodeDiedError", "WorkerCrashedError") for r in lost)
    retried = {r.instance_id: r for r in done if r.instance_id in {x.instance_id for x in lost}}
    assert all(r.attempt == 2 and r.ray_node != victim for r in retried.values())
    assert read(out / "preds.json") == expected_preds(ids, fix_patch)
    assert wait_for(lambda: not containers(label), 60), containers(label)  # the lost node's attaches broke
    gc = cli(ray_cluster, "gc", "--env", "docker", "--dry-run", "--json", timeout=60)
    assert [c for c in json.loads(gc.stdout or "[]") if c["action"] != "kept (owner alive)"] == [], gc.stdout


def marker_processes(marker: str) -> list[str]:
    done = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True)
    return done.stdout.splitlines()


@pytest.mark.bwrap
def test_driver_sigkilled_then_resumed_exactly_once(ray_cluster, bwrap_ok, calc_repo, fix_patch, tmp_path):
    out, ids = tmp_path / "out", [f"k{n}" for n in range(8)]
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(i, calc_repo) for i in ids])
    marker = f"sleep 1.{secrets.randbelow(10**6) + 10**6}"  # this test's own: other runs use MARKER
    argv = calc_argv(tasks, out, ray_cluster, "bwrap", "", marker)
    proc = start_cli(ray_cluster, *argv)
    try:
        assert wait_for(lambda: ResultsLog(out / "results.jsonl").read() and len(marker_processes(marker)) >= 2, 120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert wait_for(lambda: not marker_processes(marker), 30), marker_processes(marker)  # Ray ended the job's workers
    first = ResultsLog(out / "results.jsonl").read()
    assert 1 <= len(first) < len(ids)
    resumed = cli(ray_cluster, *argv, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted(r.instance_id for r in records) == ids and all(r.attempt == 1 and r.done for r in records)
    assert read(out / "preds.json") == expected_preds(ids, fix_patch)
    assert not marker_processes(marker)


@pytest.mark.bwrap
def test_cost_limit_holds_across_the_cluster(ray_cluster, bwrap_ok, calc_repo, tmp_path, monkeypatch):
    from swe_sandbox.batch import load_tasks, run_batch

    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(key, ray_cluster.env[key])
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(f"c{n}", calc_repo) for n in range(12)]))
    config = run_config(["sleep 0.2"] * 40 + [SUBMIT], cost_limit=0.0)  # no per-instance limit: the batch's only
    config["model"]["cost_per_call"] = 1.0
    out = run_batch(tasks, tmp_path / "out", run_config=config, env_config="bwrap", cost_limit=8.0,
                    executor="ray", ray_address=ray_cluster.address)
    records = ResultsLog(out / "results.jsonl").read()
    assert records and {r.exit_status for r in records} == {"LimitsExceeded"}
    assert all("total cost limit" in r.error for r in records), [r.error for r in records]
    assert len(records) <= 6  # no instance started once the limit was reached: at most the slots' worth
    total = sum(r.cost for r in records)  # each stops within a heartbeat (0.5 s) of the driver's word
    assert 8.0 <= total <= 8.0 + 4 * len(records), [(r.instance_id, r.cost) for r in records]


def test_ray_is_imported_only_when_asked_for_and_bare_ray_means_local():
    from swe_sandbox.cli.batch import bare_ray_flag

    code = ("import sys, swe_sandbox, swe_sandbox.cli.app, swe_sandbox.cli.batch, swe_sandbox.batch.batch_run, swe_sandbox.batch.eval_run;"
            "print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    assert bare_ray_flag(["batch", "t.jsonl", "--ray"]) == ["batch", "t.jsonl", "--ray=local"]
    assert bare_ray_flag(["eval", "p", "--ray", "-w", "2"])[2] == "--ray=local"
    assert bare_ray_flag(["batch", "t", "--ray", "auto"]) == ["batch", "t", "--ray", "auto"]
    assert bare_ray_flag(["exec", "--", "x", "--ray"]) == ["exec", "--", "x", "--ray"]


def test_live_progress_shows_each_instance_node_and_slots_in_use():
    from rich.console import Console

    from swe_sandbox.batch.live import LiveProgress

    progress = LiveProgress()
    progress.update("a", phase="running", ray_node="3f2a9c1e" + "0" * 48, step=2)
    progress.update("b", phase="running", ray_node="3f2a9c1e" + "1" * 48)
    progress.update("c", phase="evaluating", ray_node="81b0d4aa" + "0" * 48)
    console = Console(record=True, width=120)
    console.print(progress.render())
    text = console.export_text()
    assert "3f2a9c1e a" in text and "81b0d4aa c" in text
    assert "slots in use: 3f2a9c1e 2 · 81b0d4aa 1" in text


def test_cluster_addresses_are_checked_before_ray_is_joined(tmp_path, monkeypatch):
    """A wrong ``--ray`` address is a clear error at once (Ray's own connect retries for minutes):
    nothing listening is exit 3, a malformed address exit 2; ``auto`` reads ``RAY_ADDRESS``."""
    require_ray()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: refused
        tasks = write_tasks(tmp_path / "t.jsonl", [{"instance_id": "a", "problem_statement": "-"}])
        base = [sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "--env", "bwrap",
                "-c", "model.model_class=deterministic", "-c", 'model.outputs=["true"]']
        for address, status, says in [(nobody, 3, f"no cluster answers at {nobody}"),
                                      ("ray://127.0.0.1:10001", 2, "is not a cluster address"),
                                      ("auto", 3, f"no cluster answers at {nobody}")]:
            done = subprocess.run([*base, "-o", str(tmp_path / address.replace("/", "_")), f"--ray={address}"],
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                                  env={**os.environ, "RAY_ADDRESS": nobody})
            assert done.returncode == status and says in done.stderr, (address, done.stderr)


def test_scratch_of_workers_that_are_gone_is_swept(tmp_path):
    from swe_sandbox.batch.ray.worker import SCRATCH_PREFIX, sweep_scratch

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine, gone = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-a", tmp_path / f"{SCRATCH_PREFIX}{dead.pid}-b"
    for path in (mine, gone):
        path.mkdir()
        (path / "trajectory.json").write_text("{}")
    sweep_scratch(str(tmp_path))
    assert mine.is_dir() and not gone.exists()
