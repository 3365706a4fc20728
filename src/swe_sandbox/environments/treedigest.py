"""What a file tree holds, entry by entry: the proof a verified reset compares (DESIGN.md section 10).

A tree's digest is ``{relative path: entry}`` where an entry is one line of what matters about the
path: its type, its permission bits, its owner (``own``: the sandbox's, else the numbers), and for
a regular file its size and the sha256 of its bytes, for a symlink its target. Modification times
are left out (a restore may not keep them, and no test outcome depends on them). Containers'
resets compare entries the runner reads instead (``runner.path_entry``).

``host_tree`` walks a host directory through directory descriptors, never following a link below
its root (the tree is the sandbox's and may change under it, ``hostcopy``'s rules);
``differences`` says, in readable lines, how two digests differ.
"""

from __future__ import annotations

import hashlib
import os
import stat

from swe_sandbox.errors import SnapshotError

#: Most entries one digest holds; a bigger tree cannot be kept (``SnapshotError``).
MAX_ENTRIES = 500_000
#: What a tree past ``MAX_ENTRIES`` is called in the error.
TOO_LARGE = "the tree is too large for a snapshot"
#: Most difference lines ``differences`` returns (the rest is counted).
MAX_LINES = 50
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFDIR: "dir", stat.S_IFREG: "file", stat.S_IFLNK: "link", stat.S_IFIFO: "fifo",
          stat.S_IFSOCK: "socket", stat.S_IFCHR: "chardev", stat.S_IFBLK: "blockdev"}


def _entry(kind: str, st: os.stat_result, own: tuple[int, int], extra: str = "") -> str:
    owner = "own" if (st.st_uid, st.st_gid) == own else f"{st.st_uid}:{st.st_gid}"
    return " ".join(part for part in (kind, f"{stat.S_IMODE(st.st_mode):04o}", owner, extra) if part)


def host_tree(root: str | os.PathLike, *, own: tuple[int, int] | None = None,
              own_only: bool = False) -> dict[str, str]:
    """The digest of host directory ``root`` (opened as given; nothing below it is followed).

    Args:
        own: the ``(uid, gid)`` written as ``own`` (the sandbox's, on the host: bwrap's uid, or
            this process's for a copy it made); others are written as numbers. Default: this
            process's.
        own_only: only the root's own entry.

    Raises:
        FileNotFoundError: ``root`` does not exist.
        SnapshotError: more than ``MAX_ENTRIES`` entries.
    """
    own = own or (os.geteuid(), os.getegid())
    found: dict[str, str] = {}
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        found[""] = _entry("dir", os.fstat(fd), own)
        if not own_only:
            _walk_dir(fd, "", found, own)
    finally:
        os.close(fd)
    return found


def _walk_dir(fd: int, prefix: str, found: dict[str, str], own: tuple[int, int]) -> None:
    for name in sorted(os.listdir(fd)):
        rel = prefix + name
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if len(found) >= MAX_ENTRIES:
            raise SnapshotError(f"{TOO_LARGE}: more than {MAX_ENTRIES} entries")
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "other")
        if kind == "file":
            found[rel] = _entry(kind, st, own, _file_digest(fd, name))
        elif kind == "link":
            found[rel] = _entry(kind, st, own, "-> " + os.readlink(name, dir_fd=fd))
        elif kind == "dir":
            found[rel] = _entry(kind, st, own)
            try:
                sub = os.open(name, _DIR, dir_fd=fd)
            except OSError:  # replaced meanwhile: what it is now is recorded on the next digest
                found[rel] += " unreadable"
                continue
            try:
                _walk_dir(sub, rel + "/", found, own)
            finally:
                os.close(sub)
        else:
            found[rel] = _entry(kind, st, own)


def _file_digest(dir_fd: int, name: str) -> str:
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        return _stream_digest(lambda: os.read(fd, 1 << 20))
    finally:
        os.close(fd)


def _stream_digest(read) -> str:
    digest, size = hashlib.sha256(), 0
    while True:
        block = read()
        if not block:
            return f"{size} {digest.hexdigest()}"
        size += len(block)
        digest.update(block)


def differences(expected: dict[str, str], actual: dict[str, str], where: str) -> list[str]:
    """How ``actual`` differs from ``expected``, one line per path (at most ``MAX_LINES``, then a count).

    Args:
        expected: the snapshot's digest.
        actual: the digest now.
        where: the tree's name in the lines (``/testbed``, ``/tmp``).
    """
    lines = []
    for rel in sorted(set(expected) | set(actual)):
        before, now = expected.get(rel), actual.get(rel)
        if before == now:
            continue
        path = f"{where.rstrip('/')}/{rel}" if rel else where
        if before is None:
            lines.append(f"{path}: not in the snapshot ({now})")
        elif now is None:
            lines.append(f"{path}: missing ({before})")
        else:
            lines.append(f"{path}: {now}, the snapshot has {before}")
    if len(lines) > MAX_LINES:
        lines[MAX_LINES:] = [f"and {len(lines) - MAX_LINES} more paths under {where}"]
    return lines


def plan(want: dict[str, str], now: dict[str, str]) -> tuple[list[str], list[str]]:
    """How to turn the tree ``now`` into ``want`` (two digests), outermost path first: the paths to
    remove (absent from ``want``, or whose entry differs: a directory goes whole) and those to copy
    back whole from the snapshot (missing, or removed as different); nothing below a path removed
    or copied back whole is listed again. The root's own entry (``""``) is left to the comparison."""
    remove: list[str] = []
    put: list[str] = []
    done: list[str] = []  # prefixes ("a/") of what is handled whole
    for rel in sorted((set(want) | set(now)) - {""}):
        if any(rel.startswith(prefix) for prefix in done) or now.get(rel) == want.get(rel):
            continue
        if rel in now:
            remove.append(rel)
        if rel in want:
            put.append(rel)
        done.append(rel + "/")
    return remove, put
