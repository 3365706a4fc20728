"""How an ending is classified: ``errors.outcome_of`` in a batch's rollout (done or run again) and
in the command line's exit statuses, from the classes alone."""

from __future__ import annotations

import pytest

from swe_sandbox import errors
from swe_sandbox.batch.rollouts import ENGINE_LOST, ending_of
from swe_sandbox.cli.exit_codes import exit_for, exit_for_error, run_exit
from swe_sandbox.cli.guard import classify
from swe_sandbox.errors import Outcome

LOCAL = {"backend": "local"}


@pytest.mark.parametrize(("error", "status", "outcome", "done"), [
    (errors.SetupFailed("exit 1"), "SetupFailed", Outcome.INSTANCE, True),
    (errors.ConfigError("x"), "ConfigError", Outcome.CONFIG, True),
    (errors.TaskFileError("x"), "TaskFileError", Outcome.CONFIG, True),
    (errors.ModelError("(gave up after 3 attempt(s)"), "ModelError", Outcome.INSTANCE, True),
    (errors.ModelError("x", gave_up=True), "ModelError", Outcome.INFRASTRUCTURE, False),
    (errors.SandboxDied("oom"), "SandboxDied", Outcome.AGENT, True),  # local answers: died of what ran
    (errors.ConnectionLost("ssh"), "ConnectionLost", Outcome.SANDBOX, False),
    (errors.ImagePullError("x", reason="timeout"), "ImagePullError", Outcome.SANDBOX, False),
    (errors.BackendUnavailable("x"), "BackendUnavailable", Outcome.BACKEND, False),
    (RuntimeError("bug"), "RuntimeError", Outcome.INFRASTRUCTURE, False),
])
def test_a_rollouts_ending_comes_from_the_class(error, status, outcome, done):
    assert ending_of(error, LOCAL) == (status, outcome)
    assert outcome.done is done


def test_a_sandbox_whose_engine_stopped_answering_is_engine_lost(monkeypatch):
    from swe_sandbox.environments.local import LocalEnvironment

    monkeypatch.setattr(LocalEnvironment, "unavailable_reason", classmethod(lambda cls, *a, **k: "engine down"))
    assert ending_of(errors.SandboxDied("gone"), LOCAL) == (ENGINE_LOST, Outcome.SANDBOX)


def test_exit_statuses_come_from_the_outcome():
    assert [exit_for(o) for o in Outcome] == [1, 1, 2, 3, 4, 1, 130]
    assert exit_for(Outcome.INSTANCE, other=4) == 4
    assert exit_for_error(errors.Terminated(15)) == 143
    assert exit_for_error(errors.ConnectionLost("x")) == 4
    assert (run_exit(True, None), run_exit(False, None), run_exit(False, Outcome.SANDBOX)) == (0, 1, 4)
    assert classify(errors.ImagePullError("no such image"), 1) == (4, "sandbox failed", "ImagePullError: no such image")
    assert classify(errors.ModelError("m"), 1) == (1, "error", "ModelError: m")
