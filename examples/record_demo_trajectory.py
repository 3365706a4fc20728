"""Re-record the demo's bundled trajectory (``src/swe_sandbox/_demo/jinja2_meta.traj.json``).

The demo replays this recording. It was made by running the agent with the scripted turns below
(what a model would do: reproduce, read, fix, re-check, submit) on the demo repository, on the
bwrap backend (local if bwrap is unusable). Run it again after changing the default templates or
the demo task:

    python examples/record_demo_trajectory.py [--env local] [-o PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from swe_sandbox.agent import DefaultAgent, demo, load_run_config
from swe_sandbox.cli.prepare import environment_config
from swe_sandbox.models.actions import tool_call
from swe_sandbox.models.test_models import DeterministicModel
from swe_sandbox.workspace import build_environment

_TURNS = iter(range(1, 100))


def turn(content: str, *commands: str) -> dict:
    """A scripted assistant reply: ``content`` and one bash tool call per command."""
    n = next(_TURNS)
    return {"content": content, "tool_calls": [tool_call(f"call_demo_{n}_{i}", c) for i, c in enumerate(commands)]}


TURNS = [
    turn("I'll look at the repository and reproduce the failure by running the doctests.",
         "git log --oneline && git ls-files | head -n 40",
         "python3 run_doctests.py 2>&1 | tail -n 30"),
    turn("`find_undeclared_variables` returns an empty set. It runs a `TrackingCodeGenerator` that collects "
         "identifiers in `enter_frame`. Let me read that code.",
         "grep -n \"undeclared_identifiers\" -r src/jinja2",
         "sed -n '15,35p' src/jinja2/meta.py"),
    turn("`enter_frame` adds a resolved name only when it IS in `environment.globals`; it must add names "
         "that are NOT globals (globals are always defined). Fixing the condition:",
         "sed -i 's/param in self.environment.globals/param not in self.environment.globals/' src/jinja2/meta.py"
         " && git diff"),
    turn("Now the doctests should pass.",
         "python3 run_doctests.py"),
    turn("All doctests pass and the diff is the one-line fix. Submitting it.",
         "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="bwrap")
    parser.add_argument("-o", "--output", type=Path, default=demo.TRAJECTORY)
    args = parser.parse_args()
    config = load_run_config()
    with tempfile.TemporaryDirectory() as tmp:
        repo = demo.make_repo(Path(tmp) / "jinja2")
        env, scratch = build_environment(environment_config(args.env, config["environment"]), repo)
        model = DeterministicModel(outputs=TURNS, model_name="scripted-demo")
        with env:
            agent = DefaultAgent(model, env, **config["agent"])
            status, submission = agent.run(demo.task_text())
            data = agent.serialize()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    assert status == "Submitted", status
    verdict = demo.verify_submission(submission, Path(tempfile.mkdtemp()) / "verify")
    assert verdict.ok, verdict.output
    data["info"]["config"]["environment"].pop("cwd", None)  # a temporary path when recorded on local
    args.output.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(TURNS)} turns to {args.output}; submission:\n{submission}")


if __name__ == "__main__":
    main()
