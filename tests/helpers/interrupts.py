"""Ctrl-C as a terminal sends it: a command started in its own process group, interrupted once it
is ready, and how long it then took to exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Interrupted:
    """How an interrupted command ended."""

    returncode: int
    stdout: str
    stderr: str
    exit_s: float
    """Seconds from the SIGINT to its exit."""


def interrupt_when(args: list[str], ready: Callable[[], bool], *, within: float = 120, settle: float = 0.0,
                   wait: float = 60) -> Interrupted:
    """Run ``python -m swe_sandbox ARGS`` in a new process group; once ``ready()`` (polled every
    0.05 s, at most ``within`` seconds) and ``settle`` seconds more (only where nothing can be
    polled), send SIGINT to the group and wait (at most ``wait`` s) for the exit. The group is
    SIGKILLed whatever happens."""
    proc = subprocess.Popen([sys.executable, "-m", "swe_sandbox", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + within
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None, "never ready: " + proc.stderr.read()
            time.sleep(0.05)
        time.sleep(settle)
        interrupted = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=wait)
        return Interrupted(proc.returncode, stdout, stderr, time.monotonic() - interrupted)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
