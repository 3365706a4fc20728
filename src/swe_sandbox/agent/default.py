"""``DefaultAgent``: mini-swe-agent's loop on top of the execute contract.

    query the model -> run each tool call with env.execute -> one observation per tool call -> repeat

until a command submits (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && ...``), a limit is hit,
or something fails for good. The run ends with an ``{"role": "exit", ...}`` message whose
``extra`` holds ``exit_status`` and ``submission`` (mini-swe-agent v2's convention), and the
trajectory is saved atomically after every step.

How a run ends is the public ``swe_sandbox.errors.InterruptAgentFlow`` hierarchy, raised by the
agent itself, by a model or by a subclass alike: ``LimitsExceeded`` (step or cost limit, repeated
format errors, a batch's budget) and ``TimeExceeded`` (wall time) carry the messages to add and,
last, the exit message (``exit_message``); ``Submitted`` ends with the submission; ``FormatError``
only adds its messages and the loop goes on. Any other exception ends the run with its class name
as the exit status. Beside ``exit_status``, the trajectory's ``info`` records the ending's
``outcome`` (``DefaultAgent.outcome``; the exit message keeps mini-swe-agent's keys) (``swe_sandbox.errors.outcome_of``: ``agent`` for the agent's own endings,
``sandbox``, ``instance``, ... for an exception's, ``interrupted`` for Ctrl-C); a trajectory
without it (older files) reads as ``agent`` once it has an exit status.
"""

from __future__ import annotations

import logging
import time
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swe_sandbox.agent.observation import OBSERVATION_LIMIT, TRAJECTORY_OUTPUT_LIMIT, bounded
from swe_sandbox.config import validate
from swe_sandbox.errors import (
    FormatError,
    InterruptAgentFlow,
    LimitsExceeded,
    Outcome,
    Submitted,
    Terminated,
    TimeExceeded,
    outcome_of,
)
from swe_sandbox.protocols import Environment, Model
from swe_sandbox.redact import find_secrets, redact
from swe_sandbox.templates import render_template
from swe_sandbox.trajectory import TRAJECTORY_FORMAT, recursive_merge, write_trajectory
from swe_sandbox.version import __version__

logger = logging.getLogger("swe_sandbox.agent")



class ExitStatus(StrEnum):
    """The exit statuses a run ends with besides an exception's class name (e.g. ``SandboxDied``,
    ``ModelError``) or a signal's name (``SIGTERM``). Strings (``==`` and JSON as their values);
    what an ending *means* is its ``Outcome``, recorded beside it."""

    SUBMITTED = "Submitted"
    LIMITS_EXCEEDED = "LimitsExceeded"
    TIME_EXCEEDED = "TimeExceeded"
    REPEATED_FORMAT_ERROR = "RepeatedFormatError"
    KEYBOARD_INTERRUPT = "KeyboardInterrupt"
    ENGINE_LOST = "EngineLost"
    """Set by a batch (``swe_sandbox.batch.rollouts``): the sandbox's engine stopped answering."""


SUBMITTED = ExitStatus.SUBMITTED
LIMITS_EXCEEDED = ExitStatus.LIMITS_EXCEEDED
TIME_EXCEEDED = ExitStatus.TIME_EXCEEDED
REPEATED_FORMAT_ERROR = ExitStatus.REPEATED_FORMAT_ERROR
KEYBOARD_INTERRUPT = ExitStatus.KEYBOARD_INTERRUPT


class AgentConfig(BaseModel):
    """Config of ``DefaultAgent`` (the ``agent:`` section of a run config)."""

    model_config = ConfigDict(extra="forbid")

    system_template: str
    """jinja2 template of the system message (StrictUndefined: an unknown variable is an error)."""
    instance_template: str
    """jinja2 template of the first user message; ``task`` holds the task."""
    step_limit: int = Field(default=0, ge=0)
    """Maximum number of model queries (steps), format errors included; 0: no limit."""
    cost_limit: float = Field(default=3.0, ge=0)
    """Stop once the model's cost reaches this many USD; 0: no limit."""
    wall_time_limit_s: float = Field(default=0.0, ge=0)
    """Stop once the run has taken this many seconds (commands get at most the time left); 0: no limit."""
    max_consecutive_format_errors: int = Field(default=3, ge=1)
    """Stop with exit status ``RepeatedFormatError`` after this many unusable replies in a row."""
    output_path: Path | None = None
    """Where the trajectory is saved after every step; None: not saved."""
    observation_limit: int = Field(default=OBSERVATION_LIMIT, ge=0)
    """Characters of a command's output the model sees at most: past it, the first and the last
    half with a note of how many characters were elided between them (mini-swe-agent's 10 000;
    ``swe_sandbox.agent.observation``). 0: the whole output."""
    trajectory_output_limit: int = Field(default=TRAJECTORY_OUTPUT_LIMIT, ge=0)
    """Characters of an output cut for the model that the trajectory keeps besides (head and
    tail, in the observation's ``extra.raw_output``), so it grows by a bounded amount each step.
    0: only what the model saw."""


class ActionRejected(Exception):
    """Raised by ``approve`` to skip a command; the model is told ``reason``."""

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = reason


def exit_message(status: str, content: str, submission: str = "", **extra: Any) -> dict[str, Any]:
    """The message that ends a run: ``{"role": "exit", "content", "extra": {"exit_status",
    "submission", **extra}}`` (mini-swe-agent v2's convention).

    An ``InterruptAgentFlow`` (``LimitsExceeded``, ``TimeExceeded``...) carrying one as its last
    message ends the run with it (see ``DefaultAgent.run``).

    Args:
        status (str): the exit status (``ExitStatus`` or an exception's class name).
        content (str): the message's text.
        submission (str): the submission (default ``""``).
        **extra: more fields of ``extra`` (e.g. ``traceback``).
    """
    return {"role": "exit", "content": content, "extra": {"exit_status": status, "submission": submission, **extra}}


def carried_exit(exc: BaseException) -> dict[str, Any] | None:
    """The exit message ``exc`` carries (an ``InterruptAgentFlow`` whose last message has role
    ``exit``), else None."""
    messages = [m for m in getattr(exc, "messages", None) or () if isinstance(m, dict)] \
        if isinstance(exc, InterruptAgentFlow) else []
    exits = [m for m in messages if m.get("role") == "exit"]
    return exits[-1] if exits else None


def not_run_result(reason: str) -> dict[str, Any]:
    """A result dict for a command that was not run (returncode -1: it did not finish)."""
    return {"output": "", "returncode": -1, "exception_info": reason,
            "extra": {"not_run": True, "timed_out": False, "truncated": False,
                      "output_bytes": 0, "dropped_bytes": 0, "duration_s": 0.0}}


def edited_result(result: dict[str, Any], command: str) -> dict[str, Any]:
    """``result`` of a command the user edited before it ran, telling the model what ran."""
    note = f"[The user edited this command before it ran. It ran as:\n{command}\n]\n"
    return {**result, "output": note + str(result.get("output", "")),
            "extra": {**(result.get("extra") or {}), "edited_command": command}}


class DefaultAgent:
    """A thin tool-calling agent (mini-swe-agent's ``DefaultAgent``, with limits and hooks).

    Args:
        model (Model): any model (``swe_sandbox.protocols.Model``: ``query``,
            ``format_observation_messages``, ``get_template_vars``, ``serialize``; ``cost`` and
            ``n_calls`` when it has them; see ``swe_sandbox.models``).
        env (Environment): any backend (``swe_sandbox.protocols.Environment``: ``execute``,
            ``get_template_vars``, ``serialize``; ``start`` when it has one).
        **config: fields of ``AgentConfig``.

    Raises:
        ConfigError: an unknown or invalid config field (named in the message).

    Subclasses may override the hooks ``approve`` (confirm or edit a command),
    ``on_query`` and ``on_result`` (progress), which do nothing by default, and ``run_command``
    (how a command runs: ``env.execute`` by default; the CLI streams its output).
    """

    def __init__(self, model: Model, env: Environment, **config: Any):

        self.config: AgentConfig = validate(AgentConfig, config, section="agent")
        self.model: Model = model
        self.env: Environment = env
        self.messages: list[dict[str, Any]] = []
        self.extra_template_vars: dict[str, Any] = {}
        self.n_steps = 0
        self.consecutive_format_errors = 0
        self.started_at: float | None = None
        self._failure_outcome: Outcome | None = None
        self.failure: BaseException | None = None
        """The exception that ended the run, when one did (None: the agent's own ending)."""

    # -- results -----------------------------------------------------------------------------
    @property
    def exit_status(self) -> str:
        """The exit status once the run ended, else ``""``."""
        return self._exit_extra().get("exit_status", "")

    @property
    def outcome(self) -> Outcome | None:
        """What the ending means (``errors.Outcome``) once the run ended, else None: the
        exception's (``errors.outcome_of``) when one ended it, ``interrupted`` for Ctrl-C or a
        signal, else ``agent`` (its own ending: submitted, a limit, repeated format errors)."""
        if not self._exit_extra():
            return None
        return self._failure_outcome or Outcome.AGENT

    @property
    def submission(self) -> str:
        """The submission once the run ended (``""`` unless ``Submitted``)."""
        return self._exit_extra().get("submission", "")

    def _exit_extra(self) -> dict[str, Any]:
        last = self.messages[-1] if self.messages else {}
        return last.get("extra") or {} if last.get("role") == "exit" else {}

    # -- templates ---------------------------------------------------------------------------
    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Environment, model, task and agent config variables (later ones win), plus ``kwargs``.

        Also ``n_model_calls`` (int), ``model_cost`` (float, USD) and ``tool_calling`` (bool:
        False for a text model, one that declares ``tools = None``).
        """
        return {
            **self.env.get_template_vars(),
            **self.model.get_template_vars(),
            **self.extra_template_vars,
            **self.config.model_dump(),
            "n_model_calls": self.n_steps,
            "model_cost": self.model_cost,
            "tool_calling": getattr(self.model, "tools", ()) is not None,
            **kwargs,
        }

    def render_template(self, template: str, **kwargs: Any) -> str:
        """Render a jinja2 template with ``get_template_vars()`` (StrictUndefined).

        Raises:
            ConfigError: the template is invalid or uses an unknown variable (the message says which).
        """

        return render_template(template, self.get_template_vars(**kwargs), where="agent template",
                               keep_trailing_newline=False)

    @property
    def model_cost(self) -> float:
        """What the model has cost so far, in USD."""
        return float(getattr(self.model, "cost", 0.0) or 0.0)

    # -- the loop ----------------------------------------------------------------------------
    def add_messages(self, *messages: dict[str, Any]) -> None:
        self.messages.extend(messages)

    def run(self, task: str, **kwargs: Any) -> tuple[str, str]:
        """Run the loop until the task is submitted or the run stops.

        Args:
            task: the task, shown to the model through ``instance_template``.
            **kwargs: extra template variables.

        Returns:
            tuple[str, str]: ``(exit_status, submission)``. ``exit_status`` is ``Submitted``,
            ``LimitsExceeded``, ``TimeExceeded``, ``RepeatedFormatError``, or the class name of
            the exception that stopped the run (e.g. ``SandboxDied``, ``ModelError``; its
            traceback is in the exit message). ``submission`` is ``""`` unless submitted.

        Raises:
            KeyboardInterrupt: after the trajectory was saved with exit status ``KeyboardInterrupt``
                (Ctrl-C), or the signal's name (``SIGTERM``, ``SIGHUP``) for ``errors.Terminated``.
            ConfigError: a template is invalid or uses an unknown variable (nothing ran).
        """
        self.extra_template_vars = {**self.extra_template_vars, "task": task, **kwargs}
        self.messages = []
        self.n_steps = 0
        self.consecutive_format_errors = 0
        self._failure_outcome, self.failure = None, None
        self.started_at = time.monotonic()
        try:
            self.start_env()
        except KeyboardInterrupt as exc:
            self.add_messages(self._interrupt_exit(exc))
            self.save()
            raise
        except Exception as exc:
            self.add_messages(self._failure_exit(exc))
        else:
            self.add_messages(
                {"role": "system", "content": self.render_template(self.config.system_template)},
                {"role": "user", "content": self.render_template(self.config.instance_template)},
            )
        self.save()
        while self.messages[-1].get("role") != "exit":
            try:
                self.step()
            except KeyboardInterrupt as exc:
                self.add_messages(self._interrupt_exit(exc))
                raise
            except InterruptAgentFlow as exc:
                self._interrupted(exc)
            except Exception as exc:
                self.add_messages(self._failure_exit(exc))
            finally:
                self.save()
        return self.exit_status, self.submission

    def start_env(self) -> None:
        """Start the sandbox now (when the environment can), so its facts (``cwd``, ``python``)
        are known to the templates and a sandbox that cannot start ends the run at once."""
        start = getattr(self.env, "start", None)
        if callable(start):
            start()

    def _interrupt_exit(self, exc: KeyboardInterrupt) -> dict[str, Any]:
        """The exit message of Ctrl-C (``KeyboardInterrupt``) or of a termination signal
        (``errors.Terminated``: the exit status is the signal's name, e.g. ``SIGTERM``)."""

        self._failure_outcome, self.failure = Outcome.INTERRUPTED, exc
        if isinstance(exc, Terminated):
            return exit_message(exc.signal_name, f"Terminated by signal {exc.signal_name}.")
        return exit_message(KEYBOARD_INTERRUPT, "Interrupted by the user (Ctrl-C).")

    def _failure_exit(self, exc: Exception) -> dict[str, Any]:

        logger.warning("agent stopped by %s: %s", type(exc).__name__, redact(str(exc), self.known_secrets()))
        self._failure_outcome, self.failure = outcome_of(exc), exc
        return exit_message(type(exc).__name__, str(exc) or type(exc).__name__,
                            exception_str=str(exc), traceback=traceback.format_exc())

    def step(self) -> None:
        """One step: query the model, run its tool calls, add the observations."""
        message = self.query()
        self.execute_actions(message)

    def query(self) -> dict[str, Any]:
        """Check the limits, query the model and add its reply.

        Raises:
            LimitsExceeded: a step or cost limit is reached, or too many format errors in a row
                (exit status ``RepeatedFormatError``); carries the exit message.
            TimeExceeded: the wall-time limit is reached; carries the exit message.
        """
        self.check_limits()
        self.n_steps += 1
        try:
            message = self.model.query(self.messages)
        except FormatError as exc:
            self.consecutive_format_errors += 1
            if self.consecutive_format_errors >= self.config.max_consecutive_format_errors:
                ending = exit_message(REPEATED_FORMAT_ERROR, f"The model's reply could not be used "
                                      f"{self.consecutive_format_errors} times in a row; the last error: "
                                      f"{self._last_text(exc.messages)}")
                raise LimitsExceeded(*[m for m in exc.messages if isinstance(m, dict)], ending) from None
            raise  # run() adds its messages and goes on
        self.consecutive_format_errors = 0
        self.add_messages(message)
        self.on_query(message)
        return message

    def check_limits(self) -> None:
        """Raise ``LimitsExceeded`` (step, cost) or ``TimeExceeded`` (wall time) when a limit is
        reached; the exception carries the run's exit message."""
        cfg = self.config
        if 0 < cfg.step_limit <= self.n_steps:
            raise LimitsExceeded(exit_message(LIMITS_EXCEEDED, f"Step limit reached ({cfg.step_limit} model queries)."))
        if 0 < cfg.cost_limit <= self.model_cost:
            raise LimitsExceeded(exit_message(
                LIMITS_EXCEEDED, f"Cost limit reached (${self.model_cost:.4f} of ${cfg.cost_limit:.4f})."))
        if self.time_left() == 0:
            raise self.time_exceeded()

    def time_exceeded(self) -> TimeExceeded:
        """The ``TimeExceeded`` that ends the run at the wall-time limit (carries the exit message)."""
        text = f"Wall-time limit reached ({self.config.wall_time_limit_s:g} seconds)."
        return TimeExceeded(exit_message(TIME_EXCEEDED, text))

    def time_left(self) -> float | None:
        """Seconds left before the wall-time limit (0 when reached); None: no limit."""
        if not self.config.wall_time_limit_s or self.started_at is None:
            return None
        return max(0.0, self.config.wall_time_limit_s - (time.monotonic() - self.started_at))

    def execute_actions(self, message: dict[str, Any]) -> None:
        """Run every action of ``message`` in order and add one observation per action (each
        output bounded: ``observation_limit``, ``swe_sandbox.agent.observation``).

        Once an action submits (or the run must stop), the remaining actions of the turn are not
        run but still answered, so every tool call has its observation; then the run ends.
        """
        actions = (message.get("extra") or {}).get("actions") or []
        outputs: list[dict[str, Any]] = []
        stop: BaseException | None = None
        for action in actions:
            if stop is not None:
                outputs.append(not_run_result(f"Not run: an earlier command of this turn {self._why(stop)}."))
                continue
            try:
                outputs.append(self.execute_action(action))
            except Submitted as exc:
                outputs.append(exc.result or {"output": exc.submission, "returncode": 0, "exception_info": ""})
                stop = exc
            except BaseException as exc:  # noqa: BLE001 - answered, then re-raised below
                ending = carried_exit(exc)
                outputs.append(not_run_result(f"Not run: {ending['content']}" if ending else
                                              f"The command did not finish: {type(exc).__name__}: {exc}"))
                stop = exc
        outputs = [bounded(o, self.config.observation_limit, self.config.trajectory_output_limit) for o in outputs]
        self.add_messages(*self.model.format_observation_messages(message, outputs, self.get_template_vars()))
        if stop is not None:
            raise stop

    def execute_action(self, action: dict[str, Any]) -> dict[str, Any]:
        """Run one action (after ``approve``) and return its result dict.

        Raises:
            Submitted: the command submitted.
            TimeExceeded: the wall-time limit is reached (carries the exit message).
            SandboxError: the sandbox failed (see ``Environment.execute``).
        """
        left = self.time_left()
        if left == 0:
            raise self.time_exceeded()
        try:
            approved = self.approve(action)
        except ActionRejected as exc:
            result = not_run_result(f"The user rejected this command{': ' + exc.reason if exc.reason else '.'}")
            result["extra"]["rejected"] = True
            self.on_result(action, result)
            return result
        try:
            result = self.run_command(approved, **self._timeout_kwargs(left))
        except Submitted as exc:
            self.on_result(approved, exc.result)
            raise
        self.on_result(approved, result)
        if approved.get("command") != action.get("command"):
            result = edited_result(result, approved["command"])
        return result

    def _timeout_kwargs(self, left: float | None) -> dict[str, Any]:
        """``timeout=`` for execute so a command cannot outlive the wall-time limit."""
        if left is None:
            return {}
        default = getattr(getattr(self.env, "config", None), "timeout", None)
        return {"timeout": max(0.1, left if default is None else min(default, left))}

    def _interrupted(self, exc: InterruptAgentFlow) -> None:
        """Add what an interrupt carries; end the run unless it was a format error."""
        messages = [m for m in exc.messages if isinstance(m, dict) and m.get("role") != "exit"]
        ending = carried_exit(exc)
        self.add_messages(*messages)
        if isinstance(exc, FormatError):
            return
        if isinstance(exc, Submitted):
            lines = len(exc.submission.splitlines())
            self.add_messages(exit_message(SUBMITTED, f"Submitted ({lines} lines).", submission=exc.submission))
        elif ending is not None:
            self.add_messages(ending)
        else:
            status = TIME_EXCEEDED if isinstance(exc, TimeExceeded) else (
                LIMITS_EXCEEDED if isinstance(exc, LimitsExceeded) else type(exc).__name__)
            self.add_messages(exit_message(status, self._last_text(messages) or status))

    # -- hooks -------------------------------------------------------------------------------
    def run_command(self, action: dict[str, Any], **timeout_kwargs: Any) -> dict[str, Any]:
        """Run one approved action in the environment and return its result dict. Default:
        ``env.execute(action, **timeout_kwargs)``; a subclass may show the output as it arrives
        (``env.stream``), returning the same result and raising what ``execute`` raises.

        Args:
            action (dict): ``{"command": str}``, as approved.
            **timeout_kwargs: ``timeout=`` (seconds) when the wall-time limit bounds the command.

        Raises:
            Submitted: the command submitted. SandboxError: the sandbox failed.
        """
        return self.env.execute(action, **timeout_kwargs)

    def approve(self, action: dict[str, Any]) -> dict[str, Any]:
        """Return the action to run (possibly edited), or raise ``ActionRejected``. Default: as is."""
        return action

    def on_query(self, message: dict[str, Any]) -> None:
        """Called with every reply the model gave (after it was added to the history)."""

    def on_result(self, action: dict[str, Any], result: dict[str, Any]) -> None:
        """Called after each command ran (or was rejected) with its result dict."""

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def _why(exc: BaseException) -> str:
        if isinstance(exc, Submitted):
            return "submitted"
        ending = carried_exit(exc)
        if ending is not None:
            return f"ended the run ({ending['extra']['exit_status']})"
        return f"failed ({type(exc).__name__})"

    @staticmethod
    def _last_text(messages: list[Any]) -> str:
        for message in reversed(messages):
            content = message.get("content") if isinstance(message, dict) else message
            if isinstance(content, str) and content:
                return content
        return ""

    # -- saving ------------------------------------------------------------------------------
    def serialize(self) -> dict[str, Any]:
        """The trajectory as a JSON-ready dict (mini-swe-agent's ``mini-swe-agent-1.1`` format)."""

        extra = self._exit_extra()
        agent_data = {
            "info": {
                "exit_status": extra.get("exit_status", ""),
                "submission": extra.get("submission", ""),
                "outcome": self.outcome or "",
                "model_stats": {"instance_cost": self.model_cost,
                                "api_calls": int(getattr(self.model, "n_calls", self.n_steps) or 0)},
                "config": {"agent": self.config.model_dump(mode="json"),
                           "agent_type": f"{type(self).__module__}.{type(self).__name__}"},
                "swe_sandbox_version": __version__,
            },
            "messages": self.messages,
            "trajectory_format": TRAJECTORY_FORMAT,
        }
        return recursive_merge(self.model.serialize(), self.env.serialize(), agent_data)

    def known_secrets(self) -> set[str]:
        """Secret values of the model's and the environment's configs: those under secret-looking
        keys (``model_kwargs.api_key``, ``env.GITHUB_TOKEN``...) and credentials in URLs
        (``api_base``). They are masked in the saved trajectory, besides what ``redact`` finds itself."""

        found: set[str] = set()
        for part in (self.model, self.env):
            dump = getattr(getattr(part, "config", None), "model_dump", None)
            if callable(dump):
                try:
                    found |= find_secrets(dump())
                except Exception:  # noqa: BLE001 - a foreign config that does not dump: nothing to add
                    pass
        return found

    def redacted(self) -> dict[str, Any]:
        """The trajectory exactly as ``save`` writes it: ``serialize()`` with every secret masked."""

        return redact(self.serialize(), self.known_secrets())

    def save(self, path: str | Path | None = None) -> dict[str, Any]:
        """Write the trajectory to ``path`` (default ``config.output_path``) atomically; return it
        (unredacted; the file has the secrets masked, see ``redacted``)."""

        data = self.serialize()
        path = path or self.config.output_path
        if path:
            write_trajectory(path, data, self.known_secrets())
        return data
