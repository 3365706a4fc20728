"""One task's repository: the project's source with the bug, as one commit, plus its patches.

Steps (each a plain function): copy the pristine project (for a ``doctests`` project, write the
test files of its modules' doctests: ``doctests``); run the task's tests; apply the bug's edits;
run them again (FAIL_TO_PASS: passed, now fail; PASS_TO_PASS: passed both times); take the
FAIL_TO_PASS tests out (``hiding``; the doctests' test files whole); commit everything as the
repository's only commit (a fixed identity and date: the same bytes every build); then, from that
commit, ``test_patch`` (the tests put back) and the gold ``patch`` (the edits reversed), each as
``git diff``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from swe_sandbox.agent.demo import git

from suitelib import doctests, hiding
from suitelib.spec import Edit, Project, TaskSpec
from suitelib.testruns import run_tests, split_tests


@dataclass
class BuiltTask:
    """What a task row needs from its repository."""

    tests: list[str]
    """The test files evaluation runs."""
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    test_patch: str
    patch: str
    commit: str
    hidden: int


def apply_edits(repo: Path, edits: list[Edit], *, reverse: bool = False) -> None:
    """Apply the edits (or undo them) as exact text replacements.

    Raises:
        RuntimeError: a text to replace does not occur exactly once (the installed version
            differs from the one the recipe was written for).
    """
    for edit in edits:
        path = repo / edit.file
        old, new = (edit.new, edit.old) if reverse else (edit.old, edit.new)
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise RuntimeError(f"{edit.file}: {old!r} occurs {text.count(old)} times, not once")
        path.write_text(text.replace(old, new), encoding="utf-8")


def _commit(repo: Path, message: str) -> str:
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", message)):
        done = git(repo, *args)
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} in {repo}: {done.stderr.strip()}")
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def _diff_of(repo: Path, change) -> str:
    """``git diff`` after ``change(repo)`` (new files included); the tree is reset afterwards."""
    change(repo)
    git(repo, "add", "-A", "--intent-to-add")
    diff = git(repo, "diff").stdout
    for args in (("reset", "-q"), ("checkout", "-q", "--", "."), ("clean", "-fdq")):
        git(repo, *args)
    return diff


def _write(repo: Path, files: dict[str, str]) -> None:
    for file, text in files.items():
        (repo / file).parent.mkdir(parents=True, exist_ok=True)
        (repo / file).write_text(text, encoding="utf-8")


def build_repo(task: TaskSpec, project: Project, pristine: Path, dest: Path, tools: Path, message: str) -> BuiltTask:
    """Make ``dest`` (must not exist) the task's repository from the ``pristine`` project copy.

    Raises:
        RuntimeError: the bug breaks no test, or an edit does not apply.
    """
    shutil.copytree(pristine, dest)
    generated = doctests.write_tests(dest, project, task.tests, tools) if project.doctests else {}
    tests = sorted(generated) if project.doctests else task.tests
    before = run_tests(dest, tools, project.pytest_args, tests)
    apply_edits(dest, task.edits)
    fail_to_pass, pass_to_pass = split_tests(before, run_tests(dest, tools, project.pytest_args, tests))
    if not fail_to_pass:
        raise RuntimeError(f"{task.instance_id}: the bug breaks none of {task.tests}")
    hidden = 0
    if project.doctests:  # the test files are the build's, not the project's: hidden whole
        full = generated
        if project.hide_tests:
            hidden = sum(t.count("\ndef test_") for t in generated.values())
            for file in generated:
                (dest / file).unlink()
                if not any((dest / file).parent.iterdir()):
                    (dest / file).parent.rmdir()  # tests/: test_patch makes it
    else:
        full = {f: (dest / f).read_text(encoding="utf-8") for f in hiding.targets(fail_to_pass)}
        hidden = hiding.hide(dest, fail_to_pass) if project.hide_tests else 0
    commit = _commit(dest, message)
    test_patch = _diff_of(dest, lambda r: _write(r, full)) if hidden else ""
    patch = _diff_of(dest, lambda r: apply_edits(r, task.edits, reverse=True))
    return BuiltTask(tests, fail_to_pass, pass_to_pass, test_patch, patch, commit, hidden)
