"""The in-sandbox runner: the execute contract (DESIGN.md §1), implemented once.

This file is sent as source to ``python3`` inside the sandbox (see ``BOOTSTRAP``) and must stay
stdlib-only and valid on Python >= 3.6: no annotations, no f-strings with ``=``, no walrus.

Protocol (both directions): a frame is a 4-byte big-endian length followed by that many bytes of
UTF-8 JSON; a reply whose ``output`` is long carries ``"output": null, "output_follows": N`` and
is followed by those N bytes of raw UTF-8 (``RAW_OUTPUT_MIN``); every frame ends with its MAC
(``FrameAuth``). The host sends ``{"op": "exec", "command": str, "cwd": str, "env": {str: str},
"timeout": float | null, "max_output_bytes": int}`` or ``{"op": "close"}``; the runner answers
``{"op": "ready", ...}`` once at start and one ``{"op": "result", ...}`` per ``exec``. The command
travels as payload; it reaches bash through an unlinked file descriptor, never through argv.

Streaming: an ``exec`` with ``"stream": true`` is also answered, before its result, by
``{"op": "chunk", "id": ID, "output": str}`` frames as the command writes (``StreamTap``: at most one
per ``STREAM_INTERVAL_S`` unless idle before, whole UTF-8 characters, only the kept head of the
output), so the chunks joined are always a prefix of the result's ``output``. ``{"op": "cancel",
"id": ID}`` (sent while command ``ID`` runs, or before it starts) ends it as a timeout would, with
the ``CANCELLED_MESSAGE`` result.

Reset (DESIGN.md section 10): ``{"op": "reset", "remove": [path, ...], "clear": [dir, ...],
"digest": [path, ...]}`` kills every process of the sandbox but the runner (as PID 1: every other
process in /proc; else its subtree and the holders of its token), then removes each ``remove`` path
and empties each ``clear`` directory (never through a symlink: a link is removed, not followed; no
process is started, so a binary or module the commands replaced never runs), and answers
``{"op": "result", "processes": [str, ...], "errors": [str, ...], "entries": {path: str | null}}``:
the processes still alive ("pid: command line"), what could not be removed, and each ``digest``
path's own entry (``path_entry``: type, mode, owner, and a file's size and sha256; null: absent),
read by this runner once nothing else runs. With ``"kill": false`` only the entries are read
(nothing killed or removed: a snapshot of a sandbox still in use). The host restores the files
and proves the rest (``environments.snapshot``).

Network (DESIGN.md section 11): ``{"op": "forward", "port": N, "socket": path}`` makes the runner
listen on ``127.0.0.1:N`` inside the sandbox and relay each connection, byte for byte, to the unix
socket ``path`` (the host's allow-list proxy, bound into the sandbox); it answers ``{"op": "result",
"listening": N}`` or ``{"op": "result", "error": str}``. The relay threads live in the runner, so a
reset (which kills every other process) keeps them.

Authentication: right after its source the host writes one plain ``hello`` frame holding a fresh
random key (``{"op": "hello", "key": HEX, "max_lifetime": seconds | null, "channel": path}``), on the
runner's stdin only: never in the sandbox's environment, argv or files. From then on every frame in both
directions carries HMAC-SHA256 over its bytes and its position in that direction's sequence, so a
process that reaches the pipes can neither forge, replay nor reorder a frame. A request that fails
the check ends the runner (the host then sees a dead sandbox, never a forged result).

Direct channel: with ``"channel": path`` in the hello (a unix socket the host listens on, in a
directory bound read-only into the sandbox: ``swe_sandbox.environments.direct``), the runner
connects to it before anything else runs and every later frame, both ways, goes over that socket;
its stdin then only tethers it to the host (end of file there ends it as before). The host accepts
one connection and unlinks the socket, so no command can reach it. Where the socket cannot be
reached, the runner says why on stderr and serves on stdin and stdout as without it.

Per command the runner:
- spawns ``bash -c`` in a new session (its own process group, no controlling terminal), stdin
  ``/dev/null``, stdout and stderr on ONE pipe so their order is kept;
- tags the command's environment with a per-command token so descendants that left the process
  group (``setsid``) are still found in ``/proc`` on a timeout;
- reads the pipe into a bounded head + tail buffer, whatever the command prints;
- returns when the shell exits, after a short drain; a background job still holding the pipe is
  handed to a thread that discards its output, so it neither blocks nor gets ``EPIPE``;
- on timeout kills the whole tree (process group, descendants, token holders) with SIGKILL.
The runner is a child subreaper, so orphans are re-parented to it and reaped; when its stdin
closes (host gone or ``close``) it kills every process any command started, then exits.
"""

import codecs
import hashlib
import hmac
import json
import os
import select
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

PROTOCOL_VERSION = 7
#: Length of a frame's MAC in bytes (HMAC-SHA256).
MAC_SIZE = 32
#: An ``output`` longer than this (characters) travels as raw UTF-8 after its frame, not as a JSON
#: string: escaping every newline of 10 MiB of output cost ~0.25 s to decode alone under load.
RAW_OUTPUT_MIN = 1 << 16
#: Largest stdin a request may carry (bytes).
MAX_INPUT_BYTES = 1 << 30
#: How the transport starts the runner: ``python3 -c BOOTSTRAP``, then writes the decimal length
#: of the runner source, a newline, and the source itself on the runner's stdin.
BOOTSTRAP = (
    "import sys;b=sys.stdin.buffer;n=int(b.readline());"
    "exec(compile(b.read(n),'swe-sandbox-runner','exec'))"
)
#: Interpreter options of the runner, before ``-c BOOTSTRAP``: isolated (neither the working
#: directory, a workspace a sandbox wrote, nor PYTHON* variables reach its imports) and no ``site``.
ISOLATED = ("-I", "-S")
# Each command's shell puts itself (and so the command's whole tree) first in line for the kernel's
# OOM killer (the highest oom_score_adj), so memory exhausted by a command kills the command, not
# the runner; best effort (a command that is root in its sandbox can still lower itself or raise
# the runner: the evaluation counts a sandbox that dies that way as the patch's outcome).
OOM_FIRST = "{ echo 1000 >/proc/self/oom_score_adj; } 2>/dev/null; "
RUN_TOKEN_VAR = "SWE_SANDBOX_RUN"
CMD_TOKEN_VAR = "SWE_SANDBOX_CMD"
#: After the shell exits, keep reading output for at most this long (seconds) ...
DRAIN_MAX_S = 0.25
#: ... or until the pipe has been silent this long (seconds).
DRAIN_IDLE_S = 0.05
#: How often the exit status is polled when no waiter thread could be started (seconds).
POLL_S = 0.05
#: How often orphans' zombies are reaped while a command runs (seconds).
REAP_S = 0.5
#: How long starting a command's shell is retried while the process limit is full (seconds).
SPAWN_RETRY_S = 3.0
#: Time (seconds) a timeout may spend killing the command's tree; a close may spend four times it.
KILL_BUDGET_S = 0.3
#: After a kill, wait at most this long (seconds) for the pipe to reach end of file.
KILL_COLLECT_S = 0.2
READ_CHUNK = 1 << 20
#: A streamed command sends at most one chunk frame per this many seconds (a chunk follows output
#: at once when none went out for this long): at most 20 frames a second whatever it prints.
STREAM_INTERVAL_S = 0.05
#: Bytes of output per chunk frame: with its JSON and MAC a frame stays under ``PIPE_BUF`` (4096),
#: so writing it to a pipe that has room never blocks (a stalled host never holds up a timeout).
CHUNK_BYTES = 1024
#: At most this many chunk frames go out at once (then the next interval).
CHUNK_FRAMES_MAX = 256
#: ``exception_info`` of a command the host cancelled (``{"op": "cancel"}``).
CANCELLED_MESSAGE = "The command was cancelled"
#: At most this many connections relayed by the network forwarder at once (more wait in its backlog).
FORWARD_MAX = 64
# linux/prctl.h
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36


class FrameAuth(object):
    """HMAC-SHA256 of the frames of one channel, both directions (used by the host too).

    Each direction counts its frames; a MAC covers the direction's label, the frame's number and
    its bytes, so a frame cannot be forged without the key, nor replayed, reordered or reflected.
    """

    def __init__(self, key, sending, receiving):
        self.key = key
        self.labels = (sending, receiving)
        self.counts = [0, 0]

    def _mac(self, which, data):
        self.counts[which] += 1
        msg = self.labels[which] + struct.pack(">Q", self.counts[which]) + data
        return hmac.new(self.key, msg, hashlib.sha256).digest()

    def sign(self, data):
        """The MAC to send after ``data`` (the frame's bytes)."""
        return self._mac(0, data)

    def verify(self, data, mac):
        """True when ``mac`` is the MAC of the next received frame ``data``."""
        return hmac.compare_digest(self._mac(1, data), mac)


def write_frame(stream, obj, auth=None, raw=False):
    """Write ``obj`` as one frame (its MAC after it with ``auth``); an ``output`` longer than
    ``RAW_OUTPUT_MIN`` (any, with ``raw``) follows the JSON as raw UTF-8."""
    blob = b""
    text = obj.get("output")
    if isinstance(text, str) and text and (raw or len(text) > RAW_OUTPUT_MIN):
        blob = text.encode("utf-8", "replace")
        obj = dict(obj, output=None, output_follows=len(blob))
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8", "replace")
    frame = struct.pack(">I", len(data)) + data + blob
    if auth is not None:
        frame += auth.sign(frame)
    stream.write(frame)
    stream.flush()


class BadFrame(Exception):
    """A frame from the host failed authentication or could not be decoded."""


def read_frame(stream, auth=None):
    """Return the next decoded frame, or None at end of file. A request's raw ``input`` (the
    command's stdin: ``"input_follows": N`` bytes after the JSON, under the MAC) is put in as bytes.

    Raises:
        BadFrame: ``auth`` is given and the frame's MAC is wrong, or the frame is not JSON.
    """
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack(">I", header)
    data = stream.read(size)
    if len(data) < size:
        return None
    try:
        frame = json.loads(data.decode("utf-8"))
    except ValueError:
        raise BadFrame("a frame is not JSON") from None
    blob = b""
    follows = frame.get("input_follows") if isinstance(frame, dict) else None
    if follows is not None:
        if not isinstance(follows, int) or not 0 <= follows <= MAX_INPUT_BYTES:
            raise BadFrame("a frame announced %r bytes of input" % (follows,))
        blob = stream.read(follows)
        if len(blob) < follows:
            return None
    if auth is not None:
        mac = stream.read(MAC_SIZE)
        if len(mac) < MAC_SIZE:
            return None
        if not auth.verify(header + data + blob, mac):
            raise BadFrame("a frame failed authentication")
    if follows is not None:
        frame["input"] = blob
    return frame


class OutputBuffer(object):
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap):
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data):
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def text(self):
        """Return ``(text, dropped_bytes)``; cuts fall on UTF-8 character boundaries."""
        tail = self.tail[len(self.tail) - self.tail_cap:] if len(self.tail) > self.tail_cap else self.tail
        head = self.head
        if self.total == len(head) + len(tail):
            return bytes(head + tail).decode("utf-8", "replace"), 0
        head_text, head_used = decode_prefix(head)  # a StreamTap streamed a prefix of this
        skip = 0
        while skip < min(3, len(tail)) and tail[skip] & 0xC0 == 0x80:
            skip += 1
        tail = tail[skip:]
        dropped = self.total - head_used - len(tail)
        marker = "\n[swe-sandbox: output truncated, %d bytes dropped]\n" % dropped
        return head_text + marker + bytes(tail).decode("utf-8", "replace"), dropped


def decode_prefix(data):
    """Return ``(text, used)``: ``data`` decoded as UTF-8 (invalid bytes become U+FFFD) but for an
    incomplete character at its end, held back; ``used`` is the count of bytes decoded."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(bytes(data))
    return text, len(data) - len(decoder.getstate()[0])


class StreamTap(object):
    """What a streamed command sends of its ``OutputBuffer`` as chunks: the head, as it fills.

    Decoded incrementally (a character split across writes goes out whole), so the chunks joined
    are a prefix of ``OutputBuffer.text()``'s text; the tail, kept only at the end, and the
    truncation marker arrive with the result. Used by the runner and by the host's exec fallback.
    """

    def __init__(self, buf):
        self.buf = buf
        self.sent = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.last = 0.0

    def due(self):
        """When (``time.monotonic()``) the next chunk may go out, or None when nothing waits."""
        if len(self.buf.head) <= self.sent:
            return None
        return self.last + STREAM_INTERVAL_S

    def take(self, now, limit=None):
        """The text of (at most ``limit`` of) the bytes not sent yet, when a chunk is due at ``now``;
        ``""`` when none is. Once all was taken, the next chunk is due ``STREAM_INTERVAL_S`` later."""
        due = self.due()
        if due is None or now < due:
            return ""
        head = self.buf.head
        end = len(head) if limit is None else min(len(head), self.sent + limit)
        new = bytes(head[self.sent:end])
        self.sent = end
        if end == len(head):
            self.last = now
        return self.decoder.decode(new)

    def defer(self, now):
        """Nothing may go out now (the channel is full): the next chunk is due an interval later."""
        self.last = now


def proc_stat(pid):
    """Return ``(state, ppid, pgid, starttime)`` of ``pid`` from /proc, or None."""
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def boot_ticks():
    """Now, in the unit and clock of a /proc starttime (clock ticks since boot), or None where
    Python lacks ``CLOCK_BOOTTIME``. Taken before a spawn, it stands for the shell's starttime:
    reading that from /proc at once would wait ~0.7 ms on the shell's own start (its write to
    ``oom_score_adj``)."""
    try:
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK") // 1000000000
    except (AttributeError, OSError, ValueError):
        return None


def children(pid):
    """Direct children of ``pid`` from /proc/PID/task/*/children (empty where the kernel lacks it)."""
    kids = []
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return kids
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                kids.extend(int(k) for k in f.read().split())
        except OSError:
            pass
    return kids


def descendants(pid):
    """Pids below ``pid`` from /proc/*/task/*/children, or None where the kernel lacks that file."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tids = os.listdir("/proc/%d/task" % parent)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/children" % (parent, tid), "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                if parent == pid:
                    return None
                kids = []
            except OSError:
                kids = []
            found.extend(kids)
            frontier.extend(kids)
    return found


def proc_table(root=None):
    """Return ``{pid: (ppid, pgid, starttime)}`` of live (non-zombie) processes.

    With ``root`` (this runner, a subreaper, so every process a command started stays below it)
    only ``root``'s subtree is read, which is fast on a busy host; otherwise all of /proc.
    """
    pids = descendants(root) if root is not None else None
    if pids is None:
        try:
            pids = [name for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return {}
    table = {}
    for pid in pids:
        stat = proc_stat(pid)
        if stat is not None and stat[0] not in (b"Z", b"X"):
            table[int(pid)] = stat[1:]
    return table


def environ_of(pid):
    """The initial environment of ``pid`` as ``b"\\0K=V\\0K=V..."``, or b"" when unreadable."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return b"\0" + f.read()
    except OSError:
        return b""


def token_of(environ):
    """The command token (bytes) in ``environ`` as ``environ_of`` returns it, or None."""
    key = ("\0%s=" % CMD_TOKEN_VAR).encode()
    at = environ.find(key)
    if at < 0:
        return None
    start = at + len(key)
    end = environ.find(b"\0", start)
    return environ[start:] if end < 0 else environ[start:end]


def began_before(pid, start, since):
    """Whether the process ``pid`` (its /proc ``start``, in clock ticks) began before a command's
    shell, ``since`` = ``(ticks, shell pid)``: ``ticks`` no later than the shell's own start.

    A tick is 10 ms: a background job of the command before, started in the same tick as this
    shell, would look as young as it (and a timeout killed it). Pids are handed out in order, so
    within that tick the lower pid is the older (a process that began before ``ticks`` is older
    whatever its pid, should the pids have wrapped around).
    """
    return start < since[0] or pid < since[1]


def find_tree(table, roots=(), pgid=None, marker=None, adopted_since=None, spared=frozenset()):
    """Pids in the tree of one command.

    That is: ``roots`` and their descendants, members of process group ``pgid``, holders of the
    environment ``marker`` (found after ``setsid``), and orphans re-parented to this runner (a
    subreaper, or PID 1) that began after the command's shell (``adopted_since``: ``(ticks, pid)``,
    see ``began_before``), except those of a daemon of an earlier command re-forking meanwhile: an
    orphan is spared when it carries the token of an earlier command (in ``spared``) that a process
    older than the shell still carries.
    ``env -i``, an invented token, or one a command saved from an earlier command that left nothing
    running spare nothing (copying the token of a live background job gains nothing: that job could
    start anything itself).
    """
    me = os.getpid()
    found, alive = set(), None
    for pid, (ppid, group, start) in table.items():
        if pid == me:
            continue
        adopted = adopted_since is not None and ppid == me and not began_before(pid, start, adopted_since)
        if pgid is not None and group == pgid:
            found.add(pid)
        elif marker or adopted:
            environ = environ_of(pid)
            if marker and marker in environ:
                found.add(pid)
            elif adopted:
                token = token_of(environ)
                if token in spared and alive is None:
                    alive = set(token_of(environ_of(p)) for p, row in table.items()
                                if began_before(p, row[2], adopted_since))
                if token not in spared or token not in alive:
                    found.add(pid)
    frontier = set(roots) | found
    while frontier:
        frontier = set(p for p, row in table.items() if row[0] in frontier and p != me) - found
        found |= frontier
    found.discard(me)
    return found


def cmdline_of(pid):
    """The command line of ``pid`` (NULs as spaces, at most 200 characters), or "?"."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read(400).replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200] or "?"
    except OSError:
        return "?"


def remove_path(path, errors):
    """Remove ``path`` and, for a real directory, everything below it; a symlink is removed, never
    followed. A missing path is not an error; others go to ``errors``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        errors.append("%s: %s" % (path, exc.strerror))
        return
    for attempt in (1, 2):
        try:
            if stat_is_dir(st.st_mode):
                clear_dir(path, errors)
                os.rmdir(path)
            else:
                os.unlink(path)
            return
        except PermissionError as exc:
            if attempt == 2 or not own_writable(os.path.dirname(path) or "."):
                errors.append("%s: %s" % (path, exc.strerror))
                return
        except OSError as exc:
            errors.append("%s: %s" % (path, exc.strerror))
            return


def own_writable(path):
    """Make the directory ``path`` writable and searchable if this user owns it; whether it did."""
    try:
        st = os.lstat(path)
        if not stat_is_dir(st.st_mode) or st.st_uid != os.geteuid():
            return False
        os.chmod(path, (st.st_mode & 0o7777) | 0o700)
        return True
    except OSError:
        return False


def clear_dir(path, errors):
    """Remove everything below the real directory ``path`` (kept itself); see ``remove_path``."""
    try:
        st = os.lstat(path)
        if stat_is_dir(st.st_mode) and (st.st_mode & 0o700) != 0o700:
            own_writable(path)  # a chmod 555 directory (Go's module cache) is no obstacle
        names = os.listdir(path) if stat_is_dir(st.st_mode) else []
    except FileNotFoundError:
        return
    except OSError as exc:
        errors.append("%s: %s" % (path, exc.strerror))
        return
    for name in names:
        remove_path(os.path.join(path, name), errors)


def path_entry(path):
    """``path``'s own entry: ``"KIND MODE UID:GID"``, then for a file ``SIZE SHA256``, for a link
    ``-> TARGET`` (a directory's children are not in it); None when it does not exist."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = {0o040000: "dir", 0o100000: "file", 0o120000: "link", 0o010000: "fifo",
            0o140000: "socket"}.get(st.st_mode & 0o170000, "device")
    entry = "%s %04o %d:%d" % (kind, st.st_mode & 0o7777, st.st_uid, st.st_gid)
    if kind == "link":
        return entry + " -> " + os.readlink(path)
    entry += xattrs_of(path)  # ACLs too (system.posix_acl_*)
    if kind != "file":
        return entry
    digest, size = hashlib.sha256(), 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return entry + " unreadable (%s)" % exc.strerror
    try:
        while True:
            block = os.read(fd, READ_CHUNK)
            if not block:
                return entry + " %d %s" % (size, digest.hexdigest())
            size += len(block)
            digest.update(block)
    finally:
        os.close(fd)


def remove_sysv_ipc():
    """Remove every System V shared memory segment, message queue and semaphore set this process
    sees (a sandbox's own IPC namespace only: never call it on a shared host)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except Exception:
        return
    for kind, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        try:
            with open("/proc/sysvipc/%s" % kind) as f:
                ids = [int(line.split()[1]) for line in f.read().splitlines()[1:] if line.split()]
        except (OSError, ValueError, IndexError):
            continue
        for ipc_id in ids:
            if kind == "sem":
                remove(ipc_id, 0, 0, None)  # IPC_RMID is 0
            else:
                remove(ipc_id, 0, None)


def xattrs_of(path, fd=None):
    """``" xattrs=SHA"`` over a path's extended attributes (names and values), "" when it has none."""
    target = fd if fd is not None else path
    try:
        names = sorted(os.listxattr(target, follow_symlinks=False) if fd is None else os.listxattr(fd))
        if not names:
            return ""
        digest = hashlib.sha256()
        for name in names:
            value = os.getxattr(target, name, follow_symlinks=False) if fd is None else os.getxattr(fd, name)
            digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + value + b"\0")
        return " xattrs=" + digest.hexdigest()[:16]
    except (OSError, AttributeError):
        return ""


def stat_is_dir(mode):
    return (mode & 0o170000) == 0o040000


def start_thread(target, *args):
    """Start a daemon thread; False when none can be had (a fork bomb used every process slot)."""
    try:
        threading.Thread(target=target, args=args, daemon=True).start()
    except RuntimeError:
        return False
    return True


def forward(req):
    """``{"op": "forward"}``: listen on 127.0.0.1:port and relay each connection to the unix socket."""
    import socket

    try:
        port, path = int(req["port"]), str(req["socket"])
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(FORWARD_MAX)
    except (KeyError, ValueError, OSError) as exc:
        return {"op": "result", "error": "%s: %s" % (type(exc).__name__, exc)}
    if not start_thread(accept_forever, listener, path, threading.BoundedSemaphore(FORWARD_MAX)):
        listener.close()
        return {"op": "result", "error": "no thread for the forwarder"}
    return {"op": "result", "listening": port}


def accept_forever(listener, path, slots):
    """Accept connections (at most ``FORWARD_MAX`` relayed at once) and relay each to ``path``."""
    import socket

    while True:
        slots.acquire()
        try:
            client, _ = listener.accept()
        except OSError:
            slots.release()
            continue
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:  # the proxy is gone (a phase without network): the client sees a close
            upstream.close()
            client.close()
            slots.release()
            continue
        if not start_thread(relay, client, upstream, slots):
            client.close()
            upstream.close()
            slots.release()


def relay(client, upstream, slots):
    """Copy both ways until each side has ended, then close both and free the slot."""
    done = threading.Event()

    def pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(1)  # SHUT_WR: the other side sees the end of this direction
        except OSError:
            pass

    if not start_thread(lambda: (pump(upstream, client), done.set())):
        done.set()
    pump(client, upstream)
    done.wait()
    client.close()
    upstream.close()
    slots.release()


def kill_tree(roots=(), pgid=None, marker=None, adopted_since=None, spared=frozenset(), budget=KILL_BUDGET_S,
              scope=None, freeze=False):
    """SIGKILL the tree until nothing of it is left, for at most ``budget`` seconds.

    With ``freeze`` (the runner's calls) and as PID 1 of its pid namespace (a container, bwrap),
    it first stops every other process of the namespace at once (``kill(-1, SIGSTOP)``, which a
    fork cannot outrun), finds and kills the tree while nothing else runs, then lets the rest go
    on (SIGCONT: a process stopped before is continued too). Never on a host (``local``'s sweep,
    or swe-sandbox itself the PID 1 of a container it runs in). Elsewhere each round stops every
    process found before killing it, so a fork bomb or a chain of ``setsid`` re-spawns cannot
    outrun it for long; rounds repeat at once while victims are found.
    """
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    frozen = freeze and os.getpid() == 1 and signal_all(signal.SIGSTOP)
    try:
        kill_rounds(roots, pgid, marker, adopted_since, spared, time.monotonic() + budget, scope)
    finally:
        if frozen:
            signal_all(signal.SIGCONT)


def signal_all(sig):
    """``kill(-1, sig)``: every process this one may signal but itself; whether it went out."""
    try:
        os.kill(-1, sig)
    except OSError:
        return False
    return True


def kill_rounds(roots, pgid, marker, adopted_since, spared, deadline, scope):
    """``kill_tree``'s rounds: find the tree, stop and kill it, until none is left or ``deadline``."""
    while True:
        victims = find_tree(proc_table(scope), roots, pgid, marker, adopted_since, spared)
        if not victims and scope is not None:  # /proc/*/children can miss a process mid-fork
            scope = None
            victims = find_tree(proc_table(), roots, pgid, marker, adopted_since, spared)
        if not victims or time.monotonic() >= deadline:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass


def discard(fd):
    """Read ``fd`` to end of file, throwing the data away, then close it."""
    try:
        while os.read(fd, READ_CHUNK):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


class Runner(object):
    def __init__(self, stdin, stdout, key, max_lifetime=None, tether=None):
        self.stdin = stdin
        self.stdout = stdout
        #: With a direct channel, the runner's own stdin: its end of file closes the runner.
        self.tether = tether
        self.auth = FrameAuth(key, b"runner", b"host")
        self.max_lifetime = max_lifetime
        self.run_id = "%d-%s" % (os.getpid(), os.urandom(6).hex())
        self.seq = 0
        #: Tokens of the commands run so far (bytes): their daemons are spared by later timeouts.
        self.tokens = set()
        self.closing = False
        #: Requests with an id up to this one are cancelled (``{"op": "cancel"}``); ids only grow.
        self.cancel_upto = 0
        self.requests = []
        self.cond = threading.Condition()
        self.wake_r, self.wake_w = os.pipe()
        #: Where kill_tree looks: this runner's subtree when it is a subreaper, else all of /proc.
        self.scope = os.getpid() if SUBREAPER[0] else None
        #: The runner's own environment, read once (``os.environ`` decodes every item on each copy).
        self.base_env = dict(os.environ)
        #: Where commands start by default: the runner's directory, by path (a command may remove and
        #: make it again: the runner's own handle would then name a deleted directory).
        self.home = os.getcwd()

    # -- plumbing -----------------------------------------------------------------------------
    def wake(self):
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    def read_requests(self):
        """Reader thread: queue frames from the host; end of file means the host is gone."""
        while True:
            try:
                frame = read_frame(self.stdin, self.auth)
            except (OSError, ValueError, BadFrame):
                frame = None  # a forged or garbled request: stop serving (fail closed)
            with self.cond:
                if frame is None or frame.get("op") == "close":
                    self.closing = True
                elif frame.get("op") == "cancel":
                    self.cancel_upto = max(self.cancel_upto, int_or_zero(frame.get("id")))
                else:
                    self.requests.append(frame)
                self.cond.notify()
            self.wake()
            if self.closing:
                return

    def watch_tether(self):
        """Tether thread (direct channel): the host's end of the runner's stdin closing (the host is
        gone, or closed or interrupted the sandbox) closes the runner as an end of file would."""
        try:
            while self.tether.read1(65536):
                pass
        except (OSError, ValueError):
            pass
        with self.cond:
            self.closing = True
            self.cond.notify()
        self.wake()

    def next_request(self):
        """The next request, or None once closing; while none comes, orphans' zombies are reaped
        every ``REAP_S`` (what a timeout killed, background jobs that ended: none lingers as a
        zombie until the next command)."""
        while True:
            with self.cond:
                if not self.requests and not self.closing:
                    self.cond.wait(REAP_S)
                if self.closing:
                    return None
                if self.requests:
                    return self.requests.pop(0)
            self.reap()

    @staticmethod
    def command_fd(command, rewind=False):
        """An unlinked file holding ``command`` (str, or bytes: a stdin), memfd where there is one
        (nothing touches disk); ``rewind``: its offset back at 0, to be read as a stdin."""
        if isinstance(command, bytes):
            data = command
        else:
            try:
                data = command.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a lone surrogate: pass it on rather than fail
                data = command.encode("utf-8", "surrogatepass")
        try:
            fd = os.memfd_create("swe-sandbox-command", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            fd, path = tempfile.mkstemp(prefix="swe-sandbox-command-")
            os.unlink(path)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if rewind:
            os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def cancelled(self, req):
        """Whether the host cancelled request ``req``."""
        return 0 < int_or_zero(req.get("id")) <= self.cancel_upto

    # -- one command ----------------------------------------------------------------------------
    def run(self, req):
        self.seq += 1
        started = time.monotonic()
        if self.cancelled(req):  # cancelled before it started: nothing to run
            return early_result(req, CANCELLED_MESSAGE, -1, started, cancelled=True)
        cwd = req.get("cwd") or self.home
        if not os.path.isdir(cwd):
            msg = bad_cwd_message(cwd, "notdir" if os.path.exists(cwd) else "missing")
            return early_result(req, msg, 1, started)
        token = "%s.%d.%s" % (self.run_id, self.seq, os.urandom(8).hex())
        env = dict(self.base_env)
        env.update(req.get("env") or {})
        env[RUN_TOKEN_VAR] = self.run_id
        env[CMD_TOKEN_VAR] = token
        as_user, refusal = user_options(req.get("user"), env)
        if refusal is not None:
            return early_result(req, refusal[1], 1, started, user_error=refusal[0])
        command_fd = self.command_fd(req["command"])
        stdin = self.command_fd(req["input"], rewind=True) if req.get("input") is not None else None
        since = boot_ticks()  # no later than the shell's own /proc starttime
        outputs, ends = open_outputs(req)
        try:
            # bash expands $(< /dev/fd/N) first, then closes N for the command itself.
            argv = ["bash", "-c", OOM_FIRST + 'eval "$(< /dev/fd/%d)" %d<&-' % (command_fd, command_fd)]
            proc = self.spawn(argv, (stdin, ends[0], ends[-1]), command_fd, cwd, env, as_user)
        except OSError as exc:
            for output in outputs:
                os.close(output.fd)
            if as_user and isinstance(exc, PermissionError):
                msg = "swe-sandbox: cannot run as user %s: %s" % (req.get("user"), exc)
                return early_result(req, msg, 126, started, user_error="not_permitted")
            msg = "swe-sandbox: could not start bash: %s" % exc
            return early_result(req, msg, 127, started)
        finally:
            for fd in set(ends) | {command_fd} | ({stdin} if stdin is not None else set()):
                os.close(fd)
        marker = ("\0%s=%s\0" % (CMD_TOKEN_VAR, token)).encode()
        if since is None:
            stat = proc_stat(proc.pid)
            since = stat and stat[3]
        tags = (marker, None if since is None else (since, proc.pid), frozenset(self.tokens))
        self.tokens.add(token.encode())
        try:
            return self.collect(req, proc, outputs, tags, started)
        except BaseException:  # whatever went wrong here, the command's tree does not outlive it
            kill_tree([proc.pid], proc.pid, *tags, scope=self.scope, freeze=True)
            raise

    def spawn(self, argv, fds, keep_fd, cwd, env, as_user):
        """The command's ``Shell``: ``argv`` in a new session with ``fds`` (stdin, None for
        /dev/null; stdout; stderr) and ``keep_fd`` inherited, nothing else. Retried for up to
        ``SPAWN_RETRY_S`` while the process limit is full (EAGAIN: a killed fork bomb's processes
        are still dying, or zombies wait to be reaped)."""
        give_up = time.monotonic() + SPAWN_RETRY_S
        while True:
            try:
                return Shell.spawn(argv, fds, keep_fd, cwd, env, as_user)
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    raise
                self.reap()
                time.sleep(0.05)

    def collect(self, req, proc, outputs, tags, started):
        exited = threading.Event()
        sel = selectors.DefaultSelector()
        if proc.pidfd is not None:  # readable once the shell exits: no thread, no polling
            sel.register(proc.pidfd, selectors.EVENT_READ, proc)
            polling = False
        else:
            def wait():
                proc.wait()
                exited.set()
                self.wake()

            polling = not start_thread(wait)  # no thread to be had (a fork bomb): poll the status
        for output in outputs:
            sel.register(output.fd, selectors.EVENT_READ, output)
        sel.register(self.wake_r, selectors.EVENT_READ, None)
        try:
            return self.collect_in(req, proc, outputs, tags, started, sel, exited, polling)
        finally:
            sel.close()
            proc.release()

    def collect_in(self, req, proc, outputs, tags, started, sel, exited, polling):
        timeout = req.get("timeout")
        deadline = None if timeout is None else started + float(timeout)
        timed_out = cancelled = False
        drain_end = None
        last_data = time.monotonic()
        next_reap = last_data + REAP_S  # the serve loop reaped just before this command
        while True:
            now = time.monotonic()
            if (polling or proc.exit_seen) and proc.poll() is not None:
                exited.set()
            if now >= next_reap:  # orphans of background jobs: no zombie pile-up in a long command
                self.reap(keep=proc.pid)
                next_reap = now + REAP_S
            for output in outputs:
                self.send_chunks(req, output, now)
            cancelled = self.cancelled(req)
            if self.closing or cancelled or (deadline is not None and now >= deadline and not exited.is_set()):
                timed_out = not (self.closing or cancelled)
                kill_tree([proc.pid], proc.pid, *tags, scope=self.scope, freeze=True)
                self.read_until(sel, outputs, time.monotonic() + KILL_COLLECT_S)
                proc.wait_briefly(exited, 0.2)  # the status is not needed: a timeout reports -1
                break
            if exited.is_set():
                if all(output.eof for output in outputs):
                    break
                if drain_end is None:  # one more select first: what the shell wrote last may be unread
                    drain_end = now + DRAIN_MAX_S
                elif now >= drain_end or now - last_data >= DRAIN_IDLE_S:
                    break
            waits = [t for t in (deadline, drain_end, next_reap) if t is not None]
            waits.extend(output.tap.due() for output in outputs if output.tap and output.tap.due() is not None)
            if drain_end is not None:
                waits.append(last_data + DRAIN_IDLE_S)
            wait_s = max(0.0, min(waits) - now) if waits else None
            if polling:
                wait_s = POLL_S if wait_s is None else min(wait_s, POLL_S)
            if self.read_ready(sel, wait_s):
                last_data = time.monotonic()
        for output in outputs:
            output.finish()
        if timed_out:
            return command_result(outputs, -1, timeout_message(timeout), started, timed_out=True)
        if self.closing:
            return command_result(outputs, -1, "The sandbox was closed during the command", started)
        if cancelled:
            return command_result(outputs, -1, CANCELLED_MESSAGE, started, cancelled=True)
        code = proc.returncode
        return command_result(outputs, 128 - code if code < 0 else code, "", started)

    def read_ready(self, sel, wait_s):
        """Read what is ready within ``wait_s`` seconds into the outputs; True when data came."""
        got = False
        for key, _ in sel.select(wait_s):
            if key.data is None:
                os.read(self.wake_r, 4096)
            elif isinstance(key.data, Shell):
                key.data.exit_seen = True
                sel.unregister(key.fd)
            elif not key.data.eof:
                if key.data.read():
                    got = True
                else:
                    sel.unregister(key.fd)
        return got

    def send_chunks(self, req, output, now):
        """Send what ``output``'s tap has due as ``chunk`` frames of streamed request ``req``, only
        while the channel has room: small frames (``CHUNK_BYTES``) into a writable pipe never block,
        so a host that stops reading stalls the stream, never the command's timeout."""
        tap = output.tap
        for _ in range(CHUNK_FRAMES_MAX if tap is not None else 0):
            if tap.due() is None or tap.due() > now:
                return
            try:
                room = select.select([], [self.stdout], [], 0)[1]
            except (OSError, ValueError):
                room = [self.stdout]  # not selectable: write as any frame is written
            if not room:
                tap.defer(now)
                return
            text = tap.take(now, CHUNK_BYTES)
            if text:
                frame = {"op": "chunk", "id": req.get("id"), "output": text}
                if output.name != "output":
                    frame["stream"] = output.name
                write_frame(self.stdout, frame, self.auth, raw=True)

    def read_until(self, sel, outputs, until):
        """After a kill: read what is left until end of file or ``until``."""
        while not all(output.eof for output in outputs):
            now = time.monotonic()
            if now >= until:
                break
            self.read_ready(sel, until - now)

    # -- life cycle ------------------------------------------------------------------------------
    def reap(self, keep=None):
        """Reap exited children: orphans re-parented to this runner (a subreaper, or PID 1).

        ``keep``: the running command's shell, whose status its own waiter collects; with it, only
        zombies among the other children are reaped (from /proc; nothing where it cannot be read).
        """
        if keep is not None:
            for pid in children(os.getpid()):
                stat = proc_stat(pid) if pid != keep else None
                if stat is not None and stat[0] == b"Z":
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
            return
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def shutdown(self):
        """Kill every process a command started (tokens, and orphans re-parented to us)."""
        marker = ("\0%s=%s\0" % (RUN_TOKEN_VAR, self.run_id)).encode()
        kill_tree([os.getpid()], None, marker, budget=4 * KILL_BUDGET_S, scope=self.scope, freeze=True)
        self.reap()

    def reset(self, req):
        """``{"op": "reset"}``: kill every process but this runner, remove and clear paths, and say
        what is still alive."""
        marker = ("\0%s=%s\0" % (RUN_TOKEN_VAR, self.run_id)).encode()
        if req.get("kill") is False:  # only the entries, nothing touched
            return {"op": "result", "processes": [], "errors": [],
                    "entries": dict((str(p), path_entry(str(p))) for p in req.get("digest") or [])}
        kill_tree([os.getpid()], None, marker, budget=4 * KILL_BUDGET_S, scope=self.scope, freeze=True)
        if os.getpid() == 1:  # every process of the namespace, also those entered from outside
            kill_tree(sorted(proc_table()), budget=4 * KILL_BUDGET_S, freeze=True)
            remove_sysv_ipc()  # the namespace's own: shared memory, queues, semaphores
        errors = []
        for path in req.get("remove") or []:
            remove_path(str(path), errors)
        for path in req.get("clear") or []:
            clear_dir(str(path), errors)
        deadline = time.monotonic() + KILL_COLLECT_S
        while True:
            self.reap()
            left = self.survivors(marker)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        entries = dict((str(path), path_entry(str(path))) for path in req.get("digest") or [])
        return {"op": "result", "processes": left, "errors": errors[:100], "entries": entries}

    def survivors(self, marker):
        """``"pid: command line"`` of every live process of the sandbox but this runner."""
        table = proc_table()
        pids = set(table) if os.getpid() == 1 else find_tree(table, [os.getpid()], None, marker)
        pids.discard(os.getpid())
        return ["%d: %s" % (pid, cmdline_of(pid)) for pid in sorted(pids)]

    def answer(self, req):
        """The reply to one request; a bug or a bad request never ends the runner."""
        if req.get("op") == "reset":
            return self.reset(req)
        if req.get("op") == "forward":
            return forward(req)
        if req.get("op") != "exec":
            return {"op": "error", "message": "unknown op %r" % req.get("op")}
        try:
            return self.run(req)
        except Exception as exc:  # report, stay alive for the next command
            msg = "swe-sandbox runner error: %s: %s" % (type(exc).__name__, exc)
            return early_result(req, msg, -1, time.monotonic())  # the shape asked for (separate stderr)

    def end_of_life(self):
        """Lifetime guard thread: at ``max_lifetime`` (seconds, monotonic) close like an end of file.

        It lives in the runner, out of the commands' reach (as PID 1 of a container the runner
        cannot be signalled from inside; non-dumpable, it cannot be traced); its exit ends the
        container.
        """
        end = time.monotonic() + float(self.max_lifetime)
        while time.monotonic() < end:
            time.sleep(min(60.0, max(0.01, end - time.monotonic())))
        self.closing = True
        try:
            self.shutdown()
        finally:
            os._exit(0)  # no reply: the host sees the sandbox end, as at any other death

    def serve(self):
        write_frame(self.stdout, {
            "op": "ready", "protocol": PROTOCOL_VERSION, "pid": os.getpid(), "run_id": self.run_id,
            "python": "%d.%d.%d" % sys.version_info[:3], "cwd": self.home,
        }, self.auth)
        threading.Thread(target=self.read_requests, daemon=True).start()
        if self.tether is not None:
            threading.Thread(target=self.watch_tether, daemon=True).start()
        if self.max_lifetime:
            threading.Thread(target=self.end_of_life, daemon=True).start()
        try:
            while True:
                req = self.next_request()
                if req is None:
                    return
                self.reap()
                reply = self.answer(req)
                reply["id"] = req.get("id")
                write_frame(self.stdout, reply, self.auth)
        except (BrokenPipeError, OSError):
            return
        finally:
            self.shutdown()


#: Paths of ``bash`` found per ``PATH`` value (``bash_path``).
BASH_PATHS = {}  # type: dict[str, str]


def bash_path(env):
    """Where ``bash`` is on ``env``'s ``PATH`` (as ``subprocess`` looks it up), cached per ``PATH``.

    Raises:
        FileNotFoundError: no ``bash`` there.
    """
    search = env.get("PATH", os.defpath)
    found = BASH_PATHS.get(search)
    if found is None:
        for folder in search.split(os.pathsep):
            candidate = os.path.join(folder or ".", "bash")
            if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
                found = candidate
                break
        else:
            raise FileNotFoundError(2, "No such file or directory", "bash")
        if os.path.isabs(found):
            BASH_PATHS[search] = found
    return found


class Shell(object):
    """One command's shell: ``pid``; ``returncode`` once reaped (negative: killed by that signal);
    ``pidfd``, readable once it exits (None where Python or the kernel lack pidfds, or a seccomp
    filter refuses them: a waiter thread, or polling, then).

    Started with ``os.posix_spawn`` (a vfork in C: ~0.2 ms less per command than ``Popen``), or
    ``subprocess.Popen`` to run as another user or on Python < 3.8.
    """

    #: The runner's directory and /dev/null, held open (``posix_spawn`` has no ``cwd``: the runner
    #: enters the command's directory to spawn and returns).
    home_fd = None
    devnull = None

    def __init__(self, pid, popen=None):
        self.pid = pid
        self.popen = popen
        self.returncode = None
        #: Set when ``pidfd`` was seen readable: the shell has exited.
        self.exit_seen = False
        self.pidfd = None
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass

    @classmethod
    def spawn(cls, argv, fds, keep_fd, cwd, env, as_user):
        """Start ``argv`` in a new session, ``fds`` = (stdin or None for /dev/null, stdout, stderr),
        ``keep_fd`` inherited too, in ``cwd``. Raises ``OSError`` as ``Popen`` does."""
        stdin, stdout, stderr = fds
        if as_user or not hasattr(os, "posix_spawn"):
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=stdout, stderr=stderr,
                pass_fds=(keep_fd,), cwd=cwd, env=env, start_new_session=True, close_fds=True, **as_user
            )
            return cls(popen.pid, popen)
        if cls.home_fd is None:
            cls.home_fd = os.open(".", os.O_RDONLY)
            cls.devnull = os.open(os.devnull, os.O_RDONLY)
        actions = [(os.POSIX_SPAWN_DUP2, cls.devnull if stdin is None else stdin, 0),
                   (os.POSIX_SPAWN_DUP2, stdout, 1), (os.POSIX_SPAWN_DUP2, stderr, 2),
                   (os.POSIX_SPAWN_DUP2, keep_fd, keep_fd)]  # dup2 onto itself: inherited (POSIX 2017)
        os.chdir(cwd)
        try:
            try:
                pid = os.posix_spawn(bash_path(env), argv, env, file_actions=actions, setsid=True,
                                     setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
            except FileNotFoundError:  # bash moved since it was found: look again, once
                BASH_PATHS.pop(env.get("PATH", os.defpath), None)
                pid = os.posix_spawn(bash_path(env), argv, env, file_actions=actions, setsid=True,
                                     setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        finally:
            os.fchdir(cls.home_fd)
        return cls(pid)

    def poll(self):
        """``returncode`` if the shell has exited (reaping it), else None."""
        if self.returncode is None:
            if self.popen is not None:
                self.returncode = self.popen.poll()
                return self.returncode
            self.reaped(os.WNOHANG)
        return self.returncode

    def wait(self):
        """Block until the shell exits (a waiter thread's call)."""
        if self.popen is not None:
            self.returncode = self.popen.wait()
        elif self.returncode is None:
            self.reaped(0)

    def reaped(self, flags):
        """``waitpid`` the shell with ``flags``; its status, once it came, as ``returncode``."""
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: as Popen, take it as 0
            pid, status = self.pid, 0
        if pid:
            self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def wait_briefly(self, exited, within):
        """After a kill: wait at most ``within`` seconds for the shell's exit (``exited``: the
        waiter thread's event, when there is one)."""
        if self.pidfd is not None:
            try:
                select.select([self.pidfd], [], [], within)
            except (OSError, ValueError):
                pass
            self.poll()
        else:
            exited.wait(within)

    def release(self):
        """Close the pidfd (the shell is reaped by then, or will be by ``Runner.reap``)."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class CommandOutput(object):
    """One output pipe of a command: its read end, kept head and tail, and (streamed) its tap.

    ``name`` is the result key its text goes to: ``output`` (merged, or stdout alone), ``stderr``.
    """

    def __init__(self, name, fd, cap, stream):
        self.name = name
        self.fd = fd
        self.buf = OutputBuffer(cap)
        self.tap = StreamTap(self.buf) if stream else None
        self.eof = False

    def read(self):
        """Read what the pipe has; False at end of file."""
        data = os.read(self.fd, READ_CHUNK)
        if data:
            self.buf.feed(data)
        else:
            self.eof = True
        return bool(data)

    def finish(self):
        """Close the read end, or hand it to a discarding thread while background jobs hold the pipe."""
        if self.eof or not start_thread(discard, self.fd):
            os.close(self.fd)  # no thread to be had: background writers get EPIPE rather than block


def open_outputs(req):
    """``(outputs, write ends)`` of a command: one pipe for stdout and stderr, or two with
    ``"stderr": "separate"`` (write ends then stdout's, stderr's)."""
    cap = int(req.get("max_output_bytes") or 10 << 20)
    names = ("output", "stderr") if req.get("stderr") == "separate" else ("output",)
    outputs, ends = [], []
    for name in names:
        read_fd, write_fd = os.pipe()
        outputs.append(CommandOutput(name, read_fd, cap, bool(req.get("stream"))))
        ends.append(write_fd)
    return outputs, ends


def user_options(user, env):
    """``(Popen keyword arguments, None)`` to run as ``user`` (a name or uid; None: as the runner),
    with ``HOME``, ``USER`` and ``LOGNAME`` set in ``env``; or ``({}, (code, message))`` when it
    cannot be (``code``: ``unknown`` or ``not_permitted``)."""
    if not user:
        return {}, None
    try:
        import pwd

        entry = pwd.getpwuid(int(user)) if str(user).isdigit() else pwd.getpwnam(str(user))
    except (KeyError, ImportError):
        return {}, ("unknown", "swe-sandbox: no such user in the sandbox: %s" % user)
    if sys.version_info < (3, 9):
        return {}, ("not_permitted", "swe-sandbox: running as another user needs python >= 3.9 in the sandbox")
    env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    try:
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    except OSError:
        groups = [entry.pw_gid]
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": groups}, None


def early_result(req, message, returncode, started, cancelled=False, user_error=None):
    """The result of a command that did not start: ``message`` is its output (its stderr with
    separate streams) and, but for a cancel, its ``exception_info``."""
    outputs = [CommandOutput(name, None, 1 << 20, False) for name in
               (("output", "stderr") if req.get("stderr") == "separate" else ("output",))]
    if message and not cancelled:
        outputs[-1].buf.feed((message + "\n").encode("utf-8"))
    result = command_result(outputs, returncode, message, started, cancelled=cancelled)
    if user_error is not None:
        result["extra"]["user_error"] = user_error
    return result


def command_result(outputs, returncode, info, started, timed_out=False, cancelled=False):
    """``make_result`` over a command's outputs: the first is ``output``; a second, ``stderr``, adds
    its text and ``extra.stderr_bytes`` / ``extra.stderr_dropped_bytes``."""
    result = make_result(None, returncode, info, started, outputs[0].buf, timed_out=timed_out, cancelled=cancelled)
    for output in outputs[1:]:
        text, dropped = output.buf.text()
        result[output.name] = text
        result["extra"][output.name + "_bytes"] = output.buf.total
        result["extra"][output.name + "_dropped_bytes"] = dropped
    return result


def int_or_zero(value):
    """``value`` if it is an int (a request id), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def make_result(text, returncode, info, started, buf, timed_out=False, cancelled=False):
    """The ``result`` frame of one command (DESIGN.md section 1), built the same way by the runner and
    by the host's exec fallback.

    Args:
        text: appended to ``buf`` first (a message of the runner's own), or None.
        returncode: the shell's exit status (128+N on signal N), -1 when it did not finish.
        info: ``exception_info``: "" on a normal run, else one sentence.
        started: ``time.monotonic()`` when the command started (seconds).
        buf: the command's ``OutputBuffer``.
        timed_out: the command was killed by its timeout.
        cancelled: the host cancelled the command (``extra.cancelled`` is then set, True).
    """
    if text is not None:
        buf.feed(text.encode("utf-8"))
    output, dropped = buf.text()
    extra = {
        "timed_out": timed_out,
        "truncated": dropped > 0,
        "output_bytes": buf.total,
        "dropped_bytes": dropped,
        "duration_s": round(time.monotonic() - started, 6),
    }
    if cancelled:
        extra["cancelled"] = True
    return {"op": "result", "output": output, "returncode": returncode, "exception_info": info, "extra": extra}


def timeout_message(timeout):
    """``exception_info`` of a command its timeout (seconds) killed."""
    return "Command timed out after %s seconds" % _num(timeout)


#: Why a working directory cannot be used, by the code the runner and the exec fallback report.
BAD_CWD = {"missing": "does not exist", "notdir": "is not a directory", "noaccess": "cannot be entered"}


def bad_cwd_message(cwd, why):
    """The output line and ``exception_info`` for a ``cwd`` that cannot be used (``why``: a ``BAD_CWD`` key)."""
    return "swe-sandbox: working directory %s %s" % (cwd, BAD_CWD[why])


def _num(value):
    value = float(value)
    return "%d" % value if value == int(value) else "%g" % value


SUBREAPER = [False]


def harden():
    """Become a subreaper, non-dumpable and renamed; shrug off stray signals.

    Non-dumpable: commands (same uid, no capabilities) can neither ptrace the runner nor open its
    pipes through ``/proc/<pid>/fd``, so they cannot forge or eat frames. The name keeps
    ``pkill python3`` from matching it, and no-op handlers (reset to default in commands at exec)
    make ``pkill -f python`` harmless; the host ends the runner by closing its stdin.
    """
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        SUBREAPER[0] = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(b"swe-sandbox-run"), 0, 0, 0)
    except Exception:
        pass  # not Linux, or no libc: orphans go to init, tokens still find them


def seal_fds():
    """Make every descriptor the runner inherited (but 0-2) close on exec: commands are spawned
    without closing the rest (``Shell.spawn``), and Python opens its own that way already."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        try:
            if int(name) > 2:
                os.set_inheritable(int(name), False)
        except (ValueError, OSError):
            pass


def connect_channel(path):
    """The connected unix socket of the host's direct channel at ``path``; None (the reason on
    stderr) when it cannot be reached."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except (OSError, TypeError) as exc:
        sock.close()
        sys.stderr.write("swe-sandbox runner: no direct channel at %r (%s): serving on stdin and stdout\n"
                         % (path, exc))
        sys.stderr.flush()
        return None
    return sock


#: Modules the runner imports where it needs them (the host never does), imported by ``preload``.
LATER_MODULES = ("ctypes", "pwd", "socket")


def preload():
    """Import ``LATER_MODULES`` now, before any command runs: a command that is root in its sandbox
    can rewrite the sandbox's standard library, and a module first imported later (``pwd`` for a
    ``user``, ``socket`` for a network forward) would run that code inside the runner. Once
    imported, a later ``import`` only finds it in ``sys.modules``."""
    for name in LATER_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass  # a Python built without it: what needs it fails then, as before


def main():
    """Read the host's ``hello`` (the key, options), then serve until end of file."""
    preload()
    harden()
    seal_fds()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        hello = read_frame(stdin)
    except BadFrame:
        hello = None
    if not isinstance(hello, dict) or hello.get("op") != "hello":
        sys.stderr.write("swe-sandbox runner: expected the host's hello frame\n")
        sys.exit(2)
    key, lifetime = bytes.fromhex(hello["key"]), hello.get("max_lifetime")
    sock = connect_channel(hello["channel"]) if hello.get("channel") else None
    if sock is None:
        Runner(stdin, stdout, key, lifetime).serve()
    else:
        Runner(sock.makefile("rb"), sock.makefile("wb"), key, lifetime, tether=stdin).serve()


if __name__ == "__main__":
    main()
