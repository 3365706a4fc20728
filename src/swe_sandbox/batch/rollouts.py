"""One rollout: a task's sandbox, the agent to an exit status, then (optionally) evaluation.

``rollout`` is one function returning one value (``RolloutResult``); it writes nothing but the
trajectory it is asked to keep up to date (``trajectory_path``, after every step). It is safe to
call from many threads: each call builds its own model, sandbox and agent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from swe_sandbox.agent.default import LIMITS_EXCEEDED, DefaultAgent, ExitStatus, exit_message
from swe_sandbox.batch import evaluation
from swe_sandbox.batch.evaluation import DEFAULT_EVAL_TIMEOUT_S, STRICT, EvalResult, died_outside
from swe_sandbox.batch.images import pull_reporter
from swe_sandbox.batch.phases import PhaseLog, sandbox_plan
from swe_sandbox.batch.records import sample_label
from swe_sandbox.batch.sandbox import task_sandbox
from swe_sandbox.environments import environment_class
from swe_sandbox.environments.container.pulling import report_pulls
from swe_sandbox.errors import ConfigError, ConnectionLost, LimitsExceeded, Outcome, SandboxDied, outcome_of
from swe_sandbox.models import get_model
from swe_sandbox.redact import redact

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.control import Cancellation, CostBudget
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.base import Environment

#: The exit status of a sandbox lost because its engine stopped answering: infrastructure (retried).
ENGINE_LOST = ExitStatus.ENGINE_LOST
#: The exit status of a rollout stopped by ``Cancellation`` (Ctrl-C): not done, not an attempt.
INTERRUPTED = ExitStatus.KEYBOARD_INTERRUPT
#: Placeholder in string values of the model config, replaced by the task's id (e.g. a replay
#: model's ``trajectory: solutions/{instance_id}.traj.json``).
INSTANCE_PLACEHOLDER = "{instance_id}"
#: Placeholder in string values of the model config, replaced by a group's sample number (0 ..
#: K-1), e.g. a replay model's ``trajectory: solutions/{instance_id}.{sample}.traj.json``.
SAMPLE_PLACEHOLDER = "{sample}"

Progress = Callable[..., None]


class GroupInfo(BaseModel):
    """How one sample of a group got its sandbox (``swe_sandbox.batch.groups``)."""

    group: str
    """Id of the preparation (start, setup, snapshot) the sample came from; shared by the samples
    of one ``rollout_group`` call."""
    mode: str
    """``fork`` (a sandbox forked from the snapshot), ``reuse`` (the prepared sandbox, reset to the
    snapshot between samples) or ``fresh`` (no snapshot on this backend: its own start and setup)."""
    prepare_s: float = 0.0
    """Seconds the group's preparation took (start, workspace, ``setup_command``, snapshot): once
    per ``group``, shared by its samples (``fresh``: 0, each sample prepares its own sandbox
    within its ``duration_s``)."""
    fork_s: float = 0.0
    """Seconds this sample waited for its sandbox after the preparation (a fork, a reset; 0 for
    the prepared sandbox itself)."""
    reset_drift: list[str] = []
    """``--reuse``: what the reset before this sample could not revert (``ResetFailed.drift``);
    the sample then ran in a new sandbox from the snapshot. Empty: the reset held (or none ran)."""


class RolloutResult(BaseModel):
    """What one rollout returns."""

    instance_id: str
    exit_status: str
    """``Submitted``, ``LimitsExceeded``, ..., an exception's class name, or ``KeyboardInterrupt``."""
    done: bool
    """An agent outcome (True) or an infrastructure failure / interruption (False: run again):
    ``outcome.done``."""
    outcome: Outcome | None = None
    """What the ending means (``errors.Outcome``); None where its producer does not say (a
    result made for a lost Ray task: ``done`` alone tells)."""
    submission: str = ""
    messages: list[dict[str, Any]] = []
    cost: float = 0.0
    """USD."""
    api_calls: int = 0
    steps: int = 0
    duration_s: float = 0.0
    error: str = ""
    backend: str = ""
    started_at: float = 0.0
    evaluation: EvalResult | None = None
    """With ``infra_failure`` set, the evaluation had no verdict: the agent's outcome still stands
    (``done``) and only the evaluation is run again (``swe_sandbox.batch.driver``)."""
    model_name: str = ""
    evaluate_only: bool = False
    """An evaluation of a kept patch (``evaluate_kept``): no agent ran."""
    node: str = ""
    """Host name of the machine that ran it, when not this one's (Ray); empty: this machine."""
    ray_node: str = ""
    """Id of the Ray node that ran it (``--ray``); empty without Ray."""
    trajectory: str | None = None
    """The trajectory file's text, when the rollout ran where the output directory is not (Ray):
    the driver writes it. None: the agent saved it itself (``trajectory_path``)."""
    sample: int | None = None
    """The sample's number in its task's group (``groups.rollout_group``: 0 .. K-1); None: a
    single rollout."""
    group: GroupInfo | None = None
    """How a group's sample got its sandbox (None: a single rollout)."""
    network: dict[str, Any] = {}
    """What the allow-list proxy decided in each phase of the agent's sandbox
    (``phases.PhaseLog.summary``: ``{"setup": {...}, "agent": {...}}``; a group's fork or reused
    sandbox: ``agent`` only); also the trajectory's ``info.network``. Empty: no sandbox."""

    @property
    def label(self) -> str:
        """``instance_id``, or ``instance_id/sample`` for a group's sample (what progress and the
        cost limit key it by)."""
        return sample_label(self.instance_id, self.sample)

    @property
    def resolved(self) -> bool | None:
        return None if self.evaluation is None else self.evaluation.resolved

    @property
    def reward(self) -> float | None:
        return None if self.evaluation is None else self.evaluation.reward


def rollout(task: Task, run_config: dict[str, Any], env_config: dict[str, Any], evaluate: bool = True, *,
            trajectory_path: str | Path | None = None, cancel: Cancellation | None = None,
            budget: CostBudget | None = None, progress: Progress | None = None,
            eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S, grading: str = STRICT,
            model_wrapper: Callable[[Any], Any] | None = None) -> RolloutResult:
    """Run the agent on ``task`` in a fresh sandbox, then evaluate its patch in another.

    Args:
        task: the task (``swe_sandbox.batch.load_tasks``).
        run_config: ``{"agent": {...}, "model": {...}}`` as ``swe_sandbox.agent.load_run_config``
            returns it; ``{instance_id}`` in the model's string fields becomes the task's id.
        env_config: the environment config (``{"backend": "bwrap", ...}``); the task's image,
            cwd and workspace are applied on top.
        evaluate: evaluate the patch (``swe_sandbox.batch.evaluation``) when the run is done.
        trajectory_path: where the agent saves its trajectory after every step (None: not saved).
        cancel: stops the rollout at its next step and closes its sandbox at once.
        budget: the batch's total cost limit: once reached, the agent stops with ``LimitsExceeded``.
        progress: called as ``progress(instance_id, **fields)`` with ``phase``, ``step``, ``cost``,
            ``command``, and ``detail`` while the image is pulled (from the rollout's or the pull's thread).
        eval_timeout: seconds for ``eval_command``.
        grading: the evaluation's grading policy, ``strict`` (default) or ``swebench``
            (``swe_sandbox.batch.evaluation``).
        model_wrapper: called with the model built for the task; the agent queries what it returns
            (``arollout`` routes the calls to an event loop this way). None: the model itself.

    Returns:
        RolloutResult: never raises for an agent, model or sandbox failure (see ``exit_status``).
    """

    controls = Controls(cancel=cancel, budget=budget, progress=progress, eval_timeout=eval_timeout, grading=grading,
                        model_wrapper=model_wrapper)
    try:
        log: PhaseLog | None = PhaseLog(sandbox_plan(task, env_config))
    except ConfigError:  # raised again by task_sandbox, inside the rollout: its result
        log = None
    return run_in(task, run_config, env_config, lambda: task_sandbox(task, env_config, network_log=log), evaluate,
                  controls, trajectory_path, network_log=log)


@dataclass(frozen=True)
class Controls:
    """What a rollout is steered and reported by (``rollout``'s keyword arguments of the same names)."""

    cancel: Cancellation | None = None
    budget: CostBudget | None = None
    progress: Progress | None = None
    eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S
    grading: str = STRICT
    model_wrapper: Callable[[Any], Any] | None = None

    def report(self, label: str, **fields: Any) -> None:
        if self.progress is not None:
            self.progress(label, **fields)


#: A zero-argument callable giving the context manager of a rollout's sandbox (started, set up).
SandboxFactory = Callable[[], AbstractContextManager["Environment"]]


def run_in(task: Task, run_config: dict[str, Any], env_config: dict[str, Any], sandbox: SandboxFactory,
           evaluate: bool, controls: Controls, trajectory_path: str | Path | None = None,
           sample: int | None = None, network_log: PhaseLog | None = None) -> RolloutResult:
    """``rollout`` with the agent's sandbox from ``sandbox()`` (``rollout``: the task's own, fresh;
    ``groups``: a fork of the task's snapshot). ``sample`` numbers a group's sample (its model
    config: ``model_config_for``; its progress and cost are keyed ``instance_id/sample``).
    ``network_log``: the log ``sandbox()`` recorded the setup phase in (None: a new one, the
    agent phase only); the agent phase is entered with it (``PhaseLog.enter``).

    Returns:
        RolloutResult: never raises for an agent, model or sandbox failure.
    """
    started, wall = time.monotonic(), time.time()
    label = sample_label(task.instance_id, sample)
    controls.report(label, phase="starting")
    with report_pulls(pull_reporter(label, controls.progress or (lambda *a, **k: None))):  # a pull shows on its line
        result = _run_agent(task, run_config, env_config, sandbox, trajectory_path, controls, sample, network_log)
        result.started_at = wall
        if evaluate and result.done:
            controls.report(label, phase="evaluating")
            evaluate_into(task, result, env_config, controls)
    result.duration_s = time.monotonic() - started
    return result


def evaluate_into(task: Task, result: RolloutResult, env_config: dict[str, Any], controls: Controls) -> None:
    """Evaluate ``result``'s submission in a fresh sandbox into ``result.evaluation`` (an
    interruption makes ``result`` interrupted; an evaluation without a verdict sets its ``error``)."""
    try:
        result.evaluation = evaluation.evaluate(task, result.submission, env_config, timeout=controls.eval_timeout,
                                                cancel=controls.cancel, grading_policy=controls.grading)
    except KeyboardInterrupt:
        result.exit_status, result.done, result.error = INTERRUPTED, False, "interrupted during evaluation"
        result.outcome = Outcome.INTERRUPTED
        return
    if result.evaluation.infra_failure:  # the agent's outcome stands; only the evaluation runs again
        result.error = f"evaluation: {result.evaluation.error}"


def evaluate_kept(task: Task, exit_status: str, patch: str, env_config: dict[str, Any], *,
                  cancel: Cancellation | None = None, eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S,
                  backend: str = "", grading: str = STRICT, outcome: Outcome | None = None) -> RolloutResult:
    """Evaluate the patch of an earlier, finished attempt (whose evaluation had no verdict).

    Args:
        outcome (Outcome | None): the earlier attempt's outcome, kept (None: it did not record one).

    Returns:
        RolloutResult: ``done``, ``evaluate_only``, the earlier ``exit_status`` and ``patch`` as
        submission, cost 0; ``exit_status`` ``KeyboardInterrupt`` when ``cancel`` stopped it.
    """
    started, wall = time.monotonic(), time.time()
    result = RolloutResult(instance_id=task.instance_id, exit_status=exit_status, done=True, submission=patch,
                           outcome=outcome,
                           backend=backend or str(env_config.get("backend", "")), started_at=wall, evaluate_only=True)
    evaluate_into(task, result, env_config, Controls(cancel=cancel, eval_timeout=eval_timeout, grading=grading))
    result.duration_s = time.monotonic() - started
    return result


def model_config_for(task: Task, model: dict[str, Any], sample: int | None = None) -> dict[str, Any]:
    """``model`` for ``task`` (and a group's ``sample``): ``{instance_id}`` in its string values
    becomes the task's id; for a sample, ``{sample}`` becomes its number (0 .. K-1) and an integer
    ``model_kwargs.seed`` becomes ``seed + sample``, so the K samples of a task
    differ where the provider honours a seed, and a rerun of sample k asks for the same seed."""
    out = {k: _placed(v, task.instance_id, sample) for k, v in model.items()}
    kwargs = out.get("model_kwargs")
    if sample is not None and isinstance(kwargs, dict) and type(kwargs.get("seed")) is int:
        out["model_kwargs"] = {**kwargs, "seed": kwargs["seed"] + sample}
    return out


def _placed(value: Any, instance_id: str, sample: int | None) -> Any:
    if not isinstance(value, str):
        return value
    value = value.replace(INSTANCE_PLACEHOLDER, instance_id)
    return value if sample is None else value.replace(SAMPLE_PLACEHOLDER, str(sample))


def _run_agent(task: Task, run_config: dict[str, Any], env_config: dict[str, Any], sandbox: SandboxFactory,
               trajectory_path: str | Path | None, controls: Controls, sample: int | None,
               network_log: PhaseLog | None = None) -> RolloutResult:
    if network_log is None:
        try:
            network_log = PhaseLog(sandbox_plan(task, env_config))
        except ConfigError:  # raised again inside the rollout: its result
            network_log = None
    result = _agent_in(task, run_config, env_config, sandbox, trajectory_path, controls, sample, network_log)
    if network_log is not None:
        result.network = network_log.summary()
    return result


def _agent_in(task: Task, run_config: dict[str, Any], env_config: dict[str, Any], sandbox: SandboxFactory,
              trajectory_path: str | Path | None, controls: Controls, sample: int | None,
              network_log: PhaseLog | None) -> RolloutResult:

    backend = str(env_config.get("backend", ""))
    cancel, budget, label = controls.cancel, controls.budget, sample_label(task.instance_id, sample)
    agent = None
    try:
        model = get_model(model_config_for(task, run_config["model"], sample))
        if controls.model_wrapper is not None:
            model = controls.model_wrapper(model)
        with sandbox() as environment:
            if network_log is None:
                network_log = PhaseLog(sandbox_plan(task, env_config))
            network_log.enter(environment)
            agent = make_batch_agent(model, environment, label, cancel=cancel, budget=budget,
                                     progress=controls.progress, network_log=network_log,
                                     **{**run_config["agent"], "output_path": trajectory_path})
            if cancel is not None:
                interrupt = getattr(model, "interrupt", None) or (lambda: None)  # ends a retry wait
                with cancel.closing(environment), cancel.calling(interrupt):
                    agent.run(task.problem_statement)
            else:
                agent.run(task.problem_statement)
    except KeyboardInterrupt:
        return _result(task, agent, backend, INTERRUPTED, Outcome.INTERRUPTED, "interrupted", sample)
    except Exception as exc:  # the sandbox did not start, setup failed, a bad config: a value
        status, outcome = ending_of(exc, env_config)
        if cancel is not None and cancel.cancelled:
            status, outcome = INTERRUPTED, Outcome.INTERRUPTED
        return _result(task, agent, backend, status, outcome, f"{type(exc).__name__}: {exc}", sample)
    finally:
        if budget is not None:
            budget.finish(label, agent.model_cost if agent is not None else 0.0)
    status, outcome = agent.exit_status, agent.outcome or Outcome.AGENT
    if isinstance(agent.failure, SandboxDied):  # the sandbox died under the agent: the one rule decides
        status, outcome = ending_of(agent.failure, env_config)
    if cancel is not None and cancel.cancelled and not outcome.done:  # ended by the cancel (a retry wait too)
        status, outcome = INTERRUPTED, Outcome.INTERRUPTED
    return _result(task, agent, backend, status, outcome,
                   "" if status == ExitStatus.SUBMITTED else _exit_text(agent), sample)


def ending_of(exc: Exception, env_config: dict[str, Any]) -> tuple[str, Outcome]:
    """The exit status and outcome of a rollout that ``exc`` ended before (or outside) the agent's
    loop: its class name and ``errors.outcome_of``, but a sandbox death as ``died_outcome`` says
    (``ENGINE_LOST`` for an engine that no longer answers)."""
    if not isinstance(exc, SandboxDied):
        return type(exc).__name__, outcome_of(exc)
    outcome = died_outcome(exc, env_config)
    lost = outcome is Outcome.SANDBOX and not isinstance(exc, ConnectionLost)
    return (ENGINE_LOST if lost else type(exc).__name__), outcome


def died_outcome(exc: SandboxDied, env_config: dict[str, Any]) -> Outcome:
    """A sandbox's death in a batch: ``sandbox`` (infrastructure, run again) when it died outside
    (``evaluation.died_outside``: the ssh link lost, or its engine no longer answers); any other
    death is what the agent ran in it (out of memory, its runner killed from inside): ``agent``, done."""

    backend = environment_class(str(env_config.get("backend", "")))
    return Outcome.SANDBOX if died_outside(exc, backend) else Outcome.AGENT


def _exit_text(agent: Any) -> str:
    last = agent.messages[-1] if agent is not None and agent.messages else {}
    return str(last.get("content") or "")[:2000] if last.get("role") == "exit" else ""


def _result(task: Task, agent: Any, backend: str, status: str, outcome: Outcome, error: str,
            sample: int | None = None) -> RolloutResult:
    """The result of a finished (or failed) agent run, from what ``agent`` holds (None: never built)."""

    done = outcome.done
    error = redact(error, agent.known_secrets() if agent is not None else ())
    if agent is None:
        return RolloutResult(instance_id=task.instance_id, exit_status=status, done=done, outcome=outcome,
                             error=error, backend=backend, sample=sample)
    model = agent.model
    return RolloutResult(
        instance_id=task.instance_id, exit_status=status, done=done, outcome=outcome, error=error, backend=backend,
        sample=sample,
        submission=agent.redacted()["info"]["submission"] if status == ExitStatus.SUBMITTED else "",
        messages=agent.messages, cost=agent.model_cost, api_calls=int(getattr(model, "n_calls", 0) or 0),
        steps=agent.n_steps, model_name=str(getattr(getattr(model, "config", None), "model_name", "") or ""))


def make_batch_agent(model: Any, env: Any, instance_id: str, *, cancel: Cancellation | None = None,
                     budget: CostBudget | None = None, progress: Progress | None = None,
                     network_log: PhaseLog | None = None, **config: Any):
    """A ``DefaultAgent`` that stops on ``cancel`` (``KeyboardInterrupt``, trajectory saved) and on
    the batch's ``budget`` (``LimitsExceeded``), reports each step (and the command it is about
    to run) to ``progress``, and writes ``network_log``'s summary (what the proxy decided in each
    phase) into its trajectory's ``info.network``."""

    report = progress or (lambda *a, **k: None)

    class BatchAgent(DefaultAgent):
        def check_limits(self) -> None:
            if cancel is not None and cancel.cancelled:
                raise KeyboardInterrupt("batch cancelled")
            if budget is not None and budget.exhausted():
                text = f"The batch's total cost limit was reached (${budget.limit:.2f})."
                raise LimitsExceeded(exit_message(LIMITS_EXCEEDED, text))
            super().check_limits()

        def on_query(self, message: dict[str, Any]) -> None:
            actions = (message.get("extra") or {}).get("actions") or [{}]
            report(instance_id, phase="running", step=self.n_steps, cost=self.model_cost,
                   command=str(actions[0].get("command", "")))

        def serialize(self) -> dict[str, Any]:
            data = super().serialize()
            if network_log is not None:
                data.setdefault("info", {})["network"] = network_log.summary()
            return data

    agent = BatchAgent(model, env, **config)
    if budget is not None:
        budget.track(instance_id, lambda: agent.model_cost)
    return agent
