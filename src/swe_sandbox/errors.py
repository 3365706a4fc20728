"""Every exception swe-sandbox raises, in one tree.

    Exception
    ├── SweSandboxError              base of every error below
    │   ├── ConfigError              a bad config value; the message names the field
    │   ├── BackendUnavailable       the backend cannot run on this host (names the cause)
    │   └── SandboxError             something went wrong with a running sandbox
    │       ├── SandboxStartError    the sandbox (or its runner) did not come up
    │       ├── SandboxDied          the sandbox died or vanished; not an ordinary non-zero result
    │       └── ProtocolError        the runner sent something it should not have
    └── InterruptAgentFlow           control flow, not failure
        └── Submitted                the submission sentinel was printed; ``.submission`` holds the text

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


class SandboxDied(SandboxError):
    """The sandbox died or vanished; no further command can run in it."""


class ProtocolError(SandboxError):
    """The runner answered with something that does not follow the framed protocol."""


class InterruptAgentFlow(Exception):
    """Base class for exceptions that end an agent's run on purpose."""


class Submitted(InterruptAgentFlow):
    """The command printed the submission sentinel and exited 0.

    Attributes:
        submission (str): everything after the sentinel line, byte for byte.
        result (dict): the full result dict of the command that submitted.
    """

    def __init__(self, submission: str, result: dict[str, Any] | None = None):
        super().__init__(submission)
        self.submission = submission
        self.result = result or {}
