"""swe-sandbox's errors as one ``swe-sandbox: KIND: MESSAGE`` line on stderr and an exit status.

One translation for every command (``exit_codes`` has the table): ``ConfigError`` is 2,
``BackendUnavailable`` 3, a ``SandboxError`` 4; any other ``SweSandboxError`` is the command's own
choice (``exec``: 4, the agent's commands: 1).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer

from swe_sandbox.cli.exit_codes import EXIT_BACKEND_UNAVAILABLE, EXIT_FAILED, EXIT_SANDBOX_FAILED, EXIT_USAGE
from swe_sandbox.cli.signals import echo_err, interrupt_exit


def one_line(message: str) -> str:
    """Fold a (possibly multi-line) error message into one line."""
    parts = [p.strip() for p in str(message).splitlines() if p.strip()]
    if not parts:
        return ""
    out = parts[0]
    for part in parts[1:]:
        out += (" " if out.endswith(":") else "; ") + part
    return out


def fail(code: int, kind: str, message: str) -> None:
    """Print ``swe-sandbox: KIND: MESSAGE`` on stderr (one line; control characters escaped on a
    terminal: a message may quote the sandbox) and exit with ``code``.

    Raises:
        typer.Exit: always, with ``code``.
    """
    from swe_sandbox.terminal import for_stream

    text = one_line(message)
    if text.lower().startswith(kind + ":"):
        text = text[len(kind) + 1 :].strip()
    typer.echo(for_stream(f"swe-sandbox: {kind}: {text}", sys.stderr), err=True)
    raise typer.Exit(code)


def classify(exc: BaseException, other: int) -> tuple[int, str, str]:
    """``(exit status, kind, message)`` for a swe-sandbox error; ``other`` is the status of an
    error that is neither a config error, an unavailable backend nor a sandbox failure."""
    from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxError

    if isinstance(exc, ConfigError):
        return EXIT_USAGE, "config error", str(exc).removeprefix("invalid config:")
    if isinstance(exc, BackendUnavailable):
        return EXIT_BACKEND_UNAVAILABLE, "backend unavailable", str(exc)
    if isinstance(exc, SandboxError):
        return EXIT_SANDBOX_FAILED, "sandbox failed", f"{type(exc).__name__}: {exc}"
    return other, "error", f"{type(exc).__name__}: {exc}"


def run_guarded(body: Callable[[], int]) -> int:
    """Run ``body`` (``exec``, ``check``); an error or Ctrl-C becomes one stderr line and its exit status.

    Returns:
        int: ``body``'s exit status.

    Raises:
        typer.Exit: on a swe-sandbox error (2, 3 or 4) and on Ctrl-C / SIGTERM / SIGHUP (130, 143, 129).
    """
    from swe_sandbox.errors import SweSandboxError

    try:
        return body()
    except SweSandboxError as exc:
        fail(*classify(exc, EXIT_SANDBOX_FAILED))
    except KeyboardInterrupt as exc:
        code, what = interrupt_exit(exc)
        echo_err(f"swe-sandbox: {what}")
        raise typer.Exit(code) from None
    raise AssertionError("unreachable")  # pragma: no cover


def guarded(body: Callable[[], int]) -> int:
    """Run ``body`` (``run``, ``demo``, ``batch``, ``eval``, ``image pull``); a swe-sandbox error
    becomes one stderr line (secrets masked) and its exit status (2, 3, 4, else 1).

    Returns:
        int: ``body``'s exit status, or the error's.
    """
    from swe_sandbox.errors import SweSandboxError

    try:
        return body()
    except SweSandboxError as exc:
        code, kind, message = classify(exc, EXIT_FAILED)
    from swe_sandbox.redact import redact
    from swe_sandbox.terminal import for_stream

    text = " ".join(line.strip() for line in redact(str(message)).splitlines() if line.strip())
    typer.echo(for_stream(f"swe-sandbox: {kind}: {text}", sys.stderr), err=True)
    return code
