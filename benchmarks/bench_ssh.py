#!/usr/bin/env python3
"""The ssh backend's per-command cost, beside one paramiko channel per command, in one run.

    python benchmarks/bench_ssh.py [--n 200] [--spec FILE] [--fallback] [--failures]

Without ``--spec`` it starts its own OpenSSH server on loopback (tests/ssh/sshd.py: needs sshd,
root or the same user). Methods, interleaved round-robin after a warm-up (``benchlib.round_robin``,
as in bench_roundtrip.py):

- ``fork``: a bare ``bash -c CMD`` from Python (the remote is this host: the floor);
- ``local``: the local backend (the runner without any transport), for reference;
- ``ssh/chan``: the baseline, one new paramiko channel per command (``exec_command``) on an open
  connection of its own (set up like the environment's), stdout and stderr read, exit status
  awaited: what the backend would cost without a runner. sshd starts the login shell for every
  command; the loopback sshd sets SHLVL, so bash reads no ~/.bashrc there (tests/ssh/sshd.py);
- ``ssh``: ``env.execute`` on one ssh environment (``runner: python``: one round trip on one channel);
- ``ssh-exec`` (``--fallback``): ``env.execute`` with the exec fallback (``runner: exec``).

Target checked: the ssh backend's per-command overhead over a bare fork <= 3 ms (median, each
command). ``--failures`` also times how long a command (``sleep 600``) takes to fail with
SandboxDied when the sshd is killed, and when it is frozen (SIGSTOP), with the default keepalives
(5 s x 3). A measurement, not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_roundtrip import COMMANDS, EXPECTED, TARGET_OVERHEAD_MS, backend_method  # noqa: E402
from benchlib import median_ms, p90_ms, round_robin, run_checked  # noqa: E402

from swe_sandbox import SandboxDied, get_environment  # noqa: E402
from swe_sandbox.environments.ssh.link import connect  # noqa: E402


def channel_per_command(spec: dict, stack: contextlib.ExitStack):
    """``ssh/chan``: a new channel for every command, on a connection of its own to the same server."""
    config = get_environment(spec).config
    link = connect(config, config.connect_timeout)
    stack.callback(link.close)

    def call(cmd: str) -> None:
        chan = link.transport.open_session()
        chan.exec_command(cmd)  # sshd runs it with the user's shell, as `ssh host CMD` does
        chan.shutdown_write()
        out = b"".join(iter(lambda: chan.recv(1 << 16), b""))
        err = b"".join(iter(lambda: chan.recv_stderr(1 << 16), b""))
        code = chan.recv_exit_status()
        chan.close()
        if code != 0 or out.decode() != EXPECTED[cmd] or err:
            raise SystemExit(f"ssh/chan failed on {cmd!r}: {code} {out!r} {err!r}")

    return call


def make_methods(spec: dict, fallback: bool, stack: contextlib.ExitStack) -> dict:
    methods = {"fork": lambda cmd: run_checked(["bash", "-c", cmd], EXPECTED[cmd]),
               "local": backend_method("local", stack),
               "ssh/chan": channel_per_command(spec, stack),
               "ssh": backend_method({**spec, "runner": "python"}, stack)}  # a config dict works as a name
    if fallback:
        methods["ssh-exec"] = backend_method({**spec, "runner": "exec"}, stack)
    return methods


def print_table(methods: list[str], samples: dict) -> dict[str, float]:
    """The per-command tables; returns the ssh backend's overhead over fork (ms) per command."""
    overheads = {}
    for cmd in COMMANDS:
        base, chan = median_ms(samples[("fork", cmd)]), median_ms(samples[("ssh/chan", cmd)])
        print(f"\ncommand `{cmd}`")
        print(f"  {'method':10} {'median ms':>10} {'p90 ms':>8} {'overhead vs fork':>17} {'x ssh/chan':>11}")
        for method in methods:
            xs = samples[(method, cmd)]
            med = median_ms(xs)
            print(f"  {method:10} {med:10.2f} {p90_ms(xs):8.2f} {med - base:+17.2f} {med / chan:11.2f}")
        overheads[cmd] = median_ms(samples[("ssh", cmd)]) - base
    return overheads


def time_failure(server, spec: dict, how: str, runner: str) -> float:
    """Seconds until ``sleep 600`` fails with SandboxDied after the sshd is killed / frozen (1 s in)."""
    environment = get_environment({**spec, "runner": runner, "timeout": 900})
    try:
        environment.execute({"command": "true"})
        act = server.kill if how == "kill" else server.freeze
        threading.Timer(1.0, act).start()
        started = time.monotonic()
        try:
            environment.execute({"command": "sleep 600"}, timeout=None)
        except SandboxDied:
            return time.monotonic() - started - 1.0
        raise SystemExit(f"{how}: the command returned instead of failing")
    finally:
        if how == "freeze":
            server.thaw()
        else:
            server.start()
        environment.close()


def print_failures(server, spec: dict) -> None:
    print("\ntime from the failure to SandboxDied, `sleep 600` running (default keepalives 5 s x 3):")
    for runner in ("python", "exec"):
        for how in ("kill", "freeze"):
            print(f"  runner {runner:6} sshd {how:7} {time_failure(server, spec, how, runner):6.2f} s", flush=True)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="timed iterations per method and command (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed iterations first (default 20)")
    parser.add_argument("--spec", help="YAML config of an ssh environment to use instead of a loopback sshd")
    parser.add_argument("--fallback", action="store_true", help="also time the exec fallback (runner: exec)")
    parser.add_argument("--failures", action="store_true", help="also time dead/frozen sshd detection")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        server = None
        if args.spec:
            from swe_sandbox.config import load_environment_config

            spec = load_environment_config(args.spec)
        else:
            from ssh.sshd import Sshd

            server = stack.enter_context(Sshd())
            spec = server.spec()
        print(f"ssh round trip over loopback: n={args.n} per method and command (after {args.warmup} warm-up), "
              f"paramiko {__import__('paramiko').__version__}, {os.cpu_count()} CPUs, load {load()}")
        with contextlib.ExitStack() as methods_stack:
            methods = make_methods(spec, args.fallback, methods_stack)
            calls = {(m, c): functools.partial(fn, c) for c in COMMANDS for m, fn in methods.items()}
            samples, _ = round_robin(calls, args.n, args.warmup)
        overheads = print_table(list(methods), samples)
        verdict = "PASS" if max(overheads.values()) <= TARGET_OVERHEAD_MS else "FAIL"
        print(f"\n{verdict} ssh backend per-command overhead over fork (median): "
              f"{', '.join(f'`{c}` {v:+.2f} ms' for c, v in overheads.items())} (target <= {TARGET_OVERHEAD_MS:g} ms)")
        print(f"load at the end: {load()}")
        if args.failures:
            if server is None:
                print("\n--failures needs the loopback sshd (no --spec)")
            else:
                print_failures(server, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
