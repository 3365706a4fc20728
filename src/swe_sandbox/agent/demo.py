"""The demo task: fix a bug injected into a real open-source project, Jinja2.

Jinja2 (BSD-3-Clause; the agent's templates need it, so it is installed wherever the agent runs)
is not part of this repository: at run time the *source* of the installed Jinja2 and of its one
dependency MarkupSafe (``.py`` files only: MarkupSafe then uses its pure-Python escaper) is
copied into a fresh git repository with their licenses. A bug is injected by one deterministic
text edit in ``src/jinja2/meta.py`` and committed. The project's own check is Jinja2's doctests
(``python3 run_doctests.py``; stdlib only, offline), which fail with the bug and pass once it is
fixed. The bundled trajectory (``swe_sandbox/_demo/jinja2_meta.traj.json``) is a recorded run
that finds and fixes the bug and submits ``git diff``; ``verify_submission`` checks such a
submission: it applies to a fresh buggy copy with ``git apply`` and the doctests pass.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import cast

from swe_sandbox.errors import ConfigError

DEMO_DATA = Path(__file__).resolve().parent.parent / "_demo"
#: The recorded run that the ``demo`` command replays.
TRAJECTORY = DEMO_DATA / "jinja2_meta.traj.json"
#: The task given to the agent.
TASK_FILE = DEMO_DATA / "task.md"

#: (import name, distribution name): the project, then its dependency.
PACKAGES = (("jinja2", "Jinja2"), ("markupsafe", "MarkupSafe"))
BUG_FILE = "src/jinja2/meta.py"
#: The injected bug: find_undeclared_variables keeps only names that ARE globals.
BUG_FROM = 'param not in self.environment.globals'
BUG_TO = 'param in self.environment.globals'
CHECK_COMMAND = "python3 run_doctests.py"
#: Copied from the installed packages: source, not compiled extensions or caches.
SOURCE_SUFFIXES = (".py", ".pyi", ".typed")

RUN_DOCTESTS = '''\
"""Run Jinja2's doctests against the source in src/ (stdlib only, offline).

Exit status 0 when every doctest passes, 1 otherwise.
"""
import doctest
import importlib
import os
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src")
sys.path.insert(0, SRC)
sys.dont_write_bytecode = True
MODULES = ["jinja2.meta", "jinja2.runtime", "jinja2.environment", "jinja2.ext", "jinja2.loaders", "jinja2.sandbox"]

failed = attempted = 0
for name in MODULES:
    module = importlib.import_module(name)
    assert os.path.abspath(module.__file__).startswith(SRC + os.sep), module.__file__
    result = doctest.testmod(module)
    failed += result.failed
    attempted += result.attempted
print("jinja2 doctests: %d examples, %d failures" % (attempted, failed))
sys.exit(1 if failed or not attempted else 0)
'''

README = """\
# Jinja2 (demo copy)

The source of Jinja2 {jinja2} (https://github.com/pallets/jinja, BSD-3-Clause) and of its
dependency MarkupSafe {markupsafe} (https://github.com/pallets/markupsafe, BSD-3-Clause), copied
by `swe-sandbox demo` from the installed packages (pure-Python files only). Their licenses are in
`src/jinja2/` and `src/markupsafe/`.

Check: `{check}` runs Jinja2's doctests.
"""

#: A fixed identity and dates: the demo repository is the same on every run.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "swe-sandbox demo", "GIT_AUTHOR_EMAIL": "demo@swe-sandbox.invalid",
    "GIT_COMMITTER_NAME": "swe-sandbox demo", "GIT_COMMITTER_EMAIL": "demo@swe-sandbox.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
}


@dataclass
class CheckResult:
    """Outcome of the project's check (or of applying a submission)."""

    ok: bool
    output: str


def git(repo: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``git -C repo ARGS`` with a fixed identity; output captured as text."""
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-C", str(repo),
                           *args], input=input, capture_output=True, text=True, env=env, check=False)


def _git_ok(repo: Path, *args: str) -> None:
    done = git(repo, *args)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")


def package_dir(name: str) -> Path:
    """The directory of the installed package ``name``.

    Raises:
        ConfigError: the package is not installed (Jinja2 and MarkupSafe come with
            ``pip install 'swe-sandbox[agent]'``).
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the demo needs {name} installed (pip install 'swe-sandbox[agent]')")
    return Path(list(spec.submodule_search_locations)[0])


def package_version(distribution: str = "Jinja2") -> str:
    """The installed version of ``distribution`` (``"unknown"`` without metadata)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def copy_license(distribution: str, dest: Path) -> None:
    """Copy the distribution's license file(s) into ``dest`` (the license travels with the code)."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return
    for file in dist.files or ():
        if "LICENSE" in file.name.upper():
            shutil.copyfile(cast("os.PathLike[str]", dist.locate_file(file)), dest / file.name)


def copy_source(name: str, dest: Path) -> None:
    """Copy package ``name``'s source files (no compiled extension, no caches) to ``dest``."""
    src = package_dir(name)
    for path in sorted(src.rglob("*")):
        if path.is_file() and path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def inject_bug(repo: Path) -> None:
    """Apply the bug: one deterministic text edit in ``BUG_FILE``.

    Raises:
        RuntimeError: this Jinja2 version does not contain the line the bug edits.
    """
    path = repo / BUG_FILE
    text = path.read_text(encoding="utf-8")
    if text.count(BUG_FROM) != 1:
        raise RuntimeError(f"{BUG_FILE} of Jinja2 {package_version()} does not contain {BUG_FROM!r} once; "
                           "the demo cannot inject its bug")
    path.write_text(text.replace(BUG_FROM, BUG_TO), encoding="utf-8")


def make_repo(dest: str | os.PathLike, *, buggy: bool = True) -> Path:
    """Create the demo repository at ``dest`` (must not exist or be empty).

    Commit 1 is the pristine copy; with ``buggy``, commit 2 injects the bug.

    Returns:
        Path: the repository.

    Raises:
        ConfigError: Jinja2 or MarkupSafe is not installed.
        RuntimeError: git failed, or the bug cannot be injected into this Jinja2 version.
    """
    repo = Path(dest)
    for name, distribution in PACKAGES:
        (repo / "src" / name).mkdir(parents=True, exist_ok=True)
        copy_source(name, repo / "src" / name)
        copy_license(distribution, repo / "src" / name)
    versions = {name: package_version(distribution) for name, distribution in PACKAGES}
    (repo / "README.md").write_text(README.format(check=CHECK_COMMAND, **versions), encoding="utf-8")
    (repo / "run_doctests.py").write_text(RUN_DOCTESTS, encoding="utf-8")
    (repo / ".gitignore").write_text("__pycache__/\n*.py[cod]\n", encoding="utf-8")
    _git_ok(repo, "init", "-q")
    _git_ok(repo, "add", "-A")
    _git_ok(repo, "commit", "-q", "-m", f"Jinja2 {versions['jinja2']} with MarkupSafe {versions['markupsafe']}")
    if buggy:
        inject_bug(repo)
        _git_ok(repo, "commit", "-q", "-am", "meta: simplify identifier tracking")
    return repo


def run_check(repo: Path, python: str | None = None, timeout: float = 120) -> CheckResult:
    """Run the project's check (its doctests) in ``repo`` on the host."""
    argv = [python or sys.executable, "-I", "run_doctests.py"]
    try:
        done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return CheckResult(False, f"the check timed out after {timeout} s")
    return CheckResult(done.returncode == 0, done.stdout + done.stderr)


def verify_submission(submission: str, workdir: str | os.PathLike) -> CheckResult:
    """Check a submitted diff: it applies to a fresh buggy copy and the doctests then pass.

    Args:
        submission: the text after the submission sentinel (a ``git diff``).
        workdir: an empty or missing directory for the fresh copy.
    """
    if not submission.strip():
        return CheckResult(False, "the submission is empty")
    repo = make_repo(Path(workdir))
    before = run_check(repo)
    applied = git(repo, "apply", "--whitespace=nowarn", "-", input=submission)
    if applied.returncode != 0:
        return CheckResult(False, f"git apply failed: {applied.stderr.strip()}")
    check = run_check(repo)
    report = (f"fresh copy before the patch: {CHECK_COMMAND} {'passed (?)' if before.ok else 'failed, as expected'}\n"
              f"git apply: ok\n"
              f"after the patch: {CHECK_COMMAND} {'passed' if check.ok else 'FAILED'}\n{check.output}")
    return CheckResult(check.ok and not before.ok, report)


def task_text() -> str:
    """The task the demo gives the agent."""
    return TASK_FILE.read_text(encoding="utf-8").strip()
