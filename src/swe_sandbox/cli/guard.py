"""The one guard of the command line: swe-sandbox's errors and interruptions as one stderr line
(``swe-sandbox: KIND: MESSAGE``, ``swe-sandbox: interrupted``) and an exit status.

One translation for every command, from the error's ``errors.Outcome`` (``exit_codes`` has the
table): ``config`` is 2, ``backend`` 3, ``sandbox`` 4; any other ``SweSandboxError`` is the command's
own choice (``exec``: 4, the agent's commands: 1). Ctrl-C is 130, a signal 128 + N
(``interrupted``); a second Ctrl-C of a batch (``errors.BatchAborted``) exits at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import typer

from swe_sandbox.cli.exit_codes import EXIT_FAILED, EXIT_SANDBOX_FAILED, exit_for
from swe_sandbox.cli.signals import echo_err, interrupt_exit
from swe_sandbox.errors import BatchAborted, Outcome, SweSandboxError, outcome_of
from swe_sandbox.terminal import one_line

#: The word of each outcome in the stderr line; any other outcome's is ``error``.
KINDS: dict[Outcome, str] = {
    Outcome.CONFIG: "config error",
    Outcome.BACKEND: "backend unavailable",
    Outcome.SANDBOX: "sandbox failed",
}


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
    """``(exit status, kind, message)`` for a swe-sandbox error, from its outcome (``KINDS``,
    ``exit_codes.exit_for``); ``other`` is the status of an error whose outcome has none of its own."""
    outcome = outcome_of(exc)
    if outcome is Outcome.CONFIG:
        return exit_for(outcome), KINDS[outcome], str(exc).removeprefix("invalid config:")
    if outcome is Outcome.BACKEND:
        return exit_for(outcome), KINDS[outcome], str(exc)
    if outcome in KINDS:
        return exit_for(outcome), KINDS[outcome], f"{type(exc).__name__}: {exc}"
    return other, "error", f"{type(exc).__name__}: {exc}"


def interrupted(exc: KeyboardInterrupt, note: str = "") -> int:
    """Say ``swe-sandbox: interrupted`` (or ``terminated by SIGTERM``) plus ``note`` on stderr.

    Returns:
        int: 130, or 128 + N for a signal (``signals.interrupt_exit``).
    """
    code, what = interrupt_exit(exc)
    echo_err(f"swe-sandbox: {what}{note}")
    return code


def guarded(body: Callable[[], int], *, other: int = EXIT_FAILED, folded: bool = False,
            on_interrupt: str | None = None) -> int:
    """Run ``body``; a swe-sandbox error or an interruption becomes one stderr line and its exit status.

    Args:
        body: the command; returns its exit status.
        other (int): the status of an error whose outcome has none of its own (default 1; ``exec``: 4).
        folded (bool): fold the message as ``fail`` does (``exec``, ``check``); default False:
            secrets masked and lines joined with spaces (the agent's and the batch's commands).
        on_interrupt (str | None): say this after ``interrupted`` on Ctrl-C (e.g. ``"; finished
            instances are saved"``); None (default): Ctrl-C is not caught here, unless ``folded``.

    Returns:
        int: ``body``'s exit status, or the error's.

    Raises:
        typer.Exit: with ``folded``, on an error (``fail``).
        KeyboardInterrupt: when ``on_interrupt`` is None and not ``folded``.
    """
    catch: tuple[type[BaseException], ...] = (KeyboardInterrupt,) if folded or on_interrupt is not None else ()
    try:
        return body()
    except SweSandboxError as exc:
        code, kind, message = classify(exc, other)
    except BatchAborted as exc:  # a second Ctrl-C of a batch: exit now, without waiting for its threads
        if not catch:
            raise
        code, _ = interrupt_exit(exc)
        echo_err(f"swe-sandbox: {exc}: exiting now; finished instances are saved, the rest run again on resume")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(code)
    except catch as exc:
        return interrupted(exc, on_interrupt or "")  # type: ignore[arg-type]
    if folded:
        fail(code, kind, message)
    from swe_sandbox.redact import redact
    from swe_sandbox.terminal import for_stream

    text = " ".join(line.strip() for line in redact(str(message)).splitlines() if line.strip())
    typer.echo(for_stream(f"swe-sandbox: {kind}: {text}", sys.stderr), err=True)
    return code


def run_guarded(body: Callable[[], int]) -> int:
    """``guarded`` for ``exec`` and ``check``: an error is status 4 unless its outcome has its own,
    its message folded (``fail``); Ctrl-C / SIGTERM / SIGHUP say so (130, 143, 129)."""
    return guarded(body, other=EXIT_SANDBOX_FAILED, folded=True)


def exit_at_once(status: int) -> None:
    """End a finished one-shot ``exec`` now: flush stdout and stderr, run the ``atexit`` handlers
    (logging's flush among them), then ``os._exit``, skipping the interpreter's teardown of every
    module and object: ~13% of ``exec --env bwrap -- true`` (~60 ms measured here). Called only
    when the sandbox is closed and nothing else runs, and only in the program itself."""
    import atexit

    try:
        atexit._run_exitfuncs()  # CPython's own exit runs these first; they have no public name
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)
