"""swe-sandbox: run untrusted, model-written shell commands the same way on every backend.

    import swe_sandbox
    with swe_sandbox.get_environment("bwrap", timeout=30) as env:
        result = env.execute({"command": "pytest -q"}, timeout=600)

Importing this package imports no backend SDK and starts nothing; ``get_environment`` (and with it
pydantic and the config models) loads on first use, so ``swe-sandbox --help`` starts fast.
"""

from typing import TYPE_CHECKING, Any

from swe_sandbox.errors import (
    BackendUnavailable,
    BatchAborted,
    ConfigError,
    ConnectionLost,
    DownloadTooLarge,
    EvaluationStepFailed,
    FormatError,
    ImageBuildError,
    ImagePullError,
    InterruptAgentFlow,
    LimitsExceeded,
    ModelError,
    ProtocolError,
    ResetFailed,
    SandboxDied,
    SandboxError,
    SandboxStartError,
    SetupFailed,
    SnapshotError,
    Submitted,
    SweSandboxError,
    TaskFileError,
    Terminated,
    TimeExceeded,
)
from swe_sandbox.version import __version__ as __version__

__all__ = [
    "get_environment",
    "BackendUnavailable",
    "BatchAborted",
    "ConfigError",
    "ConnectionLost",
    "DownloadTooLarge",
    "FormatError",
    "ImageBuildError",
    "ImagePullError",
    "InterruptAgentFlow",
    "LimitsExceeded",
    "ModelError",
    "ProtocolError",
    "ResetFailed",
    "SandboxDied",
    "SandboxError",
    "SandboxStartError",
    "SetupFailed",
    "SnapshotError",
    "EvaluationStepFailed",
    "Submitted",
    "SweSandboxError",
    "TaskFileError",
    "Terminated",
    "TimeExceeded",
]

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.environments import get_environment


def __getattr__(name: str) -> Any:
    """PEP 562: load the environment registry (pydantic, config models) only when it is used."""
    if name == "get_environment":
        from swe_sandbox.environments import get_environment

        globals()["get_environment"] = get_environment
        return get_environment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "get_environment"})
