"""The network of each phase of a batch task (``swe_sandbox.batch.phases``), on real backends.

One task: its ``setup_command`` fetches from a local package index by the name only setup may
reach (``setup.test``); the agent reaches the index by its own name (``index.test``) and is
refused the setup's name and another; the evaluation has no network (its ``eval_command`` tries
the index and is refused) and still grades the fix resolved. Each phase's decisions are recorded:
the agent's in the trajectory's ``info.network``, the evaluation's in ``eval/network.json``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from batch_fixtures import FIX, SUBMIT, calc_repo, calc_task, run_config, write_tasks  # noqa: F401

from swe_sandbox.batch import load_tasks, run_batch
from swe_sandbox.batch.records import ResultsLog
from swe_sandbox.batch.sandbox import check_environment_config
from swe_sandbox.errors import ConfigError
from swe_sandbox.testing.package_index import package_index

from helpers.variants import require_backend

BACKENDS = [pytest.param("bwrap"), pytest.param("docker", marks=pytest.mark.docker)]


def fetch(url: str) -> str:
    """A command printing ``OK <status>`` or ``FAIL <error>`` for a GET of ``url`` (urllib goes
    through ``HTTP_PROXY`` when the sandbox sets it)."""
    code = ("import sys, urllib.request as u\ntry:\n    print('OK', u.urlopen(sys.argv[1], timeout=10).status)\n"
            "except Exception as e:\n    print('FAIL', e)")
    return f"python3 -c \"{code}\" {url}"


@pytest.fixture(scope="module")
def index_port(tmp_path_factory: pytest.TempPathFactory):
    with package_index(tmp_path_factory.mktemp("index")) as port:
        yield port


def env_config(backend: str, port: int, marker: str) -> dict:
    env = {"backend": backend, "network": "allowlist", "allow": [f"index.test:{port}"],
           "resolve": {"index.test": "127.0.0.1", "setup.test": "127.0.0.1", "other.test": "127.0.0.1"}}
    if backend == "docker":
        env["labels"] = {"swe-sandbox.test": marker}
    return env


def seen(phase: dict) -> set[tuple[str, bool]]:
    return {(d["host"], d["allowed"]) for d in phase["decisions"]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_phase_sees_its_own_network(backend, index_port, calc_repo, tmp_path):
    require_backend(backend)
    url = f"http://{{}}.test:{index_port}/simple/tinypkg/"
    setup = f"{fetch(url.format('setup'))} > /tmp/setup.out; grep -q '^OK 200' /tmp/setup.out"
    task = calc_task("net", calc_repo, setup_command=setup, setup_network="allowlist",
                     setup_allow=[f"setup.test:{index_port}"],
                     eval_command=f"{fetch(url.format('index'))}; python3 check.py")
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [task]))
    outputs = [fetch(url.format("index")), fetch(url.format("setup")), fetch(url.format("other")), FIX, SUBMIT]
    out = run_batch(tasks, tmp_path / "out", run_config=run_config(outputs), evaluate=True,
                    env_config=env_config(backend, index_port, tmp_path.name))
    [record] = ResultsLog(out / "results.jsonl").read()
    assert (record.exit_status, record.eval_status) == ("Submitted", "resolved"), record

    traj = json.loads((out / "net" / "net.traj.json").read_text())
    observed = [m["content"] for m in traj["messages"] if m["role"] == "tool"][:3]
    assert "OK 200" in observed[0] and "FAIL" in observed[1] and "FAIL" in observed[2], observed
    network = traj["info"]["network"]
    assert network["setup"]["allow"] == [f"setup.test:{index_port}"]
    assert seen(network["setup"]) == {("setup.test", True)}
    assert network["agent"]["allow"] == [f"index.test:{index_port}"]
    assert seen(network["agent"]) == {("index.test", True), ("setup.test", False), ("other.test", False)}

    evaluation = json.loads((out / "net" / "eval" / "network.json").read_text())
    assert seen(evaluation["setup"]) == {("setup.test", True)}
    assert evaluation["eval"]["network"] == "none"
    assert seen(evaluation["eval"]) == {("index.test", False)}
    assert "FAIL" in (out / "net" / "eval" / "test_output.txt").read_text()
    if backend == "docker":
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=swe-sandbox.test={tmp_path.name}"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert left == []


@pytest.mark.parametrize("env, fields, says", [
    ({"backend": "bwrap", "network": "allowlist", "allow": ["pypi.org"]}, {"setup_network": "on"},
     "setup_network: setup has network 'on' but agent has 'allowlist'"),
    ({"backend": "bwrap", "network": "on"}, {"setup_network": "allowlist"},
     "setup_network: setup has network 'allowlist' but agent has 'on'"),
    ({"backend": "local"}, {"setup_network": "allowlist"}, "setup_network: allowlist is not available on backend 'local'"),
    ({"backend": "local"}, {"eval_network": "allowlist"}, "eval_network: allowlist is not available on backend 'local'"),
    ({"backend": "docker", "runner": "exec"}, {"eval_network": "allowlist", "eval_allow": ["pypi.org"]},
     "the eval sandbox needs network: allowlist"),
])
def test_phases_no_sandbox_can_have_are_refused_up_front(env, fields, says, tmp_path: Path):
    tasks = load_tasks(write_tasks(tmp_path / "t.jsonl", [{"instance_id": "x", "problem_statement": "p"},
                                                         {"instance_id": "y", "problem_statement": "p", **fields}]))
    with pytest.raises(ConfigError) as caught:
        check_environment_config(tasks, env)
    assert "task 'y' (line 2)" in str(caught.value) and says in str(caught.value), caught.value


@pytest.mark.parametrize("fields, says", [
    ({"eval_network": "allowlist", "eval_allow": ["10.0.0.1"]}, "line 1: eval_allow: allow entry '10.0.0.1'"),
    ({"setup_network": "allowlist", "setup_allow": ["a..b"]}, "line 1: setup_allow: allow entry 'a..b'"),
    ({"eval_allow": ["pypi.org"]}, "eval_allow: only with eval_network: allowlist"),
])
def test_bad_allow_lists_name_the_field_and_line(fields, says, tmp_path: Path):
    path = write_tasks(tmp_path / "t.jsonl", [{"instance_id": "x", "problem_statement": "p", **fields}])
    with pytest.raises(ConfigError, match=None) as caught:
        load_tasks(path)
    assert says in str(caught.value), caught.value


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_groups_samples_run_with_the_agents_network(backend, index_port, calc_repo, tmp_path):
    """``rollout_group``: the prepared sandbox ran setup with the setup's allow-list; each sample's
    sandbox (a fork of its snapshot, or a fresh one) is switched to the agent's before it runs."""
    from swe_sandbox.batch.groups import rollout_group

    require_backend(backend)
    url = f"http://{{}}.test:{index_port}/simple/tinypkg/"
    task = load_tasks(write_tasks(tmp_path / "t.jsonl", [calc_task(
        "g", calc_repo, setup_command=f"{fetch(url.format('setup'))} | grep -q '^OK 200'", setup_network="allowlist",
        setup_allow=[f"setup.test:{index_port}"])]))[0]
    outputs = [fetch(url.format("setup")), fetch(url.format("index")), SUBMIT]
    group = rollout_group(task, 2, run_config(outputs), env_config(backend, index_port, tmp_path.name), evaluate=False)
    for result in group.results:
        assert result.exit_status == "Submitted", result.error
        assert seen(result.network["agent"]) == {("setup.test", False), ("index.test", True)}, (group.mode, result.network)
