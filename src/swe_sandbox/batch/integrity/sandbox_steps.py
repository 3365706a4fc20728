"""The grading policy's steps inside the evaluation sandbox (commands run in the repository).

Each step is one command through ``Environment.execute``; what a step reads back (a file list,
a digest, a config file's text) is decided on the host. The patch has not run yet when these
steps run (it is only text applied by ``git apply`` / ``patch``), so their output is trusted.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from swe_sandbox.batch.integrity import patch_policy, protected
from swe_sandbox.errors import EvaluationStepFailed

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.environments.base import Environment

#: Where the evaluation keeps its files inside the sandbox (the patches, the grader's plugin).
PATCH_DIR = "/tmp/swe-sandbox-eval"
#: Seconds each step may take (the tests' own timeout is the task's).
STEP_TIMEOUT_S = 300.0
#: What of ``.git`` decides what git runs (filters, hooks, attributes, aliases): hashed before
#: and after the patch is applied, which must not change it.
GIT_CONTROL = ".git/config .git/info .git/hooks .git/commondir .git/gitdir"
GIT_DIGEST = (f"for f in $(find {GIT_CONTROL} -type f 2>/dev/null | sort); do sha256sum \"$f\"; done "
              "| sha256sum")
#: Every path of the working tree that differs from HEAD (untracked ones included), NUL-separated.
CHANGED = "git status --porcelain=v1 -z --untracked-files=all --no-renames"
#: Leftovers of ``git apply --reject`` and ``patch`` next to the files they patched.
APPLY_LEFTOVERS = (".rej", ".orig")


def execute(environment: Environment, command: str, timeout: float) -> dict[str, Any]:
    """``execute``, where output that starts with the submission sentinel is just output."""
    from swe_sandbox.errors import Submitted

    try:
        return environment.execute({"command": command}, timeout=timeout)
    except Submitted as exc:
        return exc.result


def sh(environment: Environment, command: str, *, check: bool = False) -> dict[str, Any]:
    """One step (``STEP_TIMEOUT_S``).

    Raises:
        EvaluationStepFailed: ``check`` and the step exited non-zero.
    """
    result = execute(environment, command, STEP_TIMEOUT_S)
    if check and result["returncode"] != 0:
        raise EvaluationStepFailed(f"an evaluation step failed ({result['returncode']}): "
                                   f"{result['output'][-300:].strip()}")
    return result


def write_file(name: str, text: str, then: str = "", directory: str = PATCH_DIR) -> str:
    """A command writing ``text`` to ``directory/name`` exactly (base64 in a heredoc: any bytes,
    and a base64 line can never be the terminator), then running ``then`` if that worked."""
    encoded = base64.encodebytes(text.encode("utf-8", "surrogateescape")).decode("ascii")
    after = f" && {then}" if then else ""
    return f"mkdir -p {directory} && base64 -d > {directory}/{name} <<'EOF'{after}\n{encoded}EOF"


def through_symlinks(environment: Environment, paths: Sequence[str]) -> list[str]:
    """Refusals for each of ``paths`` that is, or goes through, a symlink of the working tree."""
    if not paths:
        return []
    found = patch_policy.parse_symlink_probe(sh(environment, patch_policy.symlink_probe(paths))["output"], paths)
    return [f"{path}: goes through a symlink of the repository" for path in found]


class TreeState(NamedTuple):
    """What the working tree and ``.git`` look like before the patch is applied."""

    git_digest: str
    """A digest of ``GIT_CONTROL``."""
    changed: frozenset[str]
    """Paths that already differ from HEAD (``CHANGED``: e.g. what ``setup_command`` made)."""


def tree_state(environment: Environment) -> TreeState:
    return TreeState(str(sh(environment, GIT_DIGEST)["output"]).strip(), frozenset(changed_paths(environment)))


def stray_changes(environment: Environment, named: Sequence[str], before: TreeState) -> list[str]:
    """Refusals for what the applied patch changed beyond the paths it names (a ``patch`` that
    read other names than the parser did), and for a changed ``.git``."""
    after = tree_state(environment)
    refused = [] if after.git_digest == before.git_digest else [".git: changed by the patch"]
    allowed = set(named) | before.changed
    for path in sorted(after.changed - allowed):
        if not path.endswith(APPLY_LEFTOVERS):
            refused.append(f"{path}: changed although the patch does not name it")
    return refused


def changed_paths(environment: Environment) -> list[str]:
    """The paths ``CHANGED`` lists."""
    output = str(sh(environment, CHANGED)["output"])
    return [entry[3:] for entry in output.split("\0") if len(entry) > 3]


def reset_protected(environment: Environment, paths: Sequence[str], reasons: dict[str, str]) -> list[dict[str, str]]:
    """Put each of ``paths`` back as it is at HEAD (removed if HEAD has no such file).

    Returns:
        list[dict]: ``{"path", "why"}`` of each path reset (``reasons[path]`` says why).
    """
    if not paths:
        return []
    quoted = " ".join(shlex.quote(p) for p in paths)
    script = (f"for p in {quoted}; do if git cat-file -e \"HEAD:$p\" 2>/dev/null; then "
              "rm -rf -- \"$p\"; git checkout HEAD -- \"$p\"; else rm -rf -- \"$p\"; fi; done")
    sh(environment, script, check=True)
    return [{"path": p, "why": reasons.get(p, "protected")} for p in paths]


def absent_at_head(environment: Environment, paths: Sequence[str]) -> list[str]:
    """Which of ``paths`` the base commit (HEAD) does not have."""
    if not paths:
        return []
    quoted = " ".join(shlex.quote(p) for p in paths)
    output = sh(environment, f"for p in {quoted}; do git cat-file -e \"HEAD:$p\" 2>/dev/null || "
                             "printf '%s\\n' \"$p\"; done; true")["output"]
    return [p for p in output.splitlines() if p in set(paths)]


def config_changes(environment: Environment, paths: Sequence[str]) -> list[str]:
    """Which of ``paths`` (test-runner configuration files the patch touches) have test-runner
    sections that differ from HEAD's (``protected.runner_config_changed``)."""
    changed = []
    for path in paths:
        quoted = shlex.quote(path)
        before = sh(environment, f"git show HEAD:{quoted}")
        after = sh(environment, f"cat -- {quoted}")
        old = before["output"] if before["returncode"] == 0 else None
        new = after["output"] if after["returncode"] == 0 else None
        if protected.runner_config_changed(path, old, new):
            changed.append(path)
    return changed


def checkout_base(environment: Environment, paths: Sequence[str]) -> None:
    """SWE-bench's step before ``test_patch``: the files it modifies put back as at HEAD
    (``git checkout <base> <files>`` in its eval script; files HEAD lacks are left alone)."""
    if paths:
        quoted = " ".join(shlex.quote(p) for p in paths)
        sh(environment, f"for p in {quoted}; do git cat-file -e \"HEAD:$p\" 2>/dev/null && "
                        "git checkout HEAD -- \"$p\"; done; true")
