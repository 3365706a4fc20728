"""The ``run`` and ``demo`` commands, through typer's CliRunner on an app that registers them
the way ``swe_sandbox.cli`` does, and through a real process for Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from swe_sandbox.cli import display
from swe_sandbox.cli.run import DEMO_HELP, RUN_HELP, demo, run

from helpers.variants import variant_cli_args, variant_spec

SUBMIT_DIFF = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"

app = typer.Typer(add_completion=False, rich_markup_mode=None)
app.command("run", help=RUN_HELP)(run)
app.command("demo", help=DEMO_HELP)(demo)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def scripted(*outputs) -> list[str]:
    """``-c`` options that make ``run`` use DeterministicModel with these replies."""
    return ["-c", "model.model_class=deterministic", "-c", f"model.outputs={json.dumps(list(outputs))}"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A small git repository on the host: the user's workspace."""
    path = tmp_path / "repo"
    path.mkdir()
    (path / "hello.txt").write_text("hello\n")
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return path


# -- demo --------------------------------------------------------------------------------------
def test_demo_replays_and_verifies_the_fix():
    result = invoke("demo")
    assert result.exit_code == 0, result.output
    assert "exit status: Submitted" in result.output
    assert "-            if action == \"resolve\" and param in self.environment.globals:" in result.output
    assert "git apply: ok" in result.output
    assert "verified" in result.output and "NOT verified" not in result.output


def test_demo_on_the_local_backend(tmp_path):
    out = tmp_path / "demo.traj.json"
    result = invoke("demo", "--env", "local", "-o", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["info"]["exit_status"] == "Submitted"
    assert data["info"]["config"]["model_type"] == "swe_sandbox.models.replay.ReplayModel"
    assert data["info"]["config"]["environment_type"] == "swe_sandbox.environments.local.LocalEnvironment"


def test_the_bundled_trajectory_fixes_a_fresh_copy(tmp_path):
    from swe_sandbox.agent import demo as demo_task

    submission = json.loads(demo_task.TRAJECTORY.read_text())["info"]["submission"]
    verdict = demo_task.verify_submission(submission, tmp_path / "v")
    assert verdict.ok, verdict.output
    assert not demo_task.verify_submission("", tmp_path / "w").ok


# -- run -----------------------------------------------------------------------------------------
def test_run_copies_the_workspace_and_submits_a_diff(backend, repo, tmp_path):
    out = tmp_path / "runs" / "x.traj.json"
    result = invoke("run", *variant_cli_args(backend), "-w", str(repo), "-t", "say hi in French", "-o", str(out),
                    *scripted("sed -i s/hello/bonjour/ hello.txt", SUBMIT_DIFF))
    assert result.exit_code == 0, result.output
    submission = (tmp_path / "runs" / "x.submission.txt").read_text()
    assert "-hello\n+bonjour\n" in submission
    assert "exit status: Submitted" in result.output and "+bonjour" in result.output
    assert (repo / "hello.txt").read_text() == "hello\n" and git(repo, "status", "--porcelain") == ""
    data = json.loads(out.read_text())
    assert data["info"]["submission"] == submission
    assert data["info"]["config"]["environment"]["backend"] == variant_spec(backend)[0]


def test_run_with_a_task_file_and_a_config_file(backend, tmp_path):
    task = tmp_path / "task.md"
    task.write_text("Print the answer.\n")
    config = tmp_path / "run.yaml"
    config.write_text("agent:\n  step_limit: 5\nenvironment:\n  timeout: 7\n")
    out = tmp_path / "t.json"
    result = invoke("run", *variant_cli_args(backend), "--task-file", str(task), "--config", str(config), "-o", str(out),
                    *scripted("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo 42"))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["info"]["submission"] == "42\n"
    assert data["info"]["config"]["agent"]["step_limit"] == 5
    assert data["info"]["config"]["environment"]["timeout"] == 7
    assert "Print the answer." in data["messages"][1]["content"]


def test_run_defaults_to_bwrap(tmp_path):
    from helpers.variants import require_backend

    require_backend("bwrap")
    out = tmp_path / "t.json"
    result = invoke("run", "-t", "x", "-o", str(out), *scripted("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"))
    assert result.exit_code == 0, result.output
    env_type = json.loads(out.read_text())["info"]["config"]["environment_type"]
    assert env_type == "swe_sandbox.environments.bwrap.BwrapEnvironment"


def test_run_without_a_submission_exits_1(tmp_path):
    out = tmp_path / "t.json"
    result = invoke("run", "--env", "local", "-t", "x", "-o", str(out), "-c", "agent.step_limit=2",
                    *scripted("echo 1", "echo 2", "echo 3"))
    assert result.exit_code == 1, result.output
    assert "exit status: LimitsExceeded" in result.output
    assert "Step limit reached" in result.output
    assert not (tmp_path / "t.submission.txt").exists()


@pytest.mark.parametrize("args, message", [
    (["-t", "x"], "model.model_name: missing; pass -m/--model"),
    (["-t", "x", "-m", "m", "-c", "agent.step_limt=3"], "agent.step_limt: unknown field"),
    (["-t", "x", "-m", "m", "-c", "agnet.step_limit=3"], "must start with one of agent., model., environment."),
    (["-t", "x", "-m", "m", "--env", "nope"], "unknown environment 'nope'"),
    (["-t", "x", "-m", "m", "-c", "environment.timeout=-1"], "environment.timeout"),
    (["-t", "x", "-c", "model.model_class=deterministic", "-c", "model.outputz=[]"], "model.outputz: unknown field"),
    (["-t", "x", "-m", "m", "-w", "/no/such/dir"], "--workspace: /no/such/dir is not a directory"),
])
def test_run_config_errors_exit_2_and_name_the_field(args, message):
    result = invoke("run", "--env", "local", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize("args, message", [
    ([], "exactly one of -t/--task and --task-file"),
    (["-t", "x", "--task-file", "f"], "exactly one of -t/--task and --task-file"),
    (["-t", "  "], "the task is empty"),
    (["-t", "x", "-m", "m", "--confirm"], "needs an interactive terminal"),
])
def test_run_usage_errors(args, message):
    result = invoke("run", *args)  # CliRunner's stdin is not a TTY
    assert result.exit_code == 2
    assert message in result.output


def test_run_when_the_backend_is_unavailable_exits_3(monkeypatch):
    from swe_sandbox.environments.bwrap import BwrapEnvironment

    monkeypatch.setattr(BwrapEnvironment, "unavailable_reason", classmethod(lambda cls, *a: "no namespaces here"))
    result = invoke("run", "--env", "bwrap", "-t", "x", *scripted("echo hi"))
    assert result.exit_code == 3
    assert "no namespaces here" in result.output and "--env local" in result.output


# -- confirm -------------------------------------------------------------------------------------
def test_confirm_mode_rejects_edits_and_stops_asking(monkeypatch, tmp_path):
    from rich.console import Console

    import swe_sandbox
    from swe_sandbox.agent import load_run_config
    from swe_sandbox.models.test_models import DeterministicModel

    answers = iter([("reject", "not now"), ("edit", "echo edited"), ("all", "")])
    asked: list[str] = []

    def fake_ask(console, command):
        asked.append(command)
        return next(answers)

    monkeypatch.setattr(display, "ask_approval", fake_ask)
    model = DeterministicModel(outputs=[["echo one", "echo two"], "echo three",
                                        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo end"])
    console = Console(file=io.StringIO(), width=100)
    with swe_sandbox.get_environment("local", cwd=str(tmp_path)) as env:
        agent = display.make_cli_agent(model, env, console, confirm=True, **load_run_config()["agent"])
        assert agent.run("t") == ("Submitted", "end\n")
    assert asked == ["echo one", "echo two", "echo three"]
    tools = [m for m in agent.messages if m["role"] == "tool"]
    assert "rejected this command: not now" in tools[0]["content"]
    assert "It ran as:\necho edited\n]\nedited\n</output>" in tools[1]["content"]
    assert "<output>\nthree\n</output>" in tools[2]["content"]
    shown = console.file.getvalue()
    assert "$ echo one" in shown and "rejected" in shown and "returncode 0" in shown


# -- Ctrl-C ------------------------------------------------------------------------------------
def test_ctrl_c_saves_the_trajectory_and_removes_the_sandbox(backend, tmp_path):
    from swe_sandbox.testing.kit import unique_marker, wait_host_gone

    from helpers.cli_process import start_cli_until_running

    marker = unique_marker()
    out = tmp_path / "t.json"
    argv = [sys.executable, "-m", "swe_sandbox", "run", *variant_cli_args(backend), "-t", "x", "-o", str(out),
            *scripted("echo started", f"sleep {marker}")]
    proc = start_cli_until_running(argv, marker)
    try:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted; trajectory saved to" in stderr
    data = json.loads(out.read_text())
    assert data["info"]["exit_status"] == "KeyboardInterrupt"
    assert [m["role"] for m in data["messages"]][-3:] == ["assistant", "tool", "exit"]
    assert [p for p in wait_host_gone(marker, grace=5) if "-m swe_sandbox run" not in p] == []


# -- a lone surrogate in the model's tool-call arguments ------------------------------------------
@pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning")  # litellm's import
def test_a_lone_surrogate_from_the_model_does_not_crash_the_run(tmp_path):
    from helpers.openai_server import ScriptedOpenAIServer, tool_call

    out = tmp_path / "t.json"
    replies = [tool_call(arguments='{"command": "echo \\ud800 hi"}'),  # JSON escape of a lone surrogate
               tool_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo done")]
    with ScriptedOpenAIServer(replies) as server:
        result = CliRunner().invoke(app, ["run", "--env", "local", "-m", "openai/scripted", "-t", "x", "-o", str(out),
                                          "-c", f"model.model_kwargs.api_base={server.url}/v1",
                                          "-c", "model.model_kwargs.api_key=sk-test-0123456789",
                                          "-c", "model.cost_tracking=ignore_errors"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_bytes().decode("utf-8"))
    assert data["info"]["exit_status"] == "Submitted"
    assert data["messages"][2]["extra"]["actions"][0]["command"] == "echo \ud800 hi"


# -- secrets in what the command line shows and saves --------------------------------------------
SECRET = "ghp_cliSecretValue0123456789"


def test_progress_and_submission_mask_secrets_like_the_trajectory(monkeypatch, tmp_path):
    monkeypatch.setenv("SWE_SANDBOX_CLI_TEST_TOKEN", SECRET)
    out = tmp_path / "t.json"
    result = invoke("run", "--env", "local", "-t", "x", "-o", str(out),
                    *scripted(f"echo {SECRET} > /dev/null",
                              f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo token={SECRET}"))
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output  # progress on stderr, summary on stdout
    assert "$ echo *** > /dev/null" in result.output and "token=***" in result.output
    submission = (tmp_path / "t.submission.txt").read_text()
    assert submission == "token=***\n" == json.loads(out.read_text())["info"]["submission"]


@pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning")  # litellm's import
def test_credentials_in_api_base_are_masked_in_the_trajectory_and_errors(tmp_path):
    out = tmp_path / "t.json"
    result = invoke("run", "--env", "local", "-t", "x", "-o", str(out), "-m", "openai/m",
                    "-c", "model.model_kwargs.api_base=http://user:pw-SECRET-123456@127.0.0.1:9/v1",
                    "-c", "model.model_kwargs.api_key=sk-test-0123456789", "-c", "model.retry.max_attempts=1")
    assert result.exit_code == 1, result.output  # connection refused: a ModelError
    text = out.read_text()
    assert "pw-SECRET-123456" not in text + result.output
    assert "http://user:***@127.0.0.1:9/v1" in text


# -- special files in the workspace -------------------------------------------------------------
def test_special_files_in_the_workspace_are_skipped_with_a_warning(backend, repo, tmp_path):
    import socket

    os.mkfifo(repo / "fifo")
    (repo / "sub").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(repo / "sub" / "s"))
        (repo / "sub" / "kept.txt").write_text("kept\n")
        out = tmp_path / "t.json"
        result = invoke("run", *variant_cli_args(backend), "-w", str(repo), "-t", "x", "-o", str(out),
                        *scripted("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && find . -path ./.git -prune -o -print "
                                  "| sort && git status --porcelain"))
    finally:
        sock.close()
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "warning: --workspace: skipped 2 special file(s)" in result.output
    assert "fifo" in result.output and "sub/s" in result.output
    submission = (tmp_path / "t.submission.txt").read_text()
    assert submission.split() == [".", "./hello.txt", "./sub", "./sub/kept.txt", "??", "sub/"]  # .git copied too
    assert (repo / "fifo").exists() and (repo / "sub" / "s").exists()  # the user's directory is untouched


# -- -o validated before anything runs ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["directory", "under a file"])
def test_an_unusable_output_path_exits_2_before_any_step(tmp_path, kind):
    if kind == "directory":
        out, expected = tmp_path, "is a directory"
    else:
        (tmp_path / "file").write_text("")
        out, expected = tmp_path / "file" / "t.json", "cannot create the directory"
    result = invoke("run", "--env", "local", "-t", "x", "-o", str(out), *scripted("echo should-not-run"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("swe-sandbox: config error: --output:"), result.output
    assert expected in lines[0] and "step 1" not in result.output


# -- demo validates --env first -----------------------------------------------------------------
def test_demo_with_an_unknown_env_says_only_that():
    result = invoke("demo", "--env", "nope")
    assert result.exit_code == 2, result.output
    assert "Replaying" not in result.output and "unknown environment 'nope'" in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1, result.output


# -- SIGTERM / SIGHUP ---------------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_termination_signals_save_the_trajectory_and_remove_the_sandbox(backend, tmp_path, signum):
    from swe_sandbox.testing.kit import unique_marker, wait_host_gone

    from helpers.cli_process import start_cli_until_running

    marker = unique_marker()
    out = tmp_path / "t.json"
    argv = [sys.executable, "-m", "swe_sandbox", "run", *variant_cli_args(backend), "-t", "x", "-o", str(out),
            *scripted("echo started", f"sleep {marker}")]
    proc = start_cli_until_running(argv, marker)
    try:
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, (stdout, stderr)
    assert f"terminated by {name}; trajectory saved to" in stderr and "Traceback" not in stderr
    data = json.loads(out.read_text())
    assert data["info"]["exit_status"] == name
    assert data["messages"][-1]["content"] == f"Terminated by signal {name}."
    assert [p for p in wait_host_gone(marker, grace=5) if "swe_sandbox" not in p] == []


def test_editing_a_multi_line_command_opens_the_editor(monkeypatch):
    """[e]dit on a command the one-line prompt cannot show opens $EDITOR on it (a real one: sed)."""
    import io

    from rich.console import Console

    from swe_sandbox.cli.display import ask_approval

    monkeypatch.setenv("EDITOR", "sed -i s/first/edited/")
    monkeypatch.setattr("sys.stdin", io.StringIO("e\n"))
    console = Console(file=io.StringIO(), force_terminal=False)
    assert ask_approval(console, "echo first\necho second") == ("edit", "echo edited\necho second")
