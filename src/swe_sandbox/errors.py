"""Every exception swe-sandbox raises, in one tree.

    Exception
    ├── SweSandboxError              base of every error below
    │   ├── ConfigError              a bad config value; the message names the field (also a ValueError)
    │   │   └── TaskFileError        a task or predictions file that does not load; names line and field
    │   ├── BackendUnavailable       the backend cannot run on this host (names the cause)
    │   ├── ImageBuildError          ``swe-sandbox image build`` failed; names the step and its log
    │   ├── SandboxError             something went wrong with a running sandbox
    │   │   ├── SandboxStartError    the sandbox (or its runner) did not come up
    │   │   │   └── ImagePullError   its image could not be pulled (``.reason`` says why)
    │   │   ├── SandboxDied          the sandbox died or vanished; not an ordinary non-zero result
    │   │   │   └── ConnectionLost   only the connection to it (ssh) was lost; the next command reconnects
    │   │   ├── ProtocolError        the runner sent something it should not have
    │   │   └── DownloadTooLarge     a download would write more than ``max_download_bytes`` on the host
    │   ├── SetupFailed              a batch task's ``setup_command`` exited non-zero
    │   ├── EvaluationStepFailed     a grading step failed once the patch was in the sandbox: the patch's outcome
    │   └── ModelError               the model provider failed for good (after retries, or not retryable)
    └── InterruptAgentFlow           control flow, not failure; ``.messages`` go to the history
        ├── FormatError              the model's reply could not be parsed into actions
        ├── LimitsExceeded           step, cost or call limit reached
        ├── TimeExceeded             wall-time limit reached
        └── Submitted                the submission sentinel was printed; ``.submission`` holds the text
    BaseException
    └── KeyboardInterrupt
        ├── Terminated               SIGTERM / SIGHUP received by the command line (see ``swe_sandbox.cli.signals``)
        └── BatchAborted             a batch stopped without waiting for its rollouts (second Ctrl-C, or grace over)

Every class in this tree is defined here and exported by ``swe_sandbox`` (``swe_sandbox.__all__``);
``tests/unit/test_errors.py`` checks the drawing against the classes.

A command that fails (non-zero exit, timeout, missing ``cwd``) is *not* an exception: it is a
result dict with ``returncode`` and ``exception_info`` set (DESIGN.md §1). Exceptions are for the
cases where there is no trustworthy result, so an agent stops instead of looping.
"""

from __future__ import annotations

from typing import Any


class SweSandboxError(Exception):
    """Base class of every error swe-sandbox raises."""


class ConfigError(SweSandboxError, ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""


class BackendUnavailable(SweSandboxError):
    """The backend cannot run on this host (binary missing, namespaces disabled, engine down)."""


class SandboxError(SweSandboxError):
    """Base class for failures of a running sandbox."""


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


class EvaluationStepFailed(SweSandboxError):
    """A step of an evaluation (writing the patch, resetting a protected path) failed in the
    sandbox once the graded patch was there: the patch's outcome (no verdict of resolved, never
    retried), not the infrastructure's (``swe_sandbox.batch.evaluation``)."""


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


class ModelError(SweSandboxError):
    """The model provider failed for good: not retryable (auth, not found, bad request, context
    window) or still failing when the retry budget ran out. The message says which."""


class InterruptAgentFlow(Exception):
    """Base class for exceptions that interrupt an agent's step on purpose.

    Attributes:
        messages (list[dict]): messages to append to the history (may be empty).
    """

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
