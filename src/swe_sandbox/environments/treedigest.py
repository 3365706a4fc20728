"""What a file tree holds, entry by entry: the proof a verified reset compares (DESIGN.md section 10).

A tree's digest is ``{relative path: entry}`` where an entry is one line of what matters about the
path: its type, its permission bits, and for a regular file its size and the sha256 of its bytes,
for a symlink its target. Modification times are left out (a restore may not keep them, and no
test outcome depends on them); owners are left out of host trees (a copy there belongs to the
sandbox's uid by construction) and kept for archives (root inside a container may ``chown``).

Two readers give the same form: ``host_tree`` walks a host directory through directory
descriptors, never following a link below its root (the tree is the sandbox's and may change under
it, ``hostcopy``'s rules), and ``archive_tree`` reads a tar stream (what a container engine's
archive API sends). ``differences`` says, in readable lines, how two digests differ.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

#: Most entries one digest holds; a bigger tree is drift in itself (``TreeTooLarge``).
MAX_ENTRIES = 500_000
#: Most difference lines ``differences`` returns (the rest is counted).
MAX_LINES = 50
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFDIR: "dir", stat.S_IFREG: "file", stat.S_IFLNK: "link", stat.S_IFIFO: "fifo",
          stat.S_IFSOCK: "socket", stat.S_IFCHR: "chardev", stat.S_IFBLK: "blockdev"}


class TreeTooLarge(ValueError):
    """A tree has more than ``MAX_ENTRIES`` entries."""


def _entry(kind: str, mode: int, extra: str = "", owner: str = "") -> str:
    return " ".join(part for part in (kind, f"{mode & 0o7777:04o}", owner, extra) if part)


def host_tree(root: str | os.PathLike) -> dict[str, str]:
    """The digest of host directory ``root`` (opened as given; nothing below it is followed).

    Raises:
        FileNotFoundError: ``root`` does not exist.
        TreeTooLarge: more than ``MAX_ENTRIES`` entries.
    """
    found: dict[str, str] = {}
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        found[""] = _entry("dir", os.fstat(fd).st_mode)
        _walk_dir(fd, "", found)
    finally:
        os.close(fd)
    return found


def _walk_dir(fd: int, prefix: str, found: dict[str, str]) -> None:
    for name in sorted(os.listdir(fd)):
        rel = prefix + name
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if len(found) >= MAX_ENTRIES:
            raise TreeTooLarge(f"more than {MAX_ENTRIES} entries")
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "other")
        if kind == "file":
            found[rel] = _entry(kind, st.st_mode, _file_digest(fd, name))
        elif kind == "link":
            found[rel] = _entry(kind, st.st_mode, "-> " + os.readlink(name, dir_fd=fd))
        elif kind == "dir":
            found[rel] = _entry(kind, st.st_mode)
            try:
                sub = os.open(name, _DIR, dir_fd=fd)
            except OSError:  # replaced meanwhile: what it is now is recorded on the next digest
                found[rel] += " unreadable"
                continue
            try:
                _walk_dir(sub, rel + "/", found)
            finally:
                os.close(sub)
        else:
            found[rel] = _entry(kind, st.st_mode)


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


def archive_tree(stream: Iterable[bytes] | IO[bytes], *, first_only: bool = False) -> dict[str, str]:
    """The digest of a tar stream (a container engine's archive of one path), owners kept.

    Paths are relative to the archive's top entry (``""``); ``first_only``: only that entry (a
    directory's own mode and owner, not what is below it), and the rest of the stream is not read.

    Raises:
        tarfile.TarError: not a tar stream.
        TreeTooLarge: more than ``MAX_ENTRIES`` entries.
    """
    fileobj = stream if hasattr(stream, "read") else _ChunkReader(stream)  # type: ignore[arg-type]
    found: dict[str, str] = {}
    top = None
    with tarfile.open(fileobj=fileobj, mode="r|") as archive:  # type: ignore[arg-type]
        for member in archive:
            name = member.name.rstrip("/")
            top = name if top is None else top
            rel = "" if name == top else name[len(top) + 1:]
            if len(found) >= MAX_ENTRIES:
                raise TreeTooLarge(f"more than {MAX_ENTRIES} entries")
            found[rel] = _member_entry(archive, member)
            if first_only:
                break
    return found


def _member_entry(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    owner = f"{member.uid}:{member.gid}"
    if member.isreg():
        data = archive.extractfile(member)
        assert data is not None  # a regular member has data
        return _entry("file", member.mode, _stream_digest(lambda: data.read(1 << 20)), owner)
    if member.issym():
        return _entry("link", member.mode, "-> " + member.linkname, owner)
    if member.islnk():  # a hard link: the same bytes as its target, already recorded
        return _entry("file", member.mode, "= " + member.linkname, owner)
    kind = "dir" if member.isdir() else "fifo" if member.isfifo() else "device" if member.isdev() else "other"
    return _entry(kind, member.mode, "", owner)


class _ChunkReader:
    """A file-like ``read`` over an iterable of byte chunks (the docker SDK's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks, self._buf = iter(chunks), b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        if size < 0:
            size = len(self._buf)
        out, self._buf = self._buf[:size], self._buf[size:]
        return out


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


def write_digest(path: Path, digest: dict[str, str]) -> None:
    """Keep ``digest`` in file ``path`` (one ``rel\\tentry`` line each; names are NUL-free)."""
    path.write_text("".join(f"{rel}\t{entry}\n" for rel, entry in digest.items()), encoding="utf-8",
                    errors="surrogateescape")
