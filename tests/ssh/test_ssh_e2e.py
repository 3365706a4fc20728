"""End to end over SSH: ``swe-sandbox run --env FILE`` (an ssh config for the loopback sshd) fixes
the demo bug in Jinja2 through the real litellm client and the scripted server. tests/e2e runs the
same task on the ssh and ssh-exec variants with ``--env ssh -c ...``; this one takes the config
from a YAML file, and checks that the temporary remote workspace is gone after the run.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from e2e import test_run_e2e as e2e
from ssh.sshd import server_or_skip

from swe_sandbox.agent import demo

from helpers.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.ssh


def test_run_fixes_a_real_project_over_ssh_with_a_config_file(tmp_path):
    runner = "python"
    repo = demo.make_repo(tmp_path / "jinja2")
    spec = server_or_skip().write_spec(tmp_path / "ssh.yaml", runner)
    out = tmp_path / "run.traj.json"
    with ScriptedOpenAIServer(e2e.script(), require_tools=True) as server:
        done = subprocess.run(
            [*e2e.swe_sandbox_argv(), "run", "--env", str(spec), "--workspace", str(repo), "--task-file",
             str(demo.TASK_FILE), "-o", str(out), "-m", "openai/scripted",
             "-c", f"model.model_kwargs.api_base={server.url}/v1", "-c", f"model.model_kwargs.api_key={e2e.API_KEY}",
             "-c", "model.cost_tracking=ignore_errors", "-c", "agent.step_limit=10"],
            capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r.status for r in server.log] == [200] * 5

    submission = (tmp_path / "run.submission.txt").read_text()
    verdict = demo.verify_submission(submission, tmp_path / "fresh")
    assert verdict.ok, verdict.output
    assert e2e.git_status(repo) == ""

    info = json.loads(out.read_text())["info"]
    assert info["exit_status"] == "Submitted" and info["submission"] == submission
    environment = info["config"]["environment"]
    assert (environment["backend"], environment["runner"], environment["host"]) == ("ssh", runner, "127.0.0.1")
    assert not os.path.exists(environment["cwd"]), "the temporary remote workspace outlived the run"
