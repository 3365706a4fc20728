"""SWE-bench-style images of the suite, built offline FROM ``swe-sandbox/base``.

Two layers, as SWE-bench's environment and instance images: ``swe-sandbox-suite/env`` adds the
copied pytest to the base image's Python (``/usr/lib/python3/dist-packages``, where Debian's own
``python3-pytest`` would go: ``python3 -m pytest`` works for the agent and for evaluation alike);
``swe-sandbox-suite/<instance_id>`` adds the task's repository at ``/testbed`` (root-owned, as
``COPY`` makes it). Only ``COPY`` steps: nothing runs during a build, nothing is pulled (docker's
legacy builder, podman ``--pull=never``), so no registry and no network are needed.

User namespaces: the engines remap every container (docker ``--userns-remap``, podman
``userns=auto`` with 65536 ids), so files must belong to ids 0-65535 inside the image: ``COPY``
gives them to root (0). A dockerd that starts remapping keeps its images apart: the images are
then missing and this builds them again (each is found by its label, the hash of its inputs).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from suitelib.spec import digest

BASE_IMAGE = "swe-sandbox/base"
ENV_IMAGE = "swe-sandbox-suite/env"
IMAGE_PREFIX = "swe-sandbox-suite/"
HASH_LABEL = "org.swe-sandbox.suite-hash"
PYTHON_SITE = "/usr/lib/python3/dist-packages"
TESTBED = "/testbed"
BUILD_TIMEOUT_S = 600


def task_image(instance_id: str) -> str:
    return IMAGE_PREFIX + instance_id


def _engine(engine: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the legacy builder: FROM a local image, offline
    return subprocess.run([engine, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def image_id(engine: str, image: str) -> str | None:
    done = _engine(engine, "image", "inspect", "--format", "{{.Id}}", image)
    return done.stdout.strip() if done.returncode == 0 else None


def label_of(engine: str, image: str) -> str | None:
    done = _engine(engine, "image", "inspect", "--format", f'{{{{ index .Config.Labels "{HASH_LABEL}" }}}}', image)
    return done.stdout.strip() if done.returncode == 0 else None


def build(engine: str, image: str, context: Path, dockerfile: str, inputs_hash: str) -> bool:
    """Build ``image`` from ``dockerfile`` (text) over ``context`` unless an image with the same
    ``inputs_hash`` label exists. Returns whether it was built.

    Raises:
        RuntimeError: the build failed (its output in the message).
    """
    if label_of(engine, image) == inputs_hash:
        return False
    previous = image_id(engine, image)
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile") as handle:
        handle.write(f"{dockerfile}LABEL {HASH_LABEL}={inputs_hash}\n")
        handle.flush()
        extra = ["--pull=never"] if engine == "podman" else []
        done = _engine(engine, "build", "-q", *extra, "-t", image, "-f", handle.name, str(context),
                       timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} build {image} failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    if previous is not None and previous != image_id(engine, image):
        _engine(engine, "image", "rm", previous)  # untagged now; kept by the engine while a container uses it
    return True


def build_env_image(engine: str, tools: Path, tools_hash: str) -> str:
    """``ENV_IMAGE`` (base + pytest); returns the hash its task images build on.

    Raises:
        RuntimeError: the base image is missing (``swe-sandbox image build``) or the build failed.
    """
    base = image_id(engine, BASE_IMAGE)
    if base is None:
        raise RuntimeError(f"{engine} has no {BASE_IMAGE}: run `swe-sandbox image build --engine {engine}`")
    inputs = digest(base, tools_hash)
    build(engine, ENV_IMAGE, tools, f"FROM {BASE_IMAGE}\nCOPY . {PYTHON_SITE}/\n", inputs)
    return inputs


def build_task_image(engine: str, instance_id: str, repo: Path, env_hash: str, commit: str) -> bool:
    """``swe-sandbox-suite/<instance_id>``: the repository at ``/testbed``. Returns whether built."""
    dockerfile = f"FROM {ENV_IMAGE}\nCOPY . {TESTBED}/\nWORKDIR {TESTBED}\n"
    return build(engine, task_image(instance_id), repo, dockerfile, digest(env_hash, commit))
