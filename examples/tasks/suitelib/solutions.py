"""Recorded solutions: the agent run once per task with scripted turns; the replay model plays them.

The turns are what a model would do: read the code (the recipe's ``explore`` commands), fix it
(the bug's edits reversed: only the first one for ``solution: partial``, a recording that is
wrong on purpose), run the tests it can see (for a ``doctests`` project, the module's doctests:
the tests made of them are hidden), submit ``git diff``. They are recorded with the
real agent (``swe_sandbox.batch.rollout`` and the ``deterministic`` model) in the task's own
sandbox, so each trajectory holds real observations and replays with
``-c model.model_class=replay -c model.trajectory=solutions/{instance_id}.traj.json``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from suitelib.spec import Edit, Project, TaskSpec

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
MODEL_NAME = "recorded-solution"


def fix_command(edits: list[Edit]) -> str:
    """A ``python3`` heredoc undoing ``edits`` (exact text replacements)."""
    lines = ["python3 - <<'EOF'", "from pathlib import Path"]
    for edit in edits:
        lines += [f"path = Path({edit.file!r})", "text = path.read_text()",
                  f"assert text.count({edit.new!r}) == 1", f"path.write_text(text.replace({edit.new!r}, {edit.old!r}))"]
    return "\n".join(lines + ["EOF", "git diff"])


def turns(task: TaskSpec, project: Project) -> list[dict[str, Any]]:
    """The scripted assistant turns (``deterministic`` model outputs)."""
    from swe_sandbox.models.actions import tool_call

    fixed = task.edits if task.solution == "full" else task.edits[:1]
    doctests = ["--doctest-modules"] if project.doctests else []  # the module's doctests, which it can see
    check = shlex.join(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", *doctests, *task.tests])
    script = [("Let me read the code involved.", task.explore or ["git ls-files | head -n 30"]),
              ("I found the cause; fixing it.", [fix_command(fixed)]),
              ("Running the tests I can see.", [f"{check} 2>&1 | tail -n 5"]),
              ("The fix is in place; submitting the diff.", [SUBMIT])]
    return [{"content": text, "tool_calls": [tool_call(f"call_{n}_{i}", c) for i, c in enumerate(commands)]}
            for n, (text, commands) in enumerate(script, 1)]


def record(task: Any, spec: TaskSpec, project: Project, env: dict[str, Any], path: Path) -> str:
    """Run the scripted turns on ``task`` (a loaded ``swe_sandbox.batch.Task``) in ``env``;
    the trajectory goes to ``path``.

    Returns:
        str: the submission.

    Raises:
        RuntimeError: the run did not end with a submission.
    """
    from swe_sandbox.agent.config import load_run_config
    from swe_sandbox.batch import rollout

    config = load_run_config()
    config["model"] = {"model_class": "deterministic", "model_name": MODEL_NAME, "outputs": turns(spec, project)}
    result = rollout(task, config, env, evaluate=False, trajectory_path=path)
    if result.exit_status != "Submitted":
        raise RuntimeError(f"{task.instance_id}: recording ended with {result.exit_status}: {result.error[-500:]}")
    return result.submission
