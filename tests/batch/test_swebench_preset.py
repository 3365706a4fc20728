"""The ``swebench`` presets (docker, podman): an agent on a SWE-bench-shaped image finds the image's
conda env without the user setting anything. The image is built here as SWE-bench's are laid out
(``swe-sandbox/base`` plus a conda-style env at ``/opt/miniconda3/envs/testbed``, activated by a
line in ``/root/.bashrc``, as the harness's Dockerfiles write it); ``bash -c`` reads no rc file,
so without the preset's ``BASH_ENV`` the env's ``python`` is not found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from batch_fixtures import SUBMIT, calc_repo, calc_task, run, write_tasks  # noqa: F401 - fixture

from helpers.variants import require_backend

ENGINES = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("podman", marks=pytest.mark.podman)]
PRESETS = {"docker": "swebench", "podman": "swebench-podman"}
IMAGE = "swe-sandbox-test/conda-style:1"
ENV_BIN = "/opt/miniconda3/envs/testbed/bin"
#: What conda's profile script gives ``conda activate NAME``, in a few lines of sh.
CONDA_SH = 'conda() { [ "$1" = activate ] && export CONDA_DEFAULT_ENV="$2" PATH="/opt/miniconda3/envs/$2/bin:$PATH"; }\n'
BASHRC = "source /opt/miniconda3/etc/profile.d/conda.sh && conda activate testbed\n"
#: The agent's look around, then its submission.
LOOK = "command -v python; echo env=$CONDA_DEFAULT_ENV; pwd"


def build_image(engine: str, context: Path) -> None:
    """``IMAGE`` from ``swe-sandbox/base`` with COPY steps only (nothing runs, nothing is pulled)."""
    (context / "opt/miniconda3/etc/profile.d").mkdir(parents=True)
    (context / "opt/miniconda3/etc/profile.d/conda.sh").write_text(CONDA_SH)
    python = context / "opt/miniconda3/envs/testbed/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nexec python3 "$@"\n')
    python.chmod(0o755)
    (context / "bashrc").write_text(BASHRC)
    (context / "Containerfile").write_text("FROM swe-sandbox/base\nCOPY opt /opt\nCOPY bashrc /root/.bashrc\n")
    pull = ["--pull=never"] if engine == "podman" else []
    done = subprocess.run([engine, "build", *pull, "-q", "-t", IMAGE, "-f", str(context / "Containerfile"), str(context)],
                          capture_output=True, text=True, timeout=300, env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_an_agent_on_a_swebench_image_gets_its_conda_env(engine, calc_repo, tmp_path):
    require_backend(engine)
    build_image(engine, tmp_path / "context")
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task("conda", calc_repo, image=IMAGE)])
    label = f'environment.labels={{"swe-sandbox.test": "{tmp_path.name}"}}'
    done = run([sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "-o", str(tmp_path / "out"),
                "--env", PRESETS[engine], "-c", "model.model_class=deterministic",
                "-c", f"model.outputs={json.dumps([LOOK, SUBMIT])}", "-c", label], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    trajectory = json.loads((tmp_path / "out" / "conda" / "conda.traj.json").read_text())
    seen = next(m["content"] for m in trajectory["messages"] if m["role"] in ("user", "tool") and "env=" in str(m["content"]))
    assert f"{ENV_BIN}/python" in str(seen) and "env=testbed" in str(seen) and "/testbed" in str(seen), seen
