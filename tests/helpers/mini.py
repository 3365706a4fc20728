"""What the mini-swe-agent tests (tests/mini) share: the real mini-swe-agent from PyPI (the
``[mini]`` extra, part of ``[dev]``), its own command lines, configs and models; no mocks.

mini's import prints a banner and reads a global config directory; every mini process the tests
start (and this one, see ``quiet_mini``) gets a fresh directory, so the tester's own mini
settings (a default model, API keys) never play a part.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from swe_sandbox.testing.kit import shareable_workspace, still_there

from helpers.variants import require_backend

#: The backends the issue names, each with its class in ``swe_sandbox.minisweagent``.
MINI_CLASSES = {
    "local": "swe_sandbox.minisweagent.LocalEnvironment",
    "bwrap": "swe_sandbox.minisweagent.BwrapEnvironment",
    "docker": "swe_sandbox.minisweagent.DockerEnvironment",
    "podman": "swe_sandbox.minisweagent.PodmanEnvironment",
    "ssh": "swe_sandbox.minisweagent.SshEnvironment",
}
SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
IMAGE = "swe-sandbox/base"


def backend_params(names: list[str] | None = None) -> list[Any]:
    """``pytest.param`` per backend, with the backend's marker (``pytest -m docker`` selects it)."""
    return [pytest.param(name, marks=getattr(pytest.mark, name), id=name) for name in (names or MINI_CLASSES)]


def quiet_mini() -> None:
    """Before mini is imported in this process: no banner, and a global config directory of the
    tests' own (not the tester's: no default model or API key of theirs plays a part)."""
    config = Path(tempfile.gettempdir()) / "swe-sandbox-tests-mini-config"
    config.mkdir(exist_ok=True)
    os.environ["MSWEA_SILENT_STARTUP"] = "1"
    os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = str(config)


def mini_process_env(tmp_path: Path) -> dict[str, str]:
    """Environment of a mini command line: its own global config (and no first-run setup prompt),
    Hugging Face ``datasets`` offline with its cache under ``tmp_path``."""
    config = tmp_path / "mini-config"
    config.mkdir(exist_ok=True)
    return {**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(config), "MSWEA_CONFIGURED": "true",
            "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def mini_script(name: str) -> str:
    """Path of one of mini-swe-agent's console scripts (``mini``, ``mini-extra``) of this interpreter."""
    found = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    assert found, f"mini-swe-agent's `{name}` is not installed: pip install -e '.[dev]'"
    return found


def run_mini(argv: list[str], tmp_path: Path, timeout: float = 240,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a mini command line (``argv[0]``: ``mini`` or ``mini-extra``) with no stdin, in
    ``tmp_path``, with ``mini_process_env`` plus ``env``."""
    return subprocess.run([mini_script(argv[0]), *argv[1:]], cwd=tmp_path,
                          env={**mini_process_env(tmp_path), **(env or {})},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def environment_fields(backend: str, tmp_path: Path) -> dict[str, Any]:
    """Config fields for ``backend``'s class, as a mini user would put them in the YAML (the current
    test skips, or fails under CI, when the backend cannot run here)."""
    require_backend(backend)
    if backend == "local":
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        return {"cwd": str(work)}
    if backend == "bwrap":
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        return {"workspace": str(shareable_workspace(work))}
    if backend in ("docker", "podman"):
        return {"image": IMAGE, "cwd": "/workspace"}
    from ssh.sshd import ssh_spec

    spec = ssh_spec("python")
    spec.pop("backend")
    return spec


def cli_fields(fields: dict[str, Any]) -> list[str]:
    """``-c environment.KEY=VALUE`` options of mini's command lines (values as JSON unless strings)."""
    args = []
    for key, value in fields.items():
        args += ["-c", f"environment.{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return args


def deterministic_outputs(*commands: str) -> list[dict[str, Any]]:
    """Replies of mini's ``deterministic`` model: one assistant message per command."""
    return [{"role": "assistant", "content": f"Step {i}: running a command.", "extra": {"actions": [{"command": c}]}}
            for i, c in enumerate(commands, 1)]


#: Label the tests put on their containers (``labels`` field), so they find theirs among others'.
TEST_LABEL = "org.swe-sandbox.test-mini"


def containers_labelled(engine: str, value: str) -> list[str]:
    """Ids of the containers (any state) of ``engine`` labelled ``TEST_LABEL=value``."""
    done = subprocess.run([engine, "ps", "-a", "-q", "--filter", f"label={TEST_LABEL}={value}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def wait_no_containers(engine: str, value: str, within: float = 15.0) -> list[str]:
    """Containers labelled ``TEST_LABEL=value`` still there after ``within`` seconds (removal is
    asynchronous)."""
    return still_there(lambda: containers_labelled(engine, value), within, interval=0.2)
