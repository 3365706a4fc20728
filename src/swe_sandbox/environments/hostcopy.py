"""Copying a file or tree between host directories when a sandbox controls one side.

The bwrap backend's workspace is a host directory its commands write to, while they run and in the
background: any name in it may be a symlink to a host file, or become one between a check and a
use. So every step here works on directory file descriptors (``openat`` semantics through
``dir_fd``) and never follows a link below the given root: a link met on the way is copied as a
link (source side) or replaced (destination side), never traversed. That also keeps a second
download from writing through links a first one brought to the host.

Rules, the same as the container archive path: bytes, exec bits and empty directories are kept;
setuid, setgid and sticky bits are dropped; special files (FIFOs, sockets, devices) are skipped
(opening a FIFO would block the copy), but for a snapshot's copy, which makes its FIFOs again
(``keep_fifos``); symlinks are copied as links, wherever they point.

A download passes its ``limit`` (``max_download_bytes``): the whole source tree is measured first
(apparent sizes: a sparse file counts its full length; a file counts once per name, as it is copied
once per name), and nothing is written when it is over the limit. The bytes actually copied count
too, so a file that grows while it is copied is cut off before the limit is passed; then everything
this copy created is removed again (``DownloadTooLarge``). ``Budget`` is shared with the archive and
SFTP paths, which count the same way.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from pathlib import Path, PurePosixPath

from swe_sandbox.errors import DownloadTooLarge

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_IN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_OUT = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


class Budget:
    """What one download may still write on the host: ``limit`` bytes (``None``: no limit).

    ``need(size)`` before a file is written (its announced, apparent size) and ``spend(n)`` for
    each chunk before it is written (what is really copied) both raise ``DownloadTooLarge`` when the
    total would pass the limit; ``room()`` is how much more may be written.
    """

    def __init__(self, limit: int | None, source: str):
        self.limit, self.source, self.used = limit, source, 0

    def room(self) -> int:
        return (1 << 62) if self.limit is None else self.limit - self.used

    def need(self, size: int, path: str) -> None:
        if self.limit is not None and self.used + size > self.limit:
            raise DownloadTooLarge(self.limit, path, self.source)

    def spend(self, n: int, path: str) -> None:
        self.need(n, path)
        self.used += n


def copy(src_root: Path, src_rel: str, dst_root: Path, dst_rel: str, *, limit: int | None = None,
         source: str | None = None, owner: tuple[int, int] | None = None, keep_fifos: bool = False) -> None:
    """Copy ``src_root/src_rel`` to ``dst_root/dst_rel``, following no link below either root.

    ``src_rel`` / ``dst_rel`` are relative POSIX paths (``""``: the root itself). Missing parents
    of the destination are created; an existing directory is merged into; a file copied onto an
    existing directory lands inside it; a link on the way of either path is refused.

    Args:
        limit: the most bytes the copy may write (a download's ``max_download_bytes``); ``None``:
            no limit (an upload).
        source: how errors name the source (the sandbox's path); default ``src_root/src_rel``.
        owner: ``(uid, gid)`` given to every entry the copy creates, through the entry's own
            descriptor (bwrap run by root: its sandbox's unprivileged uid); existing entries keep theirs.
        keep_fifos: FIFOs are made again at the destination (a snapshot's copy), not skipped.

    Raises:
        FileNotFoundError: the source does not exist (nothing is created).
        ValueError: a path goes through a symlink, or out of its root (``..``).
        FileExistsError: a directory would replace an existing non-directory, or the reverse.
        DownloadTooLarge: the copy would write more than ``limit`` bytes; what it created is
            removed again (nothing is created when the source measures over the limit).
    """
    src_parts, dst_parts = _parts(src_rel), _parts(dst_rel)
    budget = Budget(limit, source or os.path.join(src_root, src_rel))
    src_dir = _walk(src_root, src_parts[:-1], create=False)
    try:
        name = src_parts[-1] if src_parts else "."
        try:
            st = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(src_root / src_rel)) from None
        if limit is not None:
            budget.need(_measure(src_dir, name, st, limit), budget.source)
        copier = _Copier(budget, dst_root, owner, keep_fifos)
        try:
            dst_dir = _walk(dst_root, dst_parts[:-1], create=True, made=copier.made, owner=owner)
            try:
                target = dst_parts[-1] if dst_parts else "."
                where = dst_parts
                if not stat.S_ISDIR(st.st_mode) and _is_real_dir(target, dst_dir):
                    inner = os.open(target, _DIR, dir_fd=dst_dir)
                    os.close(dst_dir)
                    dst_dir, target = inner, (src_parts[-1] if src_parts else Path(src_root).name)
                    where = [*dst_parts, target]
                copier.entry(src_dir, name, st, dst_dir, target, where, "")
            finally:
                os.close(dst_dir)
        except DownloadTooLarge:
            copier.undo()
            raise
    finally:
        os.close(src_dir)


HOST_ROOT = Path("/")


def host_rel(path: str | os.PathLike, follow_last: bool = True) -> str:
    """A host path the caller names, as ``copy``'s ``rel`` under ``HOST_ROOT``: the links in it are
    resolved first (the caller's own path is followed; what lies below it is not), the last
    component's only with ``follow_last`` (a link to copy, or to replace, stays a link)."""
    if follow_last:
        return os.path.realpath(path).lstrip("/")
    head, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(head), name).lstrip("/")


def copy_paths(src: str | os.PathLike, dst: str | os.PathLike, follow_dst: bool, limit: int | None = None) -> None:
    """``copy`` between two host paths the caller names (see ``host_rel``), at most ``limit`` bytes."""
    copy(HOST_ROOT, host_rel(src, follow_last=False), HOST_ROOT, host_rel(dst, follow_last=follow_dst),
         limit=limit, source=os.fspath(src))


def _parts(rel: str) -> list[str]:
    parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
    if any(p == ".." or p == "/" for p in parts):
        raise ValueError(f"{rel}: must stay below its root (no '..')")
    return parts


def _walk(root: Path, parts: list[str], create: bool, made: list[list[str]] | None = None,
          owner: tuple[int, int] | None = None) -> int:
    """A descriptor of ``root/parts...``: the root is opened as given, nothing below follows a link.
    With ``create``, missing directories are made (listed in ``made``, given to ``owner``)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            new = False
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    new = True
                    if made is not None:
                        made.append(parts[: i + 1])
                except FileExistsError:
                    pass
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join(parts[: i + 1])
                    raise ValueError(f"{where}: is a symlink or not a directory (copies never go through links)") \
                        from None
                raise
            os.close(fd)
            fd = nxt
            if new and owner:
                os.fchown(fd, *owner)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_real_dir(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _clear(name: str, dir_fd: int, keep_dir: bool) -> None:
    """Make room for ``name``: a link or file goes; a directory stays (``keep_dir``) or is refused."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        if not keep_dir:
            raise FileExistsError(errno.EEXIST, "a directory is in the way", name)
        return
    if keep_dir and not stat.S_ISLNK(st.st_mode):
        raise FileExistsError(errno.EEXIST, "a file is in the way of a directory", name)
    os.unlink(name, dir_fd=dir_fd)


def _measure(dir_fd: int, name: str, st: os.stat_result, limit: int) -> int:
    """The apparent size of the regular files at ``name`` (a tree: summed, links not followed);
    the walk stops once past ``limit``."""
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    if not stat.S_ISDIR(st.st_mode):
        return 0
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError:
        return 0  # gone or swapped since: the copy itself finds out
    total = 0
    try:
        for child in os.listdir(fd):
            try:
                child_st = os.stat(child, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            total += _measure(fd, child, child_st, limit - total)
            if total > limit:
                break
    finally:
        os.close(fd)
    return total


class _Copier:
    """One copy: its byte budget, and what it created (``made``: paths below ``dst_root``)."""

    def __init__(self, budget: Budget, dst_root: Path, owner: tuple[int, int] | None = None,
                 keep_fifos: bool = False):
        self.budget, self.dst_root, self.owner, self.keep_fifos = budget, dst_root, owner, keep_fifos
        self.made: list[list[str]] = []

    def undo(self) -> None:
        """Remove what this copy created, deepest first (never through a link: see ``_walk``)."""
        for parts in reversed(self.made):
            try:
                fd = _walk(self.dst_root, parts[:-1], create=False)
            except (OSError, ValueError):
                continue
            try:
                try:
                    os.rmdir(parts[-1], dir_fd=fd)
                except NotADirectoryError:
                    os.unlink(parts[-1], dir_fd=fd)
            except OSError:
                pass  # changed since, or not empty: left as it is
            finally:
                os.close(fd)

    def entry(self, src_dir: int, name: str, st: os.stat_result, dst_dir: int, target: str,
              where: list[str], rel: str) -> None:
        """Copy one entry; ``where``: its destination below ``dst_root``; ``rel``: its path below
        the copy's source (for errors)."""
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            link = os.readlink(name, dir_fd=src_dir)
            _clear(target, dst_dir, keep_dir=False)
            os.symlink(link, target, dir_fd=dst_dir)
            self.made.append(where)
            if self.owner:
                os.chown(target, *self.owner, dir_fd=dst_dir, follow_symlinks=False)
        elif stat.S_ISDIR(mode):
            self.directory(src_dir, name, dst_dir, target, mode, where, rel)
        elif stat.S_ISREG(mode):
            self.file(src_dir, name, dst_dir, target, st, where, rel)
        elif stat.S_ISFIFO(mode) and self.keep_fifos:  # made, never opened
            _clear(target, dst_dir, keep_dir=False)
            os.mkfifo(target, stat.S_IMODE(mode) & 0o777, dir_fd=dst_dir)
            self.made.append(where)
            if self.owner:
                os.chown(target, *self.owner, dir_fd=dst_dir, follow_symlinks=False)
        # sockets and devices are skipped, and FIFOs but for a snapshot (see the module doc)

    def directory(self, src_dir: int, name: str, dst_dir: int, target: str, mode: int, where: list[str],
                  rel: str) -> None:
        try:
            inner_src = os.open(name, _DIR, dir_fd=src_dir)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since it was listed
                raise ValueError(f"{name}: changed into a symlink during the copy") from None
            raise
        try:
            new = False
            if target != ".":
                _clear(target, dst_dir, keep_dir=True)
                try:
                    os.mkdir(target, 0o700, dir_fd=dst_dir)
                    self.made.append(where)
                    new = True
                except FileExistsError:
                    pass
            inner_dst = os.open(target, _DIR, dir_fd=dst_dir)
            try:
                if new and self.owner:
                    os.fchown(inner_dst, *self.owner)
                for child in sorted(os.listdir(inner_src)):
                    try:
                        st = os.stat(child, dir_fd=inner_src, follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed since it was listed
                    self.entry(inner_src, child, st, inner_dst, child, [*where, child], posixpath.join(rel, child))
                os.chmod(inner_dst, stat.S_IMODE(mode) & 0o777)
            finally:
                os.close(inner_dst)
        finally:
            os.close(inner_src)

    def file(self, src_dir: int, name: str, dst_dir: int, target: str, st: os.stat_result, where: list[str],
             rel: str) -> None:
        budget = self.budget
        path = posixpath.join(budget.source, rel) if rel else budget.source
        fd_in = os.open(name, _FILE_IN, dir_fd=src_dir)
        try:
            now = os.fstat(fd_in)
            if not stat.S_ISREG(now.st_mode):
                return  # swapped for a special file since it was listed
            budget.need(now.st_size, path)  # swapped for a bigger file since it was measured
            os.set_blocking(fd_in, True)
            _clear(target, dst_dir, keep_dir=False)
            fd_out = os.open(target, _FILE_OUT, 0o600, dir_fd=dst_dir)
            self.made.append(where)
            try:
                if self.owner:
                    os.fchown(fd_out, *self.owner)
                # at most one byte past the room left: more means the file grew past the limit
                while chunk := os.read(fd_in, min(1 << 20, budget.room() + 1)):
                    budget.spend(len(chunk), path)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd_out, view):]
                os.chmod(fd_out, stat.S_IMODE(st.st_mode) & 0o777)
                os.utime(fd_out, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(fd_out)
        finally:
            os.close(fd_in)
