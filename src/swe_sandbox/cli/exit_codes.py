"""The exit statuses of every ``swe-sandbox`` command, in one table.

============  =========================  ==============================================================
status        constant                   meaning
============  =========================  ==============================================================
0             ``EXIT_OK``                done: ``exec``'s command exited 0, ``run`` submitted, every
                                         ``batch``/``eval`` instance is done, ``check`` passed, ...
1             ``EXIT_FAILED``            the work did not all succeed: ``check`` found a failing
                                         backend, ``run``/``demo`` ended without a (verified)
                                         submission, ``batch``/``eval`` left instances not done,
                                         ``gc``/``image build``/``image pull`` failed for some
2             ``EXIT_USAGE``             a usage, config or task-file error (also click's own status
                                         for a usage error); ``report`` of a path that is no directory
3             ``EXIT_BACKEND_UNAVAILABLE``  the backend cannot run on this host
4             ``EXIT_SANDBOX_FAILED``    the sandbox did not start, died or vanished (``exec``: also
                                         any other swe-sandbox error)
0-255         (the command's own)        ``exec``: the command's returncode
124           ``EXIT_TIMEOUT``           ``exec``: the command timed out (as coreutils ``timeout(1)``)
125           ``EXIT_UNFINISHED``        ``exec``: the returncode was outside 0..255 without a timeout
                                         (e.g. -1: the sandbox was closed mid-command)
130           ``EXIT_INTERRUPTED``       Ctrl-C (the sandbox is removed, the trajectory saved first)
128 + N       ``signal_exit(N)``         signal N turned into ``errors.Terminated``: 143 SIGTERM,
                                         129 SIGHUP (``swe_sandbox.cli.signals``)
============  =========================  ==============================================================

An error's status comes from its ``errors.Outcome`` alone (``exit_for``, ``exit_for_error``):
``config`` 2, ``backend`` 3, ``sandbox`` 4, ``interrupted`` 130 (128 + N for a signal), any other
outcome the command's own (``run``: 1; ``exec``: 4). ``run`` exits 0 on ``Submitted``, else with
the status of its ending's outcome (``run_exit``).
"""

from __future__ import annotations

from swe_sandbox.errors import Outcome, Terminated, outcome_of

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BACKEND_UNAVAILABLE = 3
EXIT_SANDBOX_FAILED = 4
EXIT_TIMEOUT = 124
EXIT_UNFINISHED = 125
EXIT_INTERRUPTED = 130
#: A process ended by (or, here, exiting for) signal N exits 128 + N, as shells report it.
EXIT_SIGNAL_BASE = 128


def signal_exit(signum: int) -> int:
    """The exit status for signal number ``signum`` (e.g. 15, SIGTERM: 143)."""
    return EXIT_SIGNAL_BASE + int(signum)


#: The exit status of each outcome that has one of its own; the others exit with the command's own.
OUTCOME_EXITS: dict[Outcome, int] = {
    Outcome.CONFIG: EXIT_USAGE,
    Outcome.BACKEND: EXIT_BACKEND_UNAVAILABLE,
    Outcome.SANDBOX: EXIT_SANDBOX_FAILED,
    Outcome.INTERRUPTED: EXIT_INTERRUPTED,
}


def exit_for(outcome: Outcome, other: int = EXIT_FAILED) -> int:
    """The exit status of an ending whose outcome is ``outcome`` (``OUTCOME_EXITS``).

    Args:
        outcome (Outcome): the ending's outcome.
        other (int): the status of an outcome without one of its own (``agent``, ``instance``,
            ``infrastructure``); default ``EXIT_FAILED`` (1).
    """
    return OUTCOME_EXITS.get(outcome, other)


def exit_for_error(exc: BaseException, other: int = EXIT_FAILED) -> int:
    """The exit status for ``exc``: 128 + N for a signal (``errors.Terminated``), else
    ``exit_for(errors.outcome_of(exc), other)``."""
    if isinstance(exc, Terminated):
        return exc.exit_code
    return exit_for(outcome_of(exc), other)


def run_exit(submitted: bool, outcome: Outcome | None) -> int:
    """``run``'s (and ``demo``'s replayed run's) exit status: 0 when it submitted, else its
    ending's (``exit_for``; 1 for the agent's own endings, a limit or repeated format errors)."""
    if submitted:
        return EXIT_OK
    return exit_for(outcome or Outcome.AGENT)


#: The exit statuses of ``exec``, as its ``--help`` (and the app's) tells them.
EXIT_CODES_HELP = """\
Exit status of exec: the command's own returncode (0-255); 124 when the command timed out;
125 when the command did not finish for another reason (its returncode was outside 0..255,
e.g. -1); 2 for a usage or config error (the message names the field); 3 when the backend
cannot run on this host; 4 when the sandbox failed (did not start, died or vanished); 130 on
Ctrl-C, 143 on SIGTERM, 129 on SIGHUP (the sandbox is removed first). A command may exit 2, 3 or
4 by itself: use --json, whose "returncode" is authoritative, to tell them apart.
"""

#: Key of the root context's ``obj`` that ``app.main`` sets: the process is the program itself (not
#: ``CliRunner``, not a caller embedding the app), so a finished ``exec`` may end it at once
#: (``guard.exit_at_once``).
EXIT_AT_ONCE = "exit_at_once"
