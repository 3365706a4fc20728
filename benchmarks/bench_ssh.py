#!/usr/bin/env python3
"""The ssh backend's per-command cost, beside one paramiko channel per command, in one run.

    python benchmarks/bench_ssh.py [--n 200] [--spec FILE] [--fallback] [--failures]

Without ``--spec`` it starts its own OpenSSH server on loopback (tests/ssh/sshd.py: needs sshd,
root or the same user). Methods, interleaved round-robin after a warm-up as in bench_roundtrip.py:

- ``fork``: a bare ``bash -c CMD`` from Python (the remote is this host: the floor);
- ``ssh/chan``: one new paramiko channel per command (``exec_command``) on one open connection,
  stdout and stderr read, exit status awaited: what the backend would cost without a runner
  (sshd then starts the login shell for every command, startup files included);
- ``ssh``: ``env.execute`` on one ssh environment (runner mode: one round trip on one channel);
- ``ssh-fallback`` (``--fallback``): ``env.execute`` in exec-fallback mode.

Target checked: the ssh backend's per-command overhead over a bare fork <= 3 ms (median).
``--failures`` also times how long a command (``sleep 600``) takes to fail with SandboxDied when
the sshd is killed, and when it is frozen (SIGSTOP) with the default keepalives (5 s x 3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_roundtrip import COMMANDS, EXPECTED, TARGET_OVERHEAD_MS, measure, percentile, run_checked  # noqa: E402

from swe_sandbox import SandboxDied, get_environment  # noqa: E402


def channel_per_command(environment):
    """``ssh/chan``: a new channel on the environment's own connection for every command."""
    link = environment._ensure_link()

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


def executor(environment, name):
    def call(cmd: str) -> None:
        result = environment.execute({"command": cmd}, timeout=30)
        if result["returncode"] != 0 or result["output"] != EXPECTED[cmd]:
            raise SystemExit(f"{name} failed on {cmd!r}: {result}")

    return call


def time_failure(server, spec, how: str, mode: str) -> float:
    """Seconds until ``sleep 600`` fails with SandboxDied after the sshd is killed / frozen (1 s in)."""
    environment = get_environment({**spec, "mode": mode, "timeout": 900})
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="timed iterations per method and command (default 200)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--spec", help="YAML config of an ssh environment to use instead of a loopback sshd")
    parser.add_argument("--fallback", action="store_true", help="also time the exec-fallback mode")
    parser.add_argument("--failures", action="store_true", help="also time dead/frozen sshd detection")
    args = parser.parse_args(argv)

    server = None
    if args.spec:
        from swe_sandbox.config import load_environment_config

        spec = load_environment_config(args.spec)
    else:
        from ssh.sshd import Sshd

        server = Sshd().start()
        spec = server.spec()
    cleanup = []
    try:
        environment = get_environment({**spec, "mode": "runner"})
        environment.start()
        cleanup.append(environment.close)
        methods = {"fork": lambda cmd: run_checked(["bash", "-c", cmd], EXPECTED[cmd]),
                   "ssh/chan": channel_per_command(environment), "ssh": executor(environment, "ssh")}
        if args.fallback:
            fallback = get_environment({**spec, "mode": "fallback"})
            fallback.start()
            cleanup.append(fallback.close)
            methods["ssh-fallback"] = executor(fallback, "ssh-fallback")
        print(f"ssh round trip over loopback: n={args.n} per method and command (after {args.warmup} warm-up), "
              f"paramiko {__import__('paramiko').__version__}, remote python {environment.info.get('python')}")
        samples = measure(methods, args.n, args.warmup)
    finally:
        for close in cleanup:
            close()

    overheads = {}
    for cmd in COMMANDS:
        base = statistics.median(samples[("fork", cmd)]) * 1000
        chan = statistics.median(samples[("ssh/chan", cmd)]) * 1000
        print(f"\ncommand `{cmd}`")
        print(f"  {'method':14} {'median ms':>10} {'p90 ms':>8} {'overhead vs fork':>17} {'vs ssh/chan':>12}")
        for method in methods:
            xs = samples[(method, cmd)]
            med, p90 = statistics.median(xs) * 1000, percentile(xs, 0.9) * 1000
            if method == "ssh":
                overheads[cmd] = med - base
            print(f"  {method:14} {med:10.2f} {p90:8.2f} {med - base:+17.2f} {med / chan:11.2f}x")
    worst = max(overheads.values())
    print(f"\nssh backend per-command overhead over a bare fork (median): "
          f"{', '.join(f'`{c}` {v:+.2f} ms' for c, v in overheads.items())}; target <= {TARGET_OVERHEAD_MS:g} ms: "
          f"{'MET' if worst <= TARGET_OVERHEAD_MS else 'NOT MET'}")

    if args.failures:
        if server is None:
            print("\n--failures needs the loopback sshd (no --spec)")
        else:
            print("\ntime from the failure to SandboxDied, `sleep 600` running (default keepalives 5 s x 3):")
            for mode in ("runner", "fallback"):
                for how in ("kill", "freeze"):
                    print(f"  {mode:8} sshd {how:7} {time_failure(server, spec, how, mode):6.2f} s", flush=True)
    if server is not None:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
