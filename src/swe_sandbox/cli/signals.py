"""Termination signals as exceptions, so the command line cleans up after them as after Ctrl-C.

By default SIGTERM and SIGHUP kill Python at once: no ``finally`` runs, so a sandbox's temporary
workspace stays behind and a run's trajectory is not saved with its exit status. Inside
``terminate_on_signals()`` they raise ``swe_sandbox.errors.Terminated`` (a ``KeyboardInterrupt``)
instead; the previous handlers are restored on the way out.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from swe_sandbox.cli.exit_codes import EXIT_INTERRUPTED
from swe_sandbox.errors import Terminated

#: Signals turned into ``Terminated`` (those that exist on this platform).
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def terminate_on_signals(signals: tuple[int, ...] = SIGNALS) -> Iterator[None]:
    """Raise ``Terminated`` in the main thread on the first of ``signals``; restore the old handlers after.

    Only the first signal raises: later ones are ignored, so they cannot break off the cleanup
    the first one started (SIGKILL still ends the process). Outside the main thread (where
    Python cannot install handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        raise Terminated(signum)

    previous = {}
    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, handler)
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)


def interrupt_exit(exc: BaseException) -> tuple[int, str]:
    """Exit status and word for an interruption: 130 ``interrupted`` (Ctrl-C), or 128+N
    ``terminated by SIGTERM`` for a signal turned into ``Terminated``."""
    if isinstance(exc, Terminated):
        return exc.exit_code, str(exc)
    return EXIT_INTERRUPTED, "interrupted"


def echo_err(text: str) -> None:
    """One line on stderr; a stderr that is gone (SIGHUP: the terminal closed) is not an error."""
    import sys

    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
