"""The inspect_ai provider (``swe_sandbox.inspect_sandbox``) against inspect_ai itself: its own
sandbox self-check on local, bwrap, docker and podman, streaming ``exec_remote``, and an
``inspect eval`` run (the CLI, a mock model, a sandboxed scorer) on bwrap and docker.

What a backend cannot pass is a strict xfail with the reason (``XFAILS``). One sandbox per backend
serves the whole self-check (as inspect's own runner shares one), so the module stays quick.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("inspect_ai", reason="the [inspect] extra (part of [dev]) is not installed")

from inspect_ai.util import ExecCompleted, ExecStderr, ExecStdout, SandboxEnvironment  # noqa: E402
from inspect_ai.util._sandbox.self_check import *  # noqa: E402, F403 - the checks, collected here

from swe_sandbox.inspect_sandbox import SweSandboxEnvironment  # noqa: E402

from helpers.mini import TEST_LABEL, backend_params, environment_fields, wait_no_containers  # noqa: E402

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
ROOT_REASON = ("commands run as a root that file permission bits do not stop (uid 0 with CAP_DAC_OVERRIDE in "
               "the container, or on this host): the read/write is allowed")
#: check name -> {backend: reason} of what cannot pass ("*": where permission bits do not bind, see
#: ``BYPASS_PROBE``).
XFAILS: dict[str, dict[str, str]] = {
    "test_read_file_not_allowed": {"*": ROOT_REASON},
    "test_write_text_file_without_permissions": {"*": ROOT_REASON},
    "test_write_binary_file_without_permissions": {"*": ROOT_REASON},
    "test_exec_as_user": {"bwrap": "bwrap runs every command as the one sandbox user (no run_as_user): "
                                   "SandboxUserUnsupportedError"},
}
#: checks not run at all, with why.
SKIPS = {("local", "test_exec_as_user"): "it would add a user to this host (adduser as root)"}
#: Prints "bypass" where a file of mode 000 can still be read (bwrap's uid 0 cannot: no DAC override).
BYPASS_PROBE = 'f=$(mktemp); chmod 000 "$f"; cat "$f" 2>/dev/null && echo bypass; rm -f "$f"'


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def write_config(backend: str, tmp_path: Path, label: str = "inspect") -> Path:
    """A YAML config of ``backend`` as a user would write one (skips, or fails in CI, when the
    backend cannot run here)."""
    fields: dict[str, Any] = {"backend": backend, **environment_fields(backend, tmp_path)}
    if backend in ("docker", "podman"):
        fields["labels"] = {TEST_LABEL: label}
    path = tmp_path / f"{backend}.yaml"
    path.write_text(yaml.safe_dump(fields))
    return path


@pytest.fixture(scope="module", params=backend_params(["local", "bwrap", "docker", "podman"]))
async def shared_sandbox(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[str, SandboxEnvironment, bool]]:
    """One sandbox per backend, through inspect's sample lifecycle (init, then cleanup), and whether
    permission bits bind its commands."""
    config = str(write_config(request.param, tmp_path_factory.mktemp(request.param)))
    envs = await SweSandboxEnvironment.sample_init("self-check", config, {})
    try:
        bypass = "bypass" in (await envs["default"].exec(["sh", "-c", BYPASS_PROBE])).stdout
        yield request.param, envs["default"], bypass
    finally:
        await SweSandboxEnvironment.sample_cleanup("self-check", config, envs, False)


@pytest.fixture
async def sandbox_env(request: pytest.FixtureRequest, shared_sandbox: tuple[str, SandboxEnvironment, bool]) -> Any:
    """The self-check's fixture: the shared sandbox, with this check's declared exception applied."""
    backend, env, bypass = shared_sandbox
    name = request.node.originalname
    if (backend, name) in SKIPS:
        pytest.skip(SKIPS[backend, name])
    reasons = XFAILS.get(name, {})
    reason = reasons.get(backend) or (reasons.get("*") if bypass else None)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    return env


async def test_exec_remote_streams_natively(sandbox_env: SandboxEnvironment) -> None:
    """Events come from our stream, stdout and stderr apart, then the exit code; kill() ends a command."""
    proc = await sandbox_env.exec_remote(["sh", "-c", "echo out; echo err >&2; exit 3"])
    events = [event async for event in proc]
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "out\n"
    assert "".join(e.data for e in events if isinstance(e, ExecStderr)) == "err\n"
    assert events[-1] == ExecCompleted(exit_code=3)
    assert not sandbox_env._tools_injected  # inspect's injected tools were never needed
    sleeper = await sandbox_env.exec_remote(["sh", "-c", "echo up; sleep 60"])
    assert isinstance(await sleeper.__anext__(), ExecStdout)
    await sleeper.kill()
    assert (await sandbox_env.exec(["echo", "after"], timeout=30)).stdout == "after\n"


TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, accuracy, scorer
from inspect_ai.util import sandbox


@scorer(metrics=[accuracy()])
def in_sandbox():
    async def score(state, target):
        await sandbox().write_file("answer.txt", target.text)
        result = await sandbox().exec(["sh", "-c", "cat answer.txt; uname -s"])
        return Score(value=CORRECT if result.stdout == target.text + "Linux\\n" else INCORRECT,
                     explanation=result.stdout + result.stderr)
    return score


@task
def sandboxed(config: str):
    return Task(dataset=[Sample(input="hi", target="42"), Sample(input="ho", target="7")],
                scorer=in_sandbox(), sandbox=("swe_sandbox", config))
'''


def entry_point_dir(tmp_path: Path) -> Path:
    """A directory whose dist-info declares our pyproject's ``inspect_ai`` entry point (the editable
    install may point at another checkout): inspect must find the provider through it alone."""
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["inspect_ai"]
    info = tmp_path / "site" / "swe_sandbox_inspect_probe-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: swe-sandbox-inspect-probe\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[inspect_ai]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return info.parent


def tokenizers() -> str:
    """The tiktoken cache litellm (our dependency) ships: inspect counts the mock model's tokens with
    o200k_base, which tiktoken would otherwise download."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.submodule_search_locations
    return str(Path(next(iter(spec.submodule_search_locations)), "litellm_core_utils", "tokenizers"))


@pytest.mark.parametrize("backend", backend_params(["bwrap", "docker"]))
def test_inspect_eval_end_to_end(backend: str, tmp_path: Path) -> None:
    """``inspect eval`` with a mock model: both samples scored in the sandbox, nothing left behind."""
    label = f"inspect-eval-{uuid.uuid4().hex[:8]}"
    config = write_config(backend, tmp_path, label)
    (tmp_path / "task.py").write_text(TASK)
    path = os.pathsep.join([str(entry_point_dir(tmp_path)), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "inspect_ai", "eval", "task.py", "--model", "mockllm/model",
                           "-T", f"config={config}", "--log-dir", "logs", "--log-format", "json",
                           "--display", "plain"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": path, "TIKTOKEN_CACHE_DIR": tokenizers()})
    assert done.returncode == 0, done.stdout + done.stderr
    log = json.loads(next((tmp_path / "logs").glob("*.json")).read_text())
    assert log["status"] == "success", log.get("error")
    scores = [s["scores"]["in_sandbox"] for s in log["samples"]]
    assert [s["value"] for s in scores] == ["C", "C"], scores
    if backend == "docker":
        assert wait_no_containers("docker", label) == []


@pytest.mark.parametrize("backend", backend_params(["local", "bwrap"]))
async def test_each_sample_works_in_a_copy_of_the_configured_directory(backend: str, tmp_path: Path) -> None:
    """Samples run at once: each gets its own copy of the bwrap workspace / local cwd the config names
    (the CI run once saw one sample read another's half-written answer), and the original stays."""
    config = str(write_config(backend, tmp_path))
    seed = tmp_path / "work" / "seed.txt"
    seed.write_text("seed")
    owner = seed.parent.stat()
    os.chown(seed, owner.st_uid, owner.st_gid)  # the sandbox's user (bwrap runs as the workspace's owner)
    first, second = [await SweSandboxEnvironment.sample_init("copies", config, {}) for _ in range(2)]
    try:
        await first["default"].write_file("seed.txt", "first")
        assert await second["default"].read_file("seed.txt") == "seed"
        assert await first["default"].read_file("seed.txt") == "first"
        assert seed.read_text() == "seed"
        made = [ours.as_type(SweSandboxEnvironment).host_dir for ours in (first["default"], second["default"])]
    finally:
        for envs in (first, second):
            await SweSandboxEnvironment.sample_cleanup("copies", config, envs, False)
    assert all(path and not os.path.exists(path) for path in made)


def test_import_swe_sandbox_leaves_inspect_out() -> None:
    """``import swe_sandbox`` (and its aio) imports no inspect_ai: only inspect's entry point loads the provider."""
    code = "import sys, swe_sandbox, swe_sandbox.aio; assert 'inspect_ai' not in sys.modules, 'inspect_ai imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr


async def test_exec_output_limit(sandbox_env: SandboxEnvironment) -> None:
    """Output past inspect's exec limit (lowered for the call, as inspect does) raises, the tail kept."""
    from inspect_ai.util import OutputLimitExceededError
    from inspect_ai.util._sandbox.limits import override_max_exec_output_size

    with override_max_exec_output_size(1024), pytest.raises(OutputLimitExceededError) as caught:
        await sandbox_env.exec(["sh", "-c", "yes a | head -c 4096 | tr -d '\\n'; echo end"])
    assert caught.value.truncated_output is not None and caught.value.truncated_output.endswith("aend\n")


def test_cli_cleanup_reaches_gc(tmp_path: Path) -> None:
    """``inspect sandbox cleanup swe_sandbox`` runs (our gc of every backend available here)."""
    path = os.pathsep.join([str(entry_point_dir(tmp_path)), str(ROOT / "src")])
    done = subprocess.run([sys.executable, "-m", "inspect_ai", "sandbox", "cleanup", "swe_sandbox"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stdout + done.stderr
