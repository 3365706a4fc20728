"""The suite's recipe (``examples/tasks/suite.yaml``): projects, and tasks as recorded bug edits.

A *project* names installed distributions whose source is copied (never committed here) and how
its tests run. A *task* is one bug: text edits of that source (each ``old`` must occur exactly
once), the problem statement the agent gets, the test files evaluation runs, and the recorded
solution (commands to look around; the fix itself is the edits reversed, or only the first one
when ``solution: partial``: a recording that is wrong on purpose).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SUITE_FILE = Path(__file__).resolve().parent.parent / "suite.yaml"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Project(Strict):
    """A real open-source project, copied from its installed distributions."""

    repo: str
    """Where it lives upstream (``owner/name``), for the record."""
    packages: dict[str, str]
    """``{import name: distribution name}``: each package's source goes to ``<layout>/<import name>``."""
    layout: Literal["flat", "src"] = "flat"
    """``flat``: packages at the repository root; ``src``: under ``src/``."""
    pytest_args: list[str] = Field(default_factory=lambda: ["-rA", "-p", "no:cacheprovider"])
    """Arguments before the test files (``python3 -m pytest ARGS FILES``)."""
    hide_tests: bool = True
    """Take the tests that catch the bug out of the workspace (and so out of the task's image);
    ``test_patch`` puts them back at evaluation."""
    doctests: bool = False
    """The tests are the doctests of the modules a task's ``tests`` names: the build takes them
    out of the pristine source into ``tests/test_doctests_<module>.py`` (``suitelib/doctests.py``),
    which evaluation runs; with ``hide_tests`` the whole file is hidden (``test_patch`` adds it),
    so the module's own docstrings grade nothing."""


class Edit(Strict):
    """One recorded text edit: ``old`` (exactly once in ``file``) becomes ``new``."""

    file: str
    old: str
    new: str


class TaskSpec(Strict):
    """One task: a bug injected into a project by ``edits``."""

    instance_id: str
    project: str
    problem_statement: str
    tests: list[str]
    """Test files evaluation runs (for a ``doctests`` project: the modules whose doctests become
    them); FAIL_TO_PASS and PASS_TO_PASS come from them."""
    edits: list[Edit]
    explore: list[str] = Field(default_factory=list)
    """Commands of the recorded solution's first turn (reading the code)."""
    solution: Literal["full", "partial"] = "full"


class Suite(Strict):
    projects: dict[str, Project]
    tasks: list[TaskSpec]


def load_suite(path: Path = SUITE_FILE) -> Suite:
    """The validated recipe.

    Raises:
        ValueError: a task names an unknown project, or two tasks share an id.
    """
    import yaml

    suite = Suite.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    ids = [t.instance_id for t in suite.tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate instance_id")
    unknown = sorted({t.project for t in suite.tasks} - set(suite.projects))
    if unknown:
        raise ValueError(f"{path}: unknown project(s) {unknown}")
    return suite


def digest(*parts: str | bytes) -> str:
    """First 16 hex digits of the SHA-256 of ``parts`` (each length-prefixed)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]
