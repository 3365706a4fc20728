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
"""

from __future__ import annotations

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


#: The exit statuses of ``exec``, as its ``--help`` (and the app's) tells them.
EXIT_CODES_HELP = """\
Exit status of exec: the command's own returncode (0-255); 124 when the command timed out;
125 when the command did not finish for another reason (its returncode was outside 0..255,
e.g. -1); 2 for a usage or config error (the message names the field); 3 when the backend
cannot run on this host; 4 when the sandbox failed (did not start, died or vanished); 130 on
Ctrl-C, 143 on SIGTERM, 129 on SIGHUP (the sandbox is removed first). A command may exit 2, 3 or
4 by itself: use --json, whose "returncode" is authoritative, to tell them apart.
"""
