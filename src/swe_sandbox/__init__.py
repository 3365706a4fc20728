"""swe-sandbox: run untrusted, model-written shell commands the same way on every backend.

    import swe_sandbox
    with swe_sandbox.get_environment("bwrap", timeout=30) as env:
        result = env.execute({"command": "pytest -q"}, timeout=600)

Importing this package imports no backend SDK and starts nothing.
"""

from swe_sandbox.environments import get_environment
from swe_sandbox.errors import (
    BackendUnavailable,
    ConfigError,
    InterruptAgentFlow,
    ProtocolError,
    SandboxDied,
    SandboxError,
    SandboxStartError,
    Submitted,
    SweSandboxError,
)

__version__ = "0.1.0"
__all__ = [
    "get_environment",
    "BackendUnavailable",
    "ConfigError",
    "InterruptAgentFlow",
    "ProtocolError",
    "SandboxDied",
    "SandboxError",
    "SandboxStartError",
    "Submitted",
    "SweSandboxError",
]
