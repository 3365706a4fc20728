"""The bundled task suite (``examples/tasks``) for the tests: built once per session (a no-op
when ``scripts/setup.sh`` already built it), with images for docker when docker runs here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS_DIR = ROOT / "examples" / "tasks"
BUILD = TASKS_DIR / "build"
#: The instance whose recorded solution is wrong on purpose (suite.yaml: ``solution: partial``).
SCRIPTED_FAILURE = "mpmath__mpmath-4"
#: One task per project: the subset the lean tests run.
SUBSET = ["tartley__colorama-3", "mpmath__mpmath-4", "networkx__networkx-1", "pallets__jinja-3"]


def replay_args(build: Path = BUILD) -> list[str]:
    """``-c`` options that replay each task's recorded solution."""
    return ["-c", "model.model_class=replay", "-c", f"model.trajectory={build}/solutions/{{instance_id}}.traj.json"]


def rows(name: str = "tasks.jsonl", build: Path = BUILD) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (build / name).read_text().splitlines()]


@pytest.fixture(scope="session")
def suite() -> Path:
    """The build directory, up to date (images for docker only if docker answers)."""
    from swe_sandbox.environments import environment_class

    sys.path.insert(0, str(TASKS_DIR))
    try:
        import build as builder
    finally:
        sys.path.remove(str(TASKS_DIR))
    docker = environment_class("docker").unavailable_reason() is None
    assert builder.main(["--engine", "docker"] if docker else ["--no-images"]) == 0
    return BUILD


def fix_any(instance_ids: list[str]) -> str:
    """One command that applies the recorded fix of whichever of ``instance_ids`` it runs in
    (each fix's buggy text is found in its own task's repository only), then submits: a scripted
    model's reply that fits every instance, whatever order the workers ask in."""
    sys.path.insert(0, str(TASKS_DIR))
    try:
        from suitelib.solutions import SUBMIT
        from suitelib.spec import load_suite
    finally:
        sys.path.remove(str(TASKS_DIR))
    fixes = [(e.file, e.new, e.old) for t in load_suite().tasks if t.instance_id in instance_ids
             for e in (t.edits if t.solution == "full" else t.edits[:1])]
    script = ("from pathlib import Path\n"
              f"for name, bug, fix in {fixes!r}:\n"
              "    path = Path(name)\n"
              "    if path.is_file() and path.read_text().count(bug) == 1:\n"
              "        path.write_text(path.read_text().replace(bug, fix))\n")
    return f"python3 - <<'EOF'\n{script}EOF\n{SUBMIT}"
