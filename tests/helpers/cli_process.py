"""The ``swe-sandbox`` command line as a process: started, and known to be running a sandbox command."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from swe_sandbox.testing.kit import host_processes_with


def start_cli_until_running(argv: list[str], marker: str, within: float = 60.0) -> subprocess.Popen:
    """Start ``swe-sandbox`` (``argv``) and return its ``Popen`` once a sandbox process whose command
    line holds ``marker`` runs (the CLI's own argv, which holds it too, does not count).

    SIGINT is reset to its default in the child: a test run started as a background job (``cmd &``
    in a script) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
    Fails the test when the command exits first, or after ``within`` seconds.
    """
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + within
    while not [p for p in host_processes_with(marker) if "swe_sandbox" not in p]:
        if time.monotonic() >= deadline or proc.poll() is not None:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the command never started (exit {proc.returncode}): {out}{err}")
        time.sleep(0.05)
    return proc
