"""Exec fallback: one exec per command, for sandboxes without python3 (DESIGN.md §2).

Where the runner cannot start (a busybox image, a bare remote host), a backend hands
``ExecFallbackChannel`` a way to start one process in the sandbox (``start_exec(argv)``), and every
command becomes one such process running ``FALLBACK_SCRIPT`` under ``sh``. The channel is a session
like the runner's (``base.Session``: ``ready``, then one ``request`` per command), so
``Environment.execute`` (sentinel, dead-sandbox handling) is the same code in both modes, and the
result dict is built by the runner's own ``make_result`` and ``OutputBuffer`` (same truncation,
marker, counters and messages).

What the script does inside the sandbox, per command (POSIX ``sh``: dash, busybox ash, bash):

- reads the command from stdin into a private file (never argv, never re-quoted), then runs
  ``bash -c 'eval "$(< FILE)"'`` (``sh`` where the sandbox has no bash) with stdin ``/dev/null``,
  in a new session (``setsid``), stdout and stderr on ONE pipe (a FIFO: ``2>&1`` inside);
- enforces the timeout inside the sandbox: a watchdog (``sleep T``, then SIGKILL to the command's
  session) marks the expiry in a file, and every process carrying the command's token
  (``SWE_SANDBOX_CMD``, like the runner) or the command's trace file open as fd 9 (``env -i`` drops
  the token, not the fd) is killed too, so ``setsid`` escapees and pipe holders die,
  and (in containers, ``sweep_orphans``) so is every orphan adopted by PID 1 since the command
  started, whatever token it shows (``setsid env -i ...``, or a forged token of another command).
  Not ``timeout(1)``: busybox's kills only its direct child, and neither tells a timeout apart from
  a command that exits 124/137 by itself, so the result could not say ``timed_out`` reliably;
- a reader copies the FIFO to the exec's stdout; when the shell exits it gets at most
  ``DRAIN_MAX_S`` to reach end of file, then background jobs still holding the pipe are handed to a
  detached discarding reader (no ``EPIPE`` for them, no waiting for them);
- reports on the exec's stderr one status line ``swe-sandbox-status rc=N timed_out=0|1 ...``; the
  command's own stderr never goes there. A missing status line means the sandbox died. The wrapper
  is a shell the command could reach, so its status is checked against what the command cannot
  touch: the exec's own exit status, as the engine or sshd reports it. A second status line or a
  code that disagrees is a ``ProtocolError``, never a result.

What it cannot do like the runner (the conformance suite declares these as strict xfails): there
is no process living across commands, so "the sandbox vanished between commands" can only be seen
when the whole sandbox is gone, not when a command kills its own parent; and each command pays one
exec's start cost (~70-120 ms on docker/podman instead of ~3 ms).
"""

from __future__ import annotations

import math
import os
import selectors
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol

from swe_sandbox import capabilities as cap
from swe_sandbox import runner
from swe_sandbox.config import check_env_name
from swe_sandbox.environments.base import HOST_GRACE_S, last_frame
from swe_sandbox.errors import ProtocolError, SandboxDied

STATUS_PREFIX = "swe-sandbox-status "
#: Why a status that disagrees with the transport is refused (the result would not be the command's).
FORGED_STATUS = ("the exec fallback's status was tampered with from inside the sandbox; "
                 "the sandbox is no longer trusted")
#: How many earlier commands' tokens a timeout spares (daemons of older ones re-forking during a
#: timeout die with it; the list travels on the wrapper's command line).
SPARED_TOKENS = 256
#: ``argv[0]`` of the fallback script inside the sandbox (shows up in ``ps``).
SCRIPT_NAME = "swe-sandbox-exec"

#: The one shell tree-kill sweep (the fallback's timeout, ssh's clean-up): ``kill_holders ENTRY FILE
#: FD`` SIGKILLs every process but this shell that carries the environment entry ENTRY (a run or
#: command token), or holds FILE (a trace file) open as its descriptor FD (``env -i`` drops the
#: token, not the descriptor). No fork per process (pids may be exhausted).
KILL_HOLDERS = r"""kill_holders() {
  holders_=
  # `command eval`: where a fork fails (a fork bomb fills the pids), sh gives up this step, not the shell
  command eval 'holders_=$(grep -l -a -z -x -F "$1" /proc/[0-9]*/environ 2>/dev/null)'
  for f in $holders_; do
    q_=${f#/proc/}; q_=${q_%/environ}
    [ "$q_" = "$$" ] || kill -KILL "$q_" 2>/dev/null
  done
  if [ -e "$2" ]; then for p_ in /proc/[0-9]*; do [ "$p_/fd/$3" -ef "$2" ] && kill -KILL "${p_#/proc/}" 2>/dev/null; done; fi
}
"""

FALLBACK_SCRIPT = KILL_HOLDERS + r"""
cwd=$1 tcs=$2 tok=$3 drain=$4 collect=$5 exports=$6 orphans=$7 deadline=${8:-} runtrace=${9:-} spared=" ${10:-} "
status() { printf 'swe-sandbox-status %s\n' "$*" >&2; }
# A stray TERM/HUP/INT (`kill $PPID`, `pkill sh`) runs a no-op trap instead of ending this wrapper
# (a trap, not an ignore, which the command would inherit); `wait` then returns early, so it loops.
trap : TERM HUP INT
d=$(mktemp -d "${TMPDIR:-/tmp}/swe-sandbox-exec.XXXXXX" 2>/dev/null) || d=$(mktemp -d /tmp/swe-sandbox-exec.XXXXXX) \
  || { status error=mktemp; exit 125; }
cat >"$d/cmd" || { status error=stdin; rm -rf "$d"; exit 125; }
if [ -n "$cwd" ] && ! cd "$cwd" 2>/dev/null; then
  if [ -d "$cwd" ]; then why=noaccess; elif [ -e "$cwd" ]; then why=notdir; else why=missing; fi
  status rc=1 bad_cwd=$why; rm -rf "$d"; exit 1
fi
if command -v bash >/dev/null 2>&1; then run="bash"; script='eval "$(< '"$d/cmd"')"'
else run="sh"; script='eval "$(cat '"$d/cmd"')"'; fi
command -v setsid >/dev/null 2>&1 && run="setsid $run"
alive() {  # no fork: these run in loops, and under load every fork costs
  read -r s <"/proc/$1/stat" 2>/dev/null || return 1
  case ${s##*) } in Z*|X*) return 1 ;; esac
}
now_cs() { read -r up _ </proc/uptime; now=${up%%.*}${up##*.}; }  # centiseconds since boot
stat_of() {  # sets ppid_ and start_ (fields 4 and 22 of /proc/PID/stat); no fork (pids may be exhausted)
  ppid_= start_=
  read -r s <"/proc/$1/stat" 2>/dev/null || return 1
  set -- ${s##*) }
  ppid_=$2 start_=${20}
}
older_holder() {  # does a process older than this command carry the environment entry $1?
  olders_=; command eval 'olders_=$(grep -l -a -z -x -F "$1" /proc/[0-9]*/environ 2>/dev/null)'
  for f in $olders_; do
    q_=${f#/proc/}; stat_of "${q_%/environ}" && [ "$start_" -lt "$started" ] && return 0
  done
  return 1
}
sweep() {  # SIGKILL this command's tree: token and trace holders, (containers) orphans with a cleared environment
  for round in 1 2 3; do
    kill_holders "SWE_SANDBOX_CMD=$tok" "$d/trace" 9
    [ "$orphans" = 1 ] || continue
    # an orphan adopted by PID 1 since this command started is ours, unless it carries the token of
    # an earlier command that a process older than this command still carries (runner.find_tree's rule)
    for p in /proc/[0-9]*; do
      q=${p#/proc/}
      stat_of "$q" || continue
      [ "$ppid_" = 1 ] && [ "$started" != 0 ] && [ "$start_" -ge "$started" ] || continue
      t=; command eval 't=$(tr "\\0" "\\n" <"$p/environ" 2>/dev/null | grep -m1 "^SWE_SANDBOX_CMD=")'
      # a fork that failed leaves t empty: the orphan is killed, as a process without a token is
      case $spared in *" ${t#SWE_SANDBOX_CMD=} "*) [ -n "$t" ] && older_holder "$t" && continue ;; esac
      kill -KILL "$q" 2>/dev/null
    done
  done
}
mkfifo "$d/out" && : >"$d/trace" || { status error=mkfifo; rm -rf "$d"; exit 125; }
exec 7<"$d/trace"  # a cancel finds $d through this wrapper's fd 7 (CANCEL_SCRIPT); the command does not get it
if [ -n "$runtrace" ]; then : >>"$runtrace" 2>/dev/null || runtrace=; fi
cat "$d/out" &
reader=$!
dog=
if [ -n "$tcs" ]; then  # the watchdog's end, in centiseconds of /proc/uptime
  now_cs; left=$tcs
  if [ -n "$deadline" ]; then  # same kernel as the host: the exec's start counts too
    left=$((deadline - now)); [ "$left" -ge 1 ] || left=1; [ "$left" -le "$tcs" ] || left=$tcs
  fi
  # forked before the command, so a fork bomb cannot keep it from starting; it naps until the end
  # (a `pkill sleep` from the command only wakes it early), then kills the command's session. Its
  # one fork is `sleep`, through `command eval`: under a fork bomb it spins until the end instead of dying
  setsid sh -c 'up() { read -r u _ </proc/uptime; now=${u%%.*}${u##*.}; }
    up; while [ "$now" -lt "$1" ]; do
      r=$(($1 - now)); f=$((r % 100)); [ "$f" -ge 10 ] || f=0$f; command eval "sleep $((r / 100)).$f"; up
    done
    : >"$2/expired"; until read -r p <"$2/pid"; do command eval "sleep 0.01"; done 2>/dev/null
    kill -KILL -"$p" 2>/dev/null; kill -KILL "$p"' \
    swe-sandbox-watchdog "$((now + left))" "$d" </dev/null >/dev/null 2>&1 &
  dog=$!
fi
# The variables are the command's alone, exported in its own shell: in this one a PATH or IFS
# of the caller's would break the wrapper (and its status line) instead of the command.
SWE_SANDBOX_CMD=$tok $run -c "$exports$script" </dev/null >"$d/out" 2>&1 9<"$d/trace" 8<"${runtrace:-/dev/null}" 7<&- &
pid=$!
echo "$pid" >"$d/pid"
stat_of "$pid" && started=$start_ || started=0
while :; do wait "$pid"; rc=$?; [ "$rc" -gt 128 ] && [ -d "/proc/$pid" ] || break; done
timed_out=0
if [ -e "$d/expired" ]; then
  timed_out=1
  sweep
  limit=$collect
else
  limit=$drain
fi
if [ -n "$dog" ]; then kill -KILL -"$dog" "$dog" 2>/dev/null; fi
now_cs; until_cs=$((now + limit))
while alive "$reader" && now_cs && [ "$now" -lt "$until_cs" ]; do command eval 'sleep 0.01'; done
if alive "$reader"; then
  # Background jobs still hold the pipe: a detached reader discards what they write from now on.
  # It must have the FIFO open (its fd 3) before the first reader goes, or a writer would get EPIPE.
  # `-ef`, not `-e`: while the dynamic loader and setlocale run, fd 3 is libc or a locale file.
  discard=; command eval 'setsid cat "$d/out" </dev/null >/dev/null 2>&1 & discard=$!'
  [ -n "$discard" ] || discard=0  # no fork: nothing discards, the reader goes all the same
  now_cs; until_cs=$((now + 200))
  while ! [ "/proc/$discard/fd/3" -ef "$d/out" ] && alive "$discard" && now_cs && [ "$now" -lt "$until_cs" ]; do
    command eval 'sleep 0.01'
  done
  kill -KILL "$reader" 2>/dev/null
fi
status rc=$rc timed_out=$timed_out
command eval 'rm -rf "$d"'
exit "$rc"
"""


#: What ``ExecFallbackChannel.cancel`` runs in its own exec (``$1``: the command's token): it finds
#: the command's wrapper (the process whose argv holds the token, keeping the trace file open as
#: its fd 7), marks the command expired and kills its session, as the watchdog does at a timeout,
#: so the wrapper sweeps the tree as on a timeout (token and trace holders, and in containers the
#: orphans); then, as a second line, kills the token and trace holders itself.
CANCEL_SCRIPT = KILL_HOLDERS + r"""
tok=$1 d= p= trace=
command eval 'wrappers_=$(grep -l -a -z -x -F "$tok" /proc/[0-9]*/cmdline 2>/dev/null)'
for f in $wrappers_; do
  w=${f%/cmdline}; [ "${w#/proc/}" = "$$" ] && continue
  t_=; command eval 't_=$(readlink "$w/fd/7" 2>/dev/null)'
  case $t_ in */swe-sandbox-exec.*/trace) d=${t_%/trace}; break ;; esac
done
if [ -n "$d" ] && [ -d "$d" ]; then
  : >"$d/expired"
  n=0; until read -r p <"$d/pid" 2>/dev/null || [ "$n" -ge 200 ]; do n=$((n + 1)); command eval 'sleep 0.01'; done
  if [ -n "$p" ]; then kill -KILL -"$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; fi
  trace="$d/trace"
fi
command eval 'holders_=$(grep -l -a -z -x -F "SWE_SANDBOX_CMD=$tok" /proc/[0-9]*/environ 2>/dev/null)'
for f in $holders_; do [ -n "$trace" ] || command eval 'trace=$(readlink "${f%/environ}/fd/9" 2>/dev/null)'; done
for round in 1 2 3; do kill_holders "SWE_SANDBOX_CMD=$tok" "$trace" 9; done
"""
#: A timeout the wrapper reports this much (seconds) before the host's own clock says it was due is
#: forged (the watchdog counts from the exec's start, later than the host's; uptime is in 1/100 s).
TIMEOUT_SLACK_S = 0.05
#: How long the cancel's exec may take (seconds) before it is left to itself.
CANCEL_EXEC_S = 5.0


class ExecHandle(Protocol):
    """One process started in the sandbox by a backend (``subprocess.Popen`` fits)."""

    stdin: Any
    stdout: Any
    stderr: Any

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...

    def terminate(self) -> None: ...

    def poll(self) -> int | None: ...


def fallback_argv(cwd: str, timeout: float | None, token: str, env: dict[str, str],
                  sweep_orphans: bool = False, deadline_cs: int | None = None, run_trace: str = "",
                  spared: Sequence[str] = ()) -> list[str]:
    """The argv that runs ``FALLBACK_SCRIPT`` for one command (its stdin carries the command).

    ``env`` is exported (quoted) in the command's own shell, never in the script's, so a transport
    that only takes a command string (ssh) can ``shlex.join`` this argv as is. ``sweep_orphans``: see ``ExecFallbackChannel``.
    ``deadline_cs``: when the timeout expires, in centiseconds of ``/proc/uptime`` (only where the
    sandbox shares the host's kernel); the watchdog then also counts the time the exec took to start.
    ``run_trace``: a file every command of the environment gets open as its fd 8 (see
    ``ExecFallbackChannel``'s ``trace_dir``). ``spared``: tokens of earlier commands, whose orphans a
    timeout spares (``runner.find_tree``'s rule); passed as one field, each token after a space, so
    only the command's own token is an argv field of its own (``CANCEL_SCRIPT`` finds the wrapper by it).
    """
    for name in env:
        check_env_name(name)  # exported unquoted: a name is never shell text
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    drain_ticks = str(int(runner.DRAIN_MAX_S * 100))  # centiseconds, the unit of /proc/uptime
    collect_ticks = str(int(runner.KILL_COLLECT_S * 100))
    timeout_ticks = "" if timeout is None else str(max(1, math.ceil(float(timeout) * 100)))
    return ["sh", "-c", FALLBACK_SCRIPT, SCRIPT_NAME, cwd, timeout_ticks, token, drain_ticks, collect_ticks,
            exports, "1" if sweep_orphans else "0", "" if deadline_cs is None else str(deadline_cs), run_trace,
            "".join(" " + t for t in spared)]  # a space before each: no field is ever a bare token


def run_sweep(run_id: str, trace_file: str) -> str:
    """Shell lines killing, in three rounds, every process that carries ``run_id`` as its run token
    or holds the run's ``trace_file`` open as fd 8 (``setsid env -i`` escapees), then removing it."""
    entry, trace = shlex.quote(f"{runner.RUN_TOKEN_VAR}={run_id}"), shlex.quote(trace_file)
    return (f"{KILL_HOLDERS}for round in 1 2 3; do kill_holders {entry} {trace} 8; done; "
            f"rm -f -- {trace}; true")


def trace_path(trace_dir: str, run_id: str) -> str:
    """The run trace file of the fallback run ``run_id`` (see ``ExecFallbackChannel``)."""
    return f"{trace_dir.rstrip('/')}/swe-sandbox-trace-{run_id}"


def parse_status(stderr: bytes) -> tuple[dict[str, str] | None, str]:
    """Return the script's status fields (None when missing) and the rest of stderr.

    Raises:
        ProtocolError: more than one status line (a command wrote one into its wrapper's stderr).
    """
    status, rest = None, []
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.startswith(STATUS_PREFIX):
            if status is not None:
                raise ProtocolError(FORGED_STATUS + " (two status lines)")
            status = dict(kv.partition("=")[::2] for kv in line[len(STATUS_PREFIX):].split())
        elif line.strip():
            rest.append(line)
    return status, "\n".join(rest)


class ExecFallbackChannel:
    """A ``base.Session`` served by one sandbox exec per command (see the module doc).

    Args:
        start_exec: starts ``argv`` in the sandbox with stdin, stdout and stderr as pipes
            (e.g. ``docker exec -i`` through ``subprocess.Popen``).
        env: variables exported for every command on top of the sandbox's own (may be empty when
            the sandbox already has them, as containers do).
        info: extra facts for the ``ready`` frame (shown in ``Environment.info``).
        describe_death: called when the sandbox seems gone; returns a sentence saying why.
        sweep_orphans: on a timeout, also kill processes re-parented to PID 1 since the command
            started, whatever token they show (``setsid env -i ...`` escapees, forged tokens). Only
            where everything in the sandbox belongs to it (a container whose PID 1 is its init);
            never on a shared host, where PID 1 adopts other people's daemons too.
        shared_clock: the sandbox runs on this host's kernel (a local container engine): the
            timeout is then counted from when the exec is started, not from when it got going
            inside (an exec can take a few hundred ms to start under load).
        trace_dir: where to keep the run's trace file (``trace_path``), which every command gets
            open as its fd 8, so a close can find what ``setsid env -i`` took out of its session
            and token on a shared host (``ssh``); None: no such file.
    """

    #: ``base.Session.kind``: no runner, one exec per command.
    kind = "exec"

    def __init__(self, start_exec: Callable[[list[str]], ExecHandle], env: dict[str, str] | None = None,
                 info: dict[str, Any] | None = None, describe_death: Callable[[], str] | None = None,
                 sweep_orphans: bool = False, shared_clock: bool = False, trace_dir: str | None = None):
        self.proc: ExecHandle | None = None  # the running command's exec (``interrupt`` ends it)
        self.start_exec = start_exec
        self.env = dict(env or {})
        self.describe_death = describe_death or (lambda: "")
        self.sweep_orphans = sweep_orphans
        self.shared_clock = shared_clock
        self.run_id = f"fallback-{os.getpid()}-{os.urandom(6).hex()}"
        self.run_trace = "" if trace_dir is None else trace_path(trace_dir, self.run_id)
        self.seq = 0
        self.tokens: list[str] = []  # of the commands run so far (the last SPARED_TOKENS are spared)
        self.running: tuple[int, str] | None = None  # (request id, token) of the command running
        self.cancelled_id: int | None = None  # the request ``cancel`` was asked for
        self.info = {"op": "ready", "protocol": runner.PROTOCOL_VERSION, "mode": "exec", "python": None,
                     **(info or {})}
        self._last_error = ""

    # -- the Session interface ------------------------------------------------------------------
    def ready(self, timeout: float | None, unauthenticated: tuple[str, ...] = ()) -> dict[str, Any]:
        """The ``ready`` facts (no process to wait for: every command starts its own)."""
        return self.info

    def frames(self, req: dict[str, Any], timeout: float | None) -> Iterator[dict[str, Any]]:
        """Run the ``exec`` request ``req`` as one exec: yield its ``chunk`` frames as the exec's
        output arrives (``"stream": true``: ``runner.StreamTap``, as the runner does), then its result,
        each with the request's ``id``.

        ``timeout`` is not used: the command's own (``req["timeout"]``) plus ``HOST_GRACE_S`` bounds
        the wait.

        Raises:
            SandboxDied: the exec could not start, or gave no status.
            ProtocolError: the status was tampered with.
        """
        reply = yield from self._run(req)
        reply["id"] = req.get("id")
        yield reply

    def request(self, req: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """``frames``' result (its last frame). Raises as ``frames``."""
        return last_frame(self.frames(req, timeout))

    def cancel(self, request_id: int) -> None:
        """From any thread: kill the command of request ``request_id`` if it is the one running (one
        more exec, ``CANCEL_SCRIPT``, started from a thread of its own); its result then says it was
        cancelled. Best effort: nothing is raised."""
        running = self.running
        if running is None or running[0] != request_id:
            return
        self.cancelled_id = request_id
        argv = ["sh", "-c", CANCEL_SCRIPT, SCRIPT_NAME + "-cancel", running[1]]
        threading.Thread(target=self._kill_exec, args=(argv,), daemon=True, name="swe-sandbox-cancel").start()

    def _kill_exec(self, argv: list[str]) -> None:
        try:
            proc = self.start_exec(argv)
            proc.stdin.close()
            proc.wait(timeout=CANCEL_EXEC_S)
        except Exception:  # noqa: BLE001 - best effort: a sandbox gone is the command's read to report
            pass

    def diagnose(self) -> str:
        return self._last_error

    def interrupt(self) -> None:
        """From another thread: end the running command's exec (the backend's close cleans up)."""
        proc = self.proc
        if proc is not None:
            try:
                proc.terminate()  # the reading thread then sees end of file
            except OSError:  # best effort (RemoteProcess.terminate already ignores a transport gone)
                pass

    def close(self, wait: float = 2.0) -> None:
        """Nothing to end: no process outlives its command (the backend sweeps what commands left)."""

    # -- one command ----------------------------------------------------------------------------
    def _run(self, req: dict[str, Any]) -> Generator[dict[str, Any], None, dict[str, Any]]:
        """Yield ``req``'s chunk frames; return its result (``frames``)."""
        self.seq += 1
        started = time.monotonic()
        timeout = req.get("timeout")
        token = f"{self.run_id}.{self.seq}.{os.urandom(8).hex()}"
        env = {**self.env, **(req.get("env") or {}), runner.RUN_TOKEN_VAR: self.run_id}
        # +1: /proc/uptime is truncated to centiseconds; the kill must never come early
        deadline = _uptime_cs() + math.ceil(float(timeout) * 100) + 1 if self.shared_clock and timeout else None
        argv = fallback_argv(req.get("cwd") or "", timeout, token, env, self.sweep_orphans, deadline, self.run_trace,
                             self.tokens[-SPARED_TOKENS:])
        self.tokens.append(token)
        buf = runner.OutputBuffer(int(req.get("max_output_bytes") or 10 << 20))
        try:
            proc = self.proc = self.start_exec(argv)
        except OSError as exc:
            raise SandboxDied(f"the sandbox is gone (cannot start a command in it: {exc})") from None
        self.running = (int(req.get("id") or 0), token)
        try:
            result = yield from self._finish(req, proc, buf, started, timeout)
        finally:
            self.proc = self.running = None
        if self.cancelled_id is not None and self.cancelled_id == req.get("id"):
            return runner.make_result(None, -1, runner.CANCELLED_MESSAGE, started, buf, cancelled=True)
        if result["extra"]["timed_out"] and time.monotonic() - started < float(timeout or 0) - TIMEOUT_SLACK_S:
            raise ProtocolError(f"{FORGED_STATUS} (a timeout claimed after {time.monotonic() - started:.2f} s "
                                f"of a {timeout} s timeout)")
        return result

    def _finish(self, req: dict[str, Any], proc: ExecHandle, buf: runner.OutputBuffer, started: float,
                timeout: float | None) -> Generator[dict[str, Any], None, dict[str, Any]]:
        """Feed the command in, read its output (yielding chunk frames when streamed) and status;
        return its result."""
        stderr_chunks: list[bytes] = []
        err_thread = threading.Thread(target=_read_all, args=(proc.stderr, stderr_chunks), daemon=True)
        err_thread.start()
        try:
            proc.stdin.write(req["command"].encode("utf-8", "surrogateescape"))
        except (OSError, ValueError):
            pass  # it ended early; its status (or lack of it) says why
        finally:
            try:
                proc.stdin.close()
            except (OSError, ValueError):
                pass
        deadline = None if timeout is None else started + float(timeout) + HOST_GRACE_S
        tap = runner.StreamTap(buf) if req.get("stream") else None
        read_all = False
        for text in self._read_output(proc, buf, deadline, tap):
            if text is None:
                read_all = True
            else:
                yield {"op": "chunk", "id": req.get("id"), "output": text}
        if not read_all:
            proc.kill()
            proc.wait()
            assert timeout is not None  # only a deadline runs out
            raise SandboxDied(f"the sandbox stopped answering (no result within {float(timeout) + HOST_GRACE_S:.0f} s)")
        code = proc.wait()
        err_thread.join(5)
        status, stderr = parse_status(b"".join(stderr_chunks))
        if status is None or "rc" not in status:
            why = self.describe_death() or (stderr.strip() or f"the exec ended with status {code} and no result")
            self._last_error = why
            if status is not None and "error" in status:
                raise ProtocolError(f"the exec fallback failed in the sandbox: {status['error']} ({stderr.strip()})")
            raise SandboxDied(f"the sandbox is gone ({why})")
        rc = _status_code(status)
        if rc != code:  # the exit status comes from the engine / sshd, out of the commands' reach
            raise ProtocolError(f"{FORGED_STATUS} (status rc={status['rc']}, exit status {code})")
        if status.get("bad_cwd") in runner.BAD_CWD:  # the same line and message as the runner's
            msg = runner.bad_cwd_message(req.get("cwd") or "", status["bad_cwd"])
            return runner.make_result(msg + "\n", 1, msg, started, buf)
        if status.get("timed_out") == "1":
            return runner.make_result(None, -1, runner.timeout_message(timeout), started, buf, timed_out=True)
        return runner.make_result(None, rc, "", started, buf)

    @staticmethod
    def _read_output(proc: ExecHandle, buf: runner.OutputBuffer, deadline: float | None,
                     tap: runner.StreamTap | None) -> Iterator[str | None]:
        """Feed ``proc``'s stdout into ``buf`` until end of file, then yield None; stop when
        ``deadline`` passed. With ``tap``, yield the chunks to stream meanwhile."""
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if tap is not None and (text := tap.take(now)):
                    yield text
                    if deadline is not None:  # the consumer's time is not the command's
                        deadline += time.monotonic() - now
                waits = [t for t in (deadline, tap.due() if tap is not None else None) if t is not None]
                left = min(waits) - now if waits else None
                if deadline is not None and now >= deadline:
                    return
                if not sel.select(None if left is None else max(0.0, left)):
                    continue
                data = os.read(fd, runner.READ_CHUNK)
                if not data:
                    yield None
                    return
                buf.feed(data)


def _status_code(status: dict[str, str]) -> int:
    """The status line's ``rc`` as an int in 0..255.

    Raises:
        ProtocolError: anything else.
    """
    rc = status["rc"]
    if not rc.isdigit() or int(rc) > 255:
        raise ProtocolError(f"{FORGED_STATUS} (rc={rc[:20]!r})")
    return int(rc)


def _uptime_cs() -> int:
    """``/proc/uptime`` in centiseconds: the clock the fallback script reads inside the sandbox."""
    with open("/proc/uptime") as f:
        seconds, _, fraction = f.read().split()[0].partition(".")
    return int(seconds) * 100 + int((fraction + "00")[:2])


def _read_all(stream, chunks: list[bytes]) -> None:
    try:
        for chunk in iter(lambda: stream.read(65536), b""):
            chunks.append(chunk)
    except (OSError, ValueError):
        pass


def popen_exec(argv_prefix: list[str], env: dict[str, str] | None = None) -> Callable[[list[str]], subprocess.Popen]:
    """A ``start_exec`` for transports that are a CLI: ``argv_prefix + argv`` with three pipes."""

    def start(argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv_prefix + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)

    return start


def missing_capabilities(shared_host: bool = False) -> dict[str, str]:
    """What the exec fallback lacks next to the runner (``swe_sandbox.capabilities``),
    for the ``missing_capabilities`` of every backend that runs it.

    Args:
        shared_host: the commands run on a host shared with others (local, ssh), where orphans
            cannot be swept (``ExecFallbackChannel``'s ``sweep_orphans``).
    """
    shared = {cap.ORPHAN_SWEEP: "exec fallback on a shared host: no runner adopts orphans and the host's PID 1 "
                                "adopts everyone's, so an escapee that clears its environment and closes its trace "
                                "fds (8, 9) is not told apart from the host's daemons"} if shared_host else {}
    return {**shared,
        cap.LONG_LIVED_RUNNER: "exec fallback: no runner lives between commands (nothing watches the sandbox "
                               "between them; a command's parent is the per-command `sh` wrapper)",
        cap.PRIVATE_RUNNER_CHANNEL: "exec fallback: the per-command wrapper is a plain shell of the command's user, "
                                    "so a command can write into the exec's streams (what it writes lands in its "
                                    "own output; the result stays its own)",
        cap.UNREACHABLE_RUNNER_CHANNEL: "exec fallback: the per-command wrapper (and its output reader) is a plain "
                                        "shell of the command's user holding the exec's streams, which that user's "
                                        "processes may open through /proc",
        cap.DIRECT_RUNNER_CHANNEL: "exec fallback: no runner; each command is one exec (through the engine or "
                                   "sshd where there is one)",
        cap.COMMAND_STDIN: "exec fallback: the exec's stdin carries the command itself to the per-command wrapper",
        cap.SEPARATE_STDERR: "exec fallback: the exec's stderr carries the wrapper's status line, so a command's "
                             "stderr is merged into its output inside the sandbox",
        cap.RUN_AS_USER: "exec fallback: every command runs as the user the exec runs as",
        cap.NETWORK_ALLOWLIST: "exec fallback: no runner lives beside the commands to relay the sandbox's loopback "
                               "to the allow-list proxy's socket",
        cap.RESET_IN_PLACE: "exec fallback: no runner outlives a command to kill every other process and prove the "
                            "process table empty (a snapshot's forks are fresh sandboxes instead)",
        cap.PRIVATE_COMMAND_OUTPUT: "exec fallback: a background job can write into a later command's output (the "
                                    "exec's stdout, or the FIFO its command writes to), which is relayed as raw "
                                    "bytes; only the returncode is checked against the transport",
    }
