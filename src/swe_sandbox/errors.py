"""Every exception swe-sandbox raises, in one tree.

    Exception                                                                                      outcome
    ├── SweSandboxError              base of every error below                                     infrastructure
    │   ├── ConfigError              a bad config value; the message names the field (a ValueError) config
    │   │   └── TaskFileError        a task or predictions file that does not load; line and field config
    │   ├── BackendUnavailable       the backend cannot run on this host (names the cause)         backend
    │   ├── ImageBuildError          ``swe-sandbox image build`` failed; names the step and its log infrastructure
    │   ├── SandboxError             something went wrong with a running sandbox                   sandbox
    │   │   ├── SandboxStartError    the sandbox (or its runner) did not come up                   sandbox
    │   │   │   └── ImagePullError   its image could not be pulled (``.reason`` says why)          sandbox
    │   │   ├── SandboxDied          the sandbox died or vanished; not an ordinary non-zero result sandbox
    │   │   │   └── ConnectionLost   only the connection (ssh) was lost; the next command reconnects sandbox
    │   │   ├── ProtocolError        the runner sent something it should not have                  sandbox
    │   │   ├── DownloadTooLarge     a download would write more than ``max_download_bytes``       sandbox
    │   │   ├── SnapshotError        a snapshot could not be taken, forked or used                 sandbox
    │   │   └── ResetFailed          ``reset(snap)`` found drift; the sandbox was closed           sandbox
    │   ├── SetupFailed              a batch task's ``setup_command`` exited non-zero              instance
    │   ├── EvaluationStepFailed     a grading step failed once the patch was in the sandbox       agent
    │   └── ModelError               the model provider failed for good (``gave_up``: see below)   instance
    └── InterruptAgentFlow           control flow, not failure; ``.messages`` go to the history    agent
        ├── FormatError              the model's reply could not be parsed into actions            agent
        ├── LimitsExceeded           step, cost or call limit reached                              agent
        ├── TimeExceeded             wall-time limit reached                                       agent
        └── Submitted                the submission sentinel was printed; ``.submission``          agent
    BaseException
    └── KeyboardInterrupt                                                                          interrupted
        ├── Terminated               SIGTERM / SIGHUP received by the command line (``cli.signals``) interrupted
        └── BatchAborted             a batch stopped without waiting (second Ctrl-C, grace over)   interrupted

Every class in this tree is defined here and exported by ``swe_sandbox`` (``swe_sandbox.__all__``);
``tests/unit/test_errors.py`` checks the drawing against the classes, and the outcome column
against ``outcome_of``.

The outcome column is what the error means for a run (``Outcome``): each class declares it as
its ``outcome`` attribute (inherited along the MRO), and ``outcome_of`` maps any exception to one
(any other ``Exception``: ``infrastructure``; any other ``KeyboardInterrupt``: ``interrupted``).
Resume (is an attempt done or run again?), the reports and every exit status of the command line
read it there: no class name or message text is compared. A ``ModelError`` that gave up after its
retries (``gave_up``) is ``infrastructure``, one whose retry wait was interrupted is ``interrupted``.

A command that fails (non-zero exit, timeout, missing ``cwd``) is *not* an exception: it is a
result dict with ``returncode`` and ``exception_info`` set (DESIGN.md §1). Exceptions are for the
cases where there is no trustworthy result, so an agent stops instead of looping.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar


class Outcome(StrEnum):
    """What an ending means for a run (the outcome column of the tree above).

    ``done`` says whether a batch attempt that ended so is final (``agent``, ``instance``,
    ``config``) or is run again (``backend``, ``sandbox``, ``infrastructure``; ``interrupted`` is
    not an attempt at all). ``swe_sandbox.cli.exit_codes.exit_for`` gives each its exit status.
    """

    AGENT = "agent"
    """The agent's own ending: submitted, a limit, repeated format errors (done)."""
    INSTANCE = "instance"
    """The instance or its model failed for good: setup failed, a model error not retried (done)."""
    CONFIG = "config"
    """A config, usage or task-file error (done: running it again cannot help)."""
    BACKEND = "backend"
    """Infrastructure: the backend cannot run on this host (run again)."""
    SANDBOX = "sandbox"
    """Infrastructure: the sandbox did not start, died or vanished, or broke the protocol (run again)."""
    INFRASTRUCTURE = "infrastructure"
    """Any other failure outside the agent: the model gave up after retries, a bug (run again)."""
    INTERRUPTED = "interrupted"
    """Ctrl-C, a termination signal, a batch cancelled: not an attempt (run again)."""

    @property
    def done(self) -> bool:
        """Whether an attempt that ended so is final (never run again)."""
        return self in (Outcome.AGENT, Outcome.INSTANCE, Outcome.CONFIG)


def outcome_of(exc: BaseException) -> Outcome:
    """The outcome of ``exc``: its ``outcome`` attribute (the class's, along the MRO, or the
    instance's own, e.g. ``ModelError(..., gave_up=True)``) for the classes of this module;
    ``interrupted`` for any other ``KeyboardInterrupt``; ``infrastructure`` for anything else.

    Args:
        exc (BaseException): any exception.

    Returns:
        Outcome: never raises.
    """
    if isinstance(exc, (SweSandboxError, InterruptAgentFlow)):
        return exc.outcome
    if isinstance(exc, KeyboardInterrupt):
        return Outcome.INTERRUPTED
    return Outcome.INFRASTRUCTURE


class SweSandboxError(Exception):
    """Base class of every error swe-sandbox raises.

    Attributes:
        outcome (Outcome): what the error means for a run (class attribute; see ``outcome_of``).
    """

    outcome: Outcome = Outcome.INFRASTRUCTURE


class ConfigError(SweSandboxError, ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""

    outcome = Outcome.CONFIG


class BackendUnavailable(SweSandboxError):
    """The backend cannot run on this host (binary missing, namespaces disabled, engine down)."""

    outcome = Outcome.BACKEND


class SandboxError(SweSandboxError):
    """Base class for failures of a running sandbox."""

    outcome = Outcome.SANDBOX


class SandboxStartError(SandboxError):
    """The sandbox or its runner failed to start."""


class ImagePullError(SandboxStartError):
    """A container image could not be pulled, or is absent where no pull is allowed.

    The message names the engine, the image and the cause (``swe_sandbox.environments.container.pull_errors``
    writes it). Nothing of a failed pull is left: no container, no image reference.

    Attributes:
        image (str): the image reference, as the config names it.
        reason (str): one of ``REASONS``: ``not_found`` (no such image in the registry),
            ``unauthorized`` (the registry refused the engine's credentials), ``unreachable`` (the
            registry did not answer), ``timeout`` (``pull_timeout`` passed), ``never`` (absent and
            ``image_pull: never``), ``interrupted`` (stopped by Ctrl-C: ``pulling.stop_all``),
            ``failed`` (anything else; the engine's words say what).
    """

    REASONS = ("not_found", "unauthorized", "unreachable", "timeout", "never", "interrupted", "failed")

    def __init__(self, message: str, image: str = "", reason: str = "failed"):
        super().__init__(message)
        self.image, self.reason = image, reason

    def __reduce__(self):  # picklable (batch workers send errors back)
        return type(self), (str(self), self.image, self.reason)


class SandboxDied(SandboxError):
    """The sandbox died or vanished; no further command can run in it."""


class ConnectionLost(SandboxDied):
    """The connection to the sandbox (``ssh``) was lost during a command, not the sandbox itself.

    The command's result is lost as with ``SandboxDied``, but the environment stays open: the
    next command reconnects (same workspace) and first ends what the lost connection's commands
    left.
    """


class ImageBuildError(SweSandboxError):
    """An image could not be built; the message says which step failed and where its log is."""


class TaskFileError(ConfigError):
    """A task (or predictions) file that does not load; the message names the line and field."""


class SetupFailed(SweSandboxError):
    """The task's ``setup_command`` exited non-zero: the instance's error, not the agent's."""

    outcome = Outcome.INSTANCE


class EvaluationStepFailed(SweSandboxError):
    """A step of an evaluation (writing the patch, resetting a protected path) failed in the
    sandbox once the graded patch was there: the patch's outcome (no verdict of resolved, never
    retried), not the infrastructure's (``swe_sandbox.batch.evaluation``)."""

    outcome = Outcome.AGENT


class ProtocolError(SandboxError):
    """The runner answered with something that does not follow the framed protocol."""


class DownloadTooLarge(SandboxError):
    """``download()`` would write more than the config's ``max_download_bytes`` on the host.

    Sizes are apparent sizes (a sparse file counts its full length), summed over the whole tree,
    and the bytes actually written count too (a file growing while it is copied). The sandbox is
    still usable; nothing of the download is left on the host.

    Attributes:
        limit (int): the limit, in bytes.
        path (str): the entry that went past it (the download's source, or a path inside it).
        source (str): the download's source, as the sandbox names it.
    """

    def __init__(self, limit: int, path: str, source: str = ""):
        source = source or path
        where = source if path == source else f"{source} (at {path})"
        super().__init__(f"download of {where}: more than environment.max_download_bytes = {limit} bytes would "
                         f"be written on the host (apparent sizes, a sparse file counts its full length; "
                         f"raise the limit with -c environment.max_download_bytes=N)")
        self.limit, self.path, self.source = limit, path, source

    def __reduce__(self):  # picklable (batch workers send errors back)
        return type(self), (self.limit, self.path, self.source)


class SnapshotError(SandboxError):
    """A snapshot could not be taken, a sandbox could not be started from it, or it was removed."""


class ResetFailed(SandboxError):
    """``env.reset(snap)`` could not prove the sandbox back in the snapshot's state.

    The environment was closed (never silently reused): start a fresh one from the snapshot
    (``snap.environment()``).

    Attributes:
        drift (list[str]): what differed, one readable line each (a process that survived, a
            path whose content, type or mode is not the snapshot's, a change the reset cannot undo).
    """

    def __init__(self, drift: list[str]):
        self.drift = list(drift)
        shown = "; ".join(self.drift[:5]) + (f"; and {len(self.drift) - 5} more" if len(self.drift) > 5 else "")
        super().__init__(f"the sandbox did not reset to its snapshot ({shown}); it was closed: "
                         "start a fresh one from the snapshot")

    def __reduce__(self):  # picklable (batch workers send errors back)
        return type(self), (self.drift,)


class ModelError(SweSandboxError):
    """The model provider failed for good: not retryable (auth, not found, bad request, context
    window) or still failing when the retry budget ran out. The message says which.

    Args:
        message (str): what failed (the provider's class, status and words).
        gave_up (bool): the call was retryable and still failed when the retry budget ran out:
            the provider was unreachable, an infrastructure failure (default False).
        interrupted (bool): a wait between attempts was cut short (the batch was cancelled)
            (default False).

    Attributes:
        gave_up (bool), interrupted (bool): as given.
        outcome (Outcome): ``interrupted``, else ``infrastructure`` when it gave up, else ``instance``.
    """

    outcome: Outcome = Outcome.INSTANCE

    def __init__(self, message: str = "", *, gave_up: bool = False, interrupted: bool = False):
        super().__init__(message)
        self.gave_up, self.interrupted = gave_up, interrupted
        if interrupted:
            self.outcome = Outcome.INTERRUPTED
        elif gave_up:
            self.outcome = Outcome.INFRASTRUCTURE

    def __reduce__(self):  # picklable (batch workers send errors back), flags kept
        return _model_error, (type(self), str(self), self.gave_up, self.interrupted)


class InterruptAgentFlow(Exception):
    """Base class for exceptions that interrupt an agent's step on purpose.

    Attributes:
        messages (list[dict]): messages to append to the history (may be empty).
        outcome (Outcome): ``agent`` (class attribute).
    """

    outcome: ClassVar[Outcome] = Outcome.AGENT

    def __init__(self, *messages: dict[str, Any]):
        super().__init__(*messages)
        self.messages = list(messages)


class FormatError(InterruptAgentFlow):
    """The model's reply could not be turned into actions; ``messages`` tell the model why."""


class LimitsExceeded(InterruptAgentFlow):
    """A step, cost or model-call limit was reached."""


class TimeExceeded(InterruptAgentFlow):
    """The agent's wall-time limit was reached."""


class Submitted(InterruptAgentFlow):
    """The command printed the submission sentinel and exited 0.

    Attributes:
        submission (str): everything after the sentinel line, byte for byte.
        result (dict): the full result dict of the command that submitted.
    """

    def __init__(self, submission: str, result: dict[str, Any] | None = None):
        super().__init__()
        self.args = (submission,)
        self.submission = submission
        self.result = result or {}


class Terminated(KeyboardInterrupt):
    """The process got a termination signal (SIGTERM, SIGHUP) while the command line ran.

    A ``KeyboardInterrupt`` on purpose: every path that cleans up after Ctrl-C (closing the
    sandbox, saving the trajectory) cleans up after these signals too.

    Attributes:
        signum (int): the signal number.
        signal_name (str): its name, e.g. ``"SIGTERM"``.
        exit_code (int): ``128 + signum``, the shell's convention for "killed by signal N".
    """

    def __init__(self, signum: int):
        import signal

        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        super().__init__(f"terminated by {name}")
        self.signum = signum
        self.signal_name = name
        self.exit_code = 128 + signum


class BatchAborted(KeyboardInterrupt):
    """A second Ctrl-C while the first one's cleanup ran, or rollouts still busy ``CANCEL_GRACE_S``
    (``swe_sandbox.batch.driver``) after the first: the batch stops without waiting for them."""


def _model_error(cls: type[ModelError], message: str, gave_up: bool, interrupted: bool) -> ModelError:
    return cls(message, gave_up=gave_up, interrupted=interrupted)
