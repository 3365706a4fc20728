"""``swe_sandbox.harbor`` proven by Harbor's own runner: ``harbor run`` with its ``oracle`` agent.

The Harbor-format tasks of ``tasks/`` (each a ``task.toml``, ``instruction.md``,
``environment/Dockerfile`` FROM our offline-built ``swe-sandbox/base``, ``tests/test.sh`` writing
the reward, ``solution/solve.sh``) run in one job per environment, through the Python 3.12 venv
that scripts/setup.sh makes (Harbor 0.25.0, ``SWE_SANDBOX_HARBOR_VENV``), with this checkout's
``src`` first on its path. Each of our backends must give what Harbor's own ``docker`` environment
gives on the same tasks (its job runs once, shared): reward 1.0 on the solvable tasks, and on
``verifier-timeout`` a ``VerifierTimeoutError`` after its 3 s, the trial ending on time; and after
the job nothing is left: no container of ours, no process of the task. ``no-network`` runs on ours
only (Harbor's docker enforces it with a sidecar it builds from the network), and so do the
``allowlist*`` tasks, in a job of their own: ``--ek resolve`` maps ``allowed.test`` and
``refused.test`` to an HTTP server of the test on 127.0.0.1:80, which only ``allowed.test`` may
reach (the whole trial, or the agent's phase only); a public task with a restricted verifier is
refused before it starts. ``exec_contract.py``
drives one environment as a trial does (merged output, env, users, cwd, file trees, is_dir): ours
must observe what Harbor's own docker observes, and past an exec's ``timeout_sec`` or a cancelled
call no process of the command may survive (Harbor's docker leaves them running until ``stop``). bwrap is declared
unsupported: the job stops before any trial with ``UNSUPPORTED_BWRAP``. Outside CI a missing venv
or engine skips; under CI it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from swe_sandbox.environments import environment_class

HERE = Path(__file__).parent
TASKS = HERE / "tasks"
SRC = HERE.parents[1] / "src"
VENV = Path(os.environ.get("SWE_SANDBOX_HARBOR_VENV", "/opt/swe-sandbox/harbor-venv"))
HARBOR = VENV / "bin" / "harbor"
#: What the solvable tasks give with the oracle (rewards by name).
SOLVED = {"build-and-run": {"reward": 1.0}, "tree-roundtrip": {"reward": 1.0, "workdir": 1.0},
          "no-network": {"reward": 1.0}}
#: Not run on Harbor's own docker environment: it enforces no-network with a sidecar built from the network.
OURS_ONLY = ("no-network",)
#: The allow-list tasks (ours only, in a job of their own: ``test_allowlist_tasks_reach_only_their_hosts``).
ALLOWLIST_TASKS = "allowlist*"
#: What they give: rewards, or the exception type when the task is refused.
ALLOWLIST_OUTCOMES = {"allowlist": ({"reward": 1.0}, None), "allowlist-phases": ({"reward": 1.0}, None),
                      "allowlist-public-mixed": (None, "ValueError")}
#: ``--ek resolve``: the tasks' names, to ``hello_server`` (port 80: a Harbor host names no port).
RESOLVE = {"allowed.test": "127.0.0.1", "refused.test": "127.0.0.1"}
VERIFIER_TIMEOUT_S = 3.0  # tasks/verifier-timeout/task.toml
MARKER = "sleep 1017"  # what tasks/verifier-timeout/tests/test.sh leaves running
LABEL = "org.swe-sandbox.harbor-session"  # swe_sandbox.harbor's label on its containers
#: The docker CLI's config for these tests: only the Compose plugin of the venv.
DOCKER_CONFIG = Path(tempfile.gettempdir()) / "swe-sandbox-harbor-docker-config"

pytestmark = pytest.mark.timeout(600)


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _need_venv() -> None:
    if not HARBOR.is_file():
        _missing(f"no Harbor venv at {VENV} (scripts/setup.sh makes it)")
    plugin = DOCKER_CONFIG / "cli-plugins" / "docker-compose"  # Compose v2, for Harbor's own docker environment
    if not plugin.exists():
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.unlink(missing_ok=True)
        plugin.symlink_to(VENV / "bin" / "docker-compose")


def _need_engine(backend: str) -> None:
    reason = environment_class(backend).unavailable_reason()
    if reason:
        _missing(f"{backend}: {reason}")


def harbor_run(spec: str, jobs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``harbor run`` of every task with the oracle on environment ``spec``, results under ``jobs``."""
    _need_venv()
    env = {**os.environ, "PYTHONPATH": str(SRC), "HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "DOCKER_CONFIG": str(DOCKER_CONFIG)}
    argv = [str(HARBOR), "run", "-p", str(TASKS), "-a", "oracle", "--env", spec, "-o", str(jobs / "jobs"),
            "-n", "3", "-y", "-q", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=540, stdin=subprocess.DEVNULL)


def trials(jobs: Path) -> dict[str, dict[str, Any]]:
    """Each trial's result.json, by task name."""
    found = {}
    for path in (jobs / "jobs").glob("*/*/result.json"):
        result = json.loads(path.read_text())
        found[result["task_name"]] = result
    return found


def seconds(phase: dict[str, str]) -> float:
    start, end = (datetime.fromisoformat(phase[k].replace("Z", "+00:00")) for k in ("started_at", "finished_at"))
    return (end - start).total_seconds()


def outcome(result: dict[str, Any]) -> tuple[Any, Any]:
    """(rewards, exception type): what must be the same on every environment."""
    rewards = (result.get("verifier_result") or {}).get("rewards")
    return rewards, (result.get("exception_info") or {}).get("exception_type")


def leftovers() -> dict[str, str]:
    """Containers labelled by swe_sandbox.harbor (docker, podman) and processes of the tasks."""
    found = {}
    for engine in ("docker", "podman"):
        done = subprocess.run([engine, "ps", "-aq", "--filter", f"label={LABEL}"], capture_output=True, text=True)
        if done.stdout.strip():
            found[engine] = done.stdout.strip()
    done = subprocess.run(["pgrep", "-af", MARKER], capture_output=True, text=True)
    if done.stdout.strip():
        found["processes"] = done.stdout.strip()
    return found


def check_job(done: subprocess.CompletedProcess[str], jobs: Path, skipped: tuple[str, ...] = ()) -> dict[str, Any]:
    """The job ran every task (but ``skipped``); the solvable ones are solved, the hanging verifier ended on time."""
    results = trials(jobs)
    expected = [name for name in [*SOLVED, "verifier-timeout"] if name not in skipped]
    assert sorted(results) == sorted(expected), done.stdout[-3000:] + done.stderr[-3000:]
    for name, rewards in SOLVED.items():
        if name not in skipped:
            assert outcome(results[name]) == (rewards, None), results[name].get("exception_info")
    hung = results["verifier-timeout"]
    assert outcome(hung) == (None, "VerifierTimeoutError"), hung.get("exception_info")
    assert VERIFIER_TIMEOUT_S - 0.5 < seconds(hung["verifier"]) < VERIFIER_TIMEOUT_S + 2.0, hung["verifier"]
    return results


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """The outcomes with Harbor's own docker environment (docker compose), once per module."""
    _need_engine("docker")
    jobs = tmp_path_factory.mktemp("harbor-docker")
    excluded = [arg for name in (*OURS_ONLY, ALLOWLIST_TASKS) for arg in ("-x", name)]
    results = check_job(harbor_run("docker", jobs, *excluded), jobs, skipped=OURS_ONLY)
    return {name: outcome(result) for name, result in results.items()}


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker),
                                     pytest.param("podman", marks=pytest.mark.podman)])
def test_oracle_job_matches_harbors_docker(backend: str, reference: dict[str, tuple[Any, Any]],
                                           tmp_path: Path) -> None:
    _need_engine(backend)
    done = harbor_run(f"swe_sandbox.harbor:{backend.capitalize()}Environment", tmp_path, "-x", ALLOWLIST_TASKS)
    results = check_job(done, tmp_path)
    assert {name: outcome(result) for name, result in results.items() if name not in OURS_ONLY} == reference
    hung = results["verifier-timeout"]
    ended = datetime.fromisoformat(hung["finished_at"].replace("Z", "+00:00"))
    verifier_end = datetime.fromisoformat(hung["verifier"]["finished_at"].replace("Z", "+00:00"))
    assert (ended - verifier_end).total_seconds() < 5.0, "the trial did not end soon after its verifier timed out"
    assert leftovers() == {}


class _Hello(BaseHTTPRequestHandler):
    """``hello HOST`` to every GET (``HOST``: the request's ``Host``), recorded in ``served``."""

    served: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        host = self.headers.get("Host", "")
        self.served.append(host)
        body = f"hello {host}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def hello_server() -> Iterator[list[str]]:
    """An HTTP server on 127.0.0.1:80 (what the proxy reaches for ``RESOLVE``'s names); yields the
    ``Host`` of each request it served (emptied by each test)."""
    try:
        server = ThreadingHTTPServer(("127.0.0.1", 80), _Hello)
    except OSError as exc:
        _missing(f"cannot listen on 127.0.0.1:80: {exc}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield _Hello.served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker),
                                     pytest.param("podman", marks=pytest.mark.podman)])
def test_allowlist_tasks_reach_only_their_hosts(backend: str, hello_server: list[str], tmp_path: Path) -> None:
    _need_engine(backend)
    hello_server.clear()
    done = harbor_run(f"swe_sandbox.harbor:{backend.capitalize()}Environment", tmp_path, "-i", ALLOWLIST_TASKS,
                      "-i", "no-network", "--ek", f"resolve={json.dumps(RESOLVE)}")
    results = trials(tmp_path)
    assert sorted(results) == sorted([*ALLOWLIST_OUTCOMES, "no-network"]), done.stdout[-3000:] + done.stderr[-3000:]
    assert {name: outcome(results[name]) for name in ALLOWLIST_OUTCOMES} == ALLOWLIST_OUTCOMES, \
        {name: results[name].get("exception_info") for name in results}
    assert outcome(results["no-network"]) == (SOLVED["no-network"], None)  # resolve ignored without allowlist
    refused = results["allowlist-public-mixed"]["exception_info"]["exception_message"]
    assert refused == harbor_constant("PUBLIC_MIXED").format(modes="allowlist, public")
    # allowlist's verifier and allowlist-phases' agent; never refused.test, nor the raw IP
    assert hello_server == ["allowed.test", "allowed.test"]
    assert leftovers() == {}


def exec_contract(spec: str, marker: int) -> dict[str, Any]:
    """What ``exec_contract.py`` observes of the environment ``spec`` (run by the venv's python)."""
    _need_venv()
    env = {**os.environ, "PYTHONPATH": str(SRC), "DOCKER_CONFIG": str(DOCKER_CONFIG)}
    done = subprocess.run([str(VENV / "bin" / "python"), str(HERE / "exec_contract.py"), spec,
                           str(TASKS / "verifier-timeout" / "environment"), str(marker)],
                          env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


#: Observations that differ: how long things took, what survived a timeout, and the exit status of
#: ``exit 3``, which Harbor 0.25.0's docker reports as 0 when its own stdin is /dev/null (as under CI),
#: and the order of stdout and stderr lines, which its docker (two streams of docker compose) varies.
DIFFERENT = ("timeout_s", "cancel_s", "alive_after_timeout", "alive_after_cancel", "merged")


@pytest.fixture(scope="module")
def reference_contract() -> dict[str, Any]:
    """Harbor's own docker environment under ``exec_contract.py`` (once per module)."""
    _need_engine("docker")
    return exec_contract("harbor.environments.docker.docker:DockerEnvironment", 1020)


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker),
                                     pytest.param("podman", marks=pytest.mark.podman)])
def test_exec_and_files_as_harbors_docker_and_timeouts_kill_the_tree(backend: str,
                                                                     reference_contract: dict[str, Any]) -> None:
    _need_engine(backend)
    seen = exec_contract(f"swe_sandbox.harbor:{backend.capitalize()}Environment", 1018)
    assert {k: v for k, v in seen.items() if k not in DIFFERENT} == \
        {k: v for k, v in reference_contract.items() if k not in DIFFERENT}
    assert seen["merged"] == ["out\nerr\n", None, 3]  # in the order written: Harbor's docker's order varies
    assert sorted(reference_contract["merged"][0].splitlines()) == ["err", "out"]
    assert seen["nobody"] == "nobody\n"
    assert seen["timeout_error"] == "Command timed out after 2 seconds" and seen["timeout_s"] < 3.0
    assert seen["alive_after_timeout"] == seen["alive_after_cancel"] == seen["alive_after_stop"] == 0
    assert seen["cancel_s"] < 1.0 and seen["after"] == "still here\n"


def harbor_constant(name: str) -> str:
    """``swe_sandbox.harbor.NAME`` (a message), as the venv's python imports it (this one has no harbor)."""
    code = f"import swe_sandbox.harbor as h; print(h.{name})"
    done = subprocess.run([str(VENV / "bin" / "python"), "-c", code], env={**os.environ, "PYTHONPATH": str(SRC)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.bwrap
def test_bwrap_is_refused_before_any_trial(tmp_path: Path) -> None:
    done = harbor_run("swe_sandbox.harbor:BwrapEnvironment", tmp_path, "-i", "build-and-run")
    assert done.returncode != 0
    message = harbor_constant("UNSUPPORTED_BWRAP")
    assert message.startswith("swe_sandbox.harbor: the bwrap backend")
    assert message in " ".join((done.stdout + done.stderr).split())
    assert not (tmp_path / "jobs").exists()


def test_import_swe_sandbox_imports_no_harbor() -> None:
    code = "import sys, swe_sandbox; swe_sandbox.get_environment; assert 'harbor' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
