"""The proxy process of ``network: allowlist``: ``python -m swe_sandbox.network.serve --socket S --policy P --log L``.

Runs proxy.py on the unix socket ``S`` only (with ``--unix-socket-path`` proxy.py opens no TCP listener
unless ``--ports`` is given), one acceptor, threadless with the acceptor's own executor, our
``RecordingHandler`` and ``AllowListPlugin``, proxy.py's logging at WARNING on stderr.

Lifetime: started by ``AllowListProxy`` with ``start_new_session=True`` and its stdin a pipe from the
owner. A thread reads stdin; at EOF (the owner exited or was killed, even by SIGKILL) it kills this
process group. ``AllowListProxy.stop`` sends the group SIGTERM first (each acceptor logs the
connections still open, proxy.py shuts down and removes the socket), SIGKILL after a grace period.
proxy.py's acceptor processes (forked by multiprocessing) get ``PR_SET_PDEATHSIG``
SIGKILL, so they die with this process whatever kills it. Once the socket is bound (mode 0666: a
remapped container root must connect) it prints ``ready`` on stdout. Started by root, it becomes
``--drop-to`` (nobody) once loaded and before it listens or forks: a flaw in proxy.py is then not the
host's root.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import signal
import threading
from pathlib import Path

#: Modules imported before the proxy drops its privileges: those loaded lazily later (at the
#: acceptors' fork, at a first request), found by running the network tests with the drop on.
PRELOADED = ("encodings.idna", "encodings.latin_1", "multiprocessing.popen_fork", "multiprocessing.synchronize",
             "multiprocessing.connection", "multiprocessing.reduction", "multiprocessing.resource_sharer",
             "multiprocessing.queues", "multiprocessing.heap", "multiprocessing.util", "proxy.core.acceptor",
             "proxy.core.work", "proxy.http.handler", "proxy.http.proxy.server", "proxy.http.server",
             "proxy.core.connection", "proxy.core.listener")
#: What the process prints on stdout once the socket accepts connections.
READY_LINE = "ready"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this (forked) process when its parent dies (Linux ``prctl``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def on_terminate(_signum: int, _frame: object) -> None:
    """SIGTERM in an acceptor: log the connections still open, then exit at once."""
    from swe_sandbox.network.plugin import log_open_connections

    try:
        log_open_connections()
    finally:
        os._exit(0)


def after_fork_in_child() -> None:
    """Set up a process proxy.py forked (an acceptor): die with the server, log open connections on SIGTERM."""
    die_with_parent()
    signal.signal(signal.SIGTERM, on_terminate)


def watch_stdin() -> None:
    """Block reading stdin; at EOF kill the whole process group (this process included).

    It reads the file descriptor, not ``sys.stdin``: multiprocessing closes ``sys.stdin`` in each forked
    child, which would deadlock on the buffer lock this thread holds at the fork.
    """
    try:
        while os.read(0, 4096):
            pass
    finally:
        os.killpg(0, signal.SIGKILL)


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``:``gid`` with no other groups, for good, after loading every module the proxy
    needs while it serves (the interpreter's files may be unreadable to that user, e.g. under /root)."""
    for name in PRELOADED:
        importlib.import_module(name)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def proxy_arguments(socket_path: str) -> list[str]:
    """proxy.py's command line for ``socket_path``."""
    return [
        "--unix-socket-path", socket_path,
        "--num-acceptors", "1",
        "--threadless",
        "--local-executor", "1",
        "--log-level", "WARNING",
        "--work-klass", "swe_sandbox.network.plugin.RecordingHandler",
        "--plugins", "swe_sandbox.network.plugin.AllowListPlugin",
    ]


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, start proxy.py, say ``ready``, run until killed or stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m swe_sandbox.network.serve")
    parser.add_argument("--socket", required=True, help="the unix socket to listen on")
    parser.add_argument("--policy", required=True, help="the NetworkPolicy JSON file")
    parser.add_argument("--log", required=True, help="the decision log (appended)")
    parser.add_argument("--drop-to", default="", metavar="UID:GID",
                        help="become this user once everything is loaded (the proxy of a root owner)")
    args = parser.parse_args(argv)
    from swe_sandbox.network.plugin import LOG_ENV, POLICY_ENV, policy

    os.environ[POLICY_ENV], os.environ[LOG_ENV] = args.policy, args.log
    policy()  # a bad policy file fails here, before anything listens
    os.register_at_fork(after_in_child=after_fork_in_child)
    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    Path(args.socket).unlink(missing_ok=True)
    from proxy import Proxy

    server = Proxy(proxy_arguments(args.socket))  # loads every plugin module, before any fork
    if args.drop_to:
        drop_privileges(*(int(part) for part in args.drop_to.split(":")))
    with server:
        os.chmod(args.socket, 0o666)
        print(READY_LINE, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
