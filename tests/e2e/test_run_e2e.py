"""End to end: ``swe-sandbox run`` fixes a bug in a real project (Jinja2, copied at run time)
through the real litellm client talking to a strict scripted OpenAI-compatible server.

The scripted model answers like a real one would: one reply without a tool call (a format error
the agent must recover from), parallel tool calls, a multi-line heredoc edit, and a turn where the
submitting call is followed by another call. The server rejects any request a real provider
would reject, so the histories the agent sends are valid. The submitted diff must apply to a
fresh copy with ``git apply`` and make Jinja2's doctests pass; on every backend (and variant) of
the conformance suite, chosen on the command line as a user would: ``--env PRESET`` plus ``-c``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swe_sandbox.agent import demo

from helpers.openai_server import ScriptedOpenAIServer, call, text, tool_call, tool_calls
from helpers.variants import variant_cli_args, variant_spec

pytest.importorskip("litellm")

API_KEY = "sk-test-e2e-0123456789abcdef"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
FIX = """python3 - <<'EOF'
from pathlib import Path
path = Path("src/jinja2/meta.py")
source = path.read_text()
assert source.count("param in self.environment.globals") == 1
path.write_text(source.replace("param in self.environment.globals", "param not in self.environment.globals"))
EOF
git diff --stat"""


def script():
    return [
        text("Let me start by exploring the repository."),  # no tool call: a format error
        tool_calls(call("git log --oneline && ls"), call("python3 run_doctests.py 2>&1 | tail -n 20"),
                   content="Exploring, and reproducing the failure."),
        tool_call("grep -n 'environment.globals' src/jinja2/meta.py"),
        tool_call(FIX, content="A resolved name is undeclared when it is NOT a global. Fixing the condition."),
        tool_calls(call("python3 run_doctests.py"), call(SUBMIT), call("echo this must not run"),
                   content="Checking and submitting."),
    ]


def swe_sandbox_argv() -> list[str]:
    """The real command line: ``python -m swe_sandbox``."""
    return [sys.executable, "-m", "swe_sandbox"]


def test_run_fixes_a_real_project_through_litellm(backend, tmp_path):
    repo = demo.make_repo(tmp_path / "jinja2")
    assert not demo.run_check(repo).ok  # the injected bug is there
    out = tmp_path / "run.traj.json"
    with ScriptedOpenAIServer(script(), require_tools=True) as server:
        done = subprocess.run(
            [*swe_sandbox_argv(), "run", *variant_cli_args(backend), "--workspace", str(repo), "--task-file",
             str(demo.TASK_FILE), "-o", str(out), "-m", "openai/scripted",
             "-c", f"model.model_kwargs.api_base={server.url}/v1", "-c", f"model.model_kwargs.api_key={API_KEY}",
             "-c", "model.cost_tracking=ignore_errors", "-c", "agent.step_limit=10"],
            capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        statuses = [r.status for r in server.log]
        bodies = server.requests
    assert done.returncode == 0, done.stdout + done.stderr
    assert statuses == [200] * 5, [r for r in bodies]

    # the submission: a git diff that fixes a fresh copy
    submission = (tmp_path / "run.submission.txt").read_text()
    assert submission.startswith("diff --git a/src/jinja2/meta.py b/src/jinja2/meta.py")
    verdict = demo.verify_submission(submission, tmp_path / "fresh")
    assert verdict.ok, verdict.output
    assert git_status(repo) == ""  # the user's repository was not touched

    # what the model saw: the format error, then one tool message per call
    second = bodies[1]["messages"]
    assert second[-1]["role"] == "user" and "no tool call" in second[-1]["content"]
    assert all("extra" not in m for body in bodies for m in body["messages"])

    data = json.loads(out.read_text())
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    info = data["info"]
    assert info["exit_status"] == "Submitted" and info["submission"] == submission
    assert info["config"]["model_type"] == "swe_sandbox.models.litellm_model.LitellmModel"
    assert info["config"]["environment"]["backend"] == variant_spec(backend)[0]
    assert info["model_stats"]["api_calls"] == 5
    last_turn = [m for m in data["messages"] if m["role"] == "tool"][-3:]
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in last_turn[1]["content"]
    assert "this must not run" not in last_turn[2]["content"] and last_turn[2]["extra"]["returncode"] == -1
    assert API_KEY not in out.read_text()


def git_status(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                          check=True).stdout
