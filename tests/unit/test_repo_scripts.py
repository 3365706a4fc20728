"""The README, .ci/run and scripts/setup.sh agree with each other and with the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swe_sandbox.cli.app import COMMANDS
from swe_sandbox.environments import environment_class

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = ROOT / ".ci" / "run"
SETUP = ROOT / "scripts" / "setup.sh"


def ci_test_command() -> str:
    match = re.search(r'^TEST_COMMAND="([^"]+)"$', CI_RUN.read_text(), re.M)
    assert match, ".ci/run must set TEST_COMMAND"
    return match.group(1)


def test_ci_runs_the_readme_test_command_exactly():
    command = ci_test_command()
    lines = [line.split("#")[0].strip() for line in README.splitlines()]
    assert command in lines, f"README must show the test command {command!r} on a line of its own"


@pytest.mark.parametrize("script", [CI_RUN, SETUP], ids=lambda p: p.name)
def test_scripts_are_executable_bash(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_readme_mentions_only_commands_that_exist():
    code = re.findall(r"```[a-z]*\n(.*?)```", README, re.S) + re.findall(r"`([^`\n]+)`", README)
    mentioned = set(re.findall(r"\bswe-sandbox ([a-z][a-z-]*)", "\n".join(code)))
    existing = set(COMMANDS)
    assert mentioned and mentioned <= existing, mentioned - existing


def test_readme_python_example_runs():
    reason = environment_class("bwrap").unavailable_reason()
    if reason is not None:
        if "CI" in os.environ:
            pytest.fail(f"backend 'bwrap' is unavailable in CI: {reason}", pytrace=False)
        pytest.skip(f"backend 'bwrap' is unavailable: {reason}")
    example = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 hi\n\nsubmitted: my answer\n\n"


def test_setup_sh_fast_path_when_everything_is_installed():
    """When this checkout is installed editable, setup.sh must succeed without installing anything."""
    import json
    from importlib import metadata

    url = json.loads(metadata.distribution("swe-sandbox").read_text("direct_url.json") or "{}")
    if url.get("url") != ROOT.as_uri():
        pytest.skip(f"swe-sandbox is not installed editable from {ROOT}")
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    assert "installing" not in done.stderr, done.stderr
