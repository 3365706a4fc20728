"""A third-party backend registered through the ``swe_sandbox.environments`` entry point is usable
by its name everywhere a preset is (``exec --env NAME``, ``get_environment(NAME)``), and one whose
entry point does not load is a one-line config error, not a traceback (hostile review)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import swe_sandbox

ENTRY_POINTS = """[swe_sandbox.environments]
plugged = swe_sandbox.environments.local:LocalEnvironment
unloadable = swe_sandbox.environments.local:NoSuchEnvironment
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A PYTHONPATH entry holding a distribution that registers two backends."""
    dist = tmp_path / "site" / "plugged_backends-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugged-backends\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return dist.parent


def exec_cli(site: Path, *args: str) -> subprocess.CompletedProcess:
    src = Path(swe_sandbox.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src)])}
    return subprocess.run([sys.executable, "-m", "swe_sandbox", "exec", *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.local
def test_a_registered_backend_is_an_environment_name(site):
    done = exec_cli(site, "--env", "plugged", "--", "echo", "hi")
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr


def test_a_backend_whose_entry_point_does_not_load_is_a_config_error(site):
    done = exec_cli(site, "--env", "unloadable", "--", "true")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "'unloadable'" in done.stderr and "NoSuchEnvironment" in done.stderr


def test_an_unknown_name_lists_the_registered_backends(site):
    done = exec_cli(site, "--env", "nowhere", "--", "true")
    assert done.returncode == 2 and "registered backends are ['plugged', 'unloadable']" in done.stderr, done.stderr
