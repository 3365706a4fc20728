"""``swe-sandbox run``'s exit status for each error class, through the real command line
(``swe_sandbox.cli.app``): the status the exit-code table promises for the error's outcome, 4 for
every sandbox failure (``ImagePullError`` and ``ConnectionLost`` exited 1 once).

Each class is raised from the agent's loop (the model's query: a tiny fixture), and a real
``ImagePullError`` comes from docker with an image that is absent and may not be pulled."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from swe_sandbox import errors
from swe_sandbox.cli.app import app
from swe_sandbox.cli.exit_codes import exit_for_error
from swe_sandbox.models.test_models import DeterministicModel

#: Each error class, an instance of it, and the exit status the table gives it.
CASES = [
    (errors.ConfigError("bad field"), 2),
    (errors.TaskFileError("bad line"), 2),
    (errors.BackendUnavailable("no engine"), 3),
    (errors.SandboxError("broken"), 4),
    (errors.SandboxStartError("did not start"), 4),
    (errors.ImagePullError("no such image", image="x", reason="not_found"), 4),
    (errors.SandboxDied("died"), 4),
    (errors.ConnectionLost("ssh link lost"), 4),
    (errors.ProtocolError("bad frame"), 4),
    (errors.DownloadTooLarge(10, "/big"), 4),
    (errors.SnapshotError("commit failed"), 4),
    (errors.ResetFailed(["a process survived"]), 4),
    (errors.ImageBuildError("step 3"), 1),
    (errors.SetupFailed("setup exited 1"), 1),
    (errors.EvaluationStepFailed("reset failed"), 1),
    (errors.ModelError("not retried"), 1),
    (errors.ModelError("gave up", gave_up=True), 1),
    (errors.LimitsExceeded(), 1),
    (errors.TimeExceeded(), 1),
    (RuntimeError("a bug"), 1),
    (KeyboardInterrupt(), 130),
    (errors.Terminated(15), 143),
    (errors.Terminated(1), 129),
]


def run(*args: str):
    return CliRunner().invoke(app, ["run", "--env", "local", "-t", "say hi", *args], catch_exceptions=False)


@pytest.mark.parametrize(("error", "expected"), CASES, ids=lambda c: type(c).__name__ if isinstance(c, BaseException) else str(c))
def test_run_exits_with_the_tables_status_for_each_error(error, expected, tmp_path, monkeypatch):
    def query(self, messages, **kwargs):
        raise error

    monkeypatch.setattr(DeterministicModel, "query", query)
    output = tmp_path / "t.traj.json"
    result = run("-o", str(output), "-c", "model.model_class=deterministic", "-c", 'model.outputs=["echo hi"]')
    assert result.exit_code == expected == exit_for_error(error), result.output
    info = json.loads(output.read_text())["info"]
    assert info["outcome"] == errors.outcome_of(error)
    assert info["exit_status"] == getattr(error, "signal_name", None) or info["exit_status"] in (
        type(error).__name__, "KeyboardInterrupt", "LimitsExceeded", "TimeExceeded")


def test_every_error_class_has_a_case():
    drawn = {cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, BaseException)
             and cls.__module__ == errors.__name__}
    covered = {type(error) for error, _ in CASES}
    assert drawn - covered <= {errors.SweSandboxError, errors.InterruptAgentFlow, errors.FormatError,
                               errors.Submitted, errors.BatchAborted}


def docker_usable() -> bool:
    return shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.mark.skipif(not docker_usable(), reason="docker is not usable here")
def test_run_exits_4_when_the_image_cannot_be_pulled(tmp_path):
    output = tmp_path / "t.traj.json"
    result = CliRunner().invoke(app, [
        "run", "--env", "docker", "-t", "say hi", "-o", str(output), "-c", "model.model_class=deterministic",
        "-c", 'model.outputs=["echo hi"]', "-c", "environment.image=swe-sandbox-test/no-such-image:never",
        "-c", "environment.image_pull=never"], catch_exceptions=False)
    assert result.exit_code == 4, result.output
