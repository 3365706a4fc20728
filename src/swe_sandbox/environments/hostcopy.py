"""Copying a file or tree between host directories when a sandbox controls one side.

The bwrap backend's workspace is a host directory its commands write to, while they run and in the
background: any name in it may be a symlink to a host file, or become one between a check and a
use. So every step here works on directory file descriptors (``openat`` semantics through
``dir_fd``) and never follows a link below the given root: a link met on the way is copied as a
link (source side) or replaced (destination side), never traversed. That also keeps a second
download from writing through links a first one brought to the host.

Rules, the same as the container archive path: bytes, exec bits and empty directories are kept;
setuid, setgid and sticky bits are dropped; special files (FIFOs, sockets, devices) are skipped
(opening a FIFO would block the copy); symlinks are copied as links, wherever they point.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_IN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_OUT = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def copy(src_root: Path, src_rel: str, dst_root: Path, dst_rel: str) -> None:
    """Copy ``src_root/src_rel`` to ``dst_root/dst_rel``, following no link below either root.

    ``src_rel`` / ``dst_rel`` are relative POSIX paths (``""``: the root itself). Missing parents
    of the destination are created; an existing directory is merged into; a file copied onto an
    existing directory lands inside it; a link on the way of either path is refused.

    Raises:
        FileNotFoundError: the source does not exist (nothing is created).
        ValueError: a path goes through a symlink, or out of its root (``..``).
        FileExistsError: a directory would replace an existing non-directory, or the reverse.
    """
    src_parts, dst_parts = _parts(src_rel), _parts(dst_rel)
    src_dir = _walk(src_root, src_parts[:-1], create=False)
    try:
        name = src_parts[-1] if src_parts else "."
        try:
            st = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(src_root / src_rel)) from None
        dst_dir = _walk(dst_root, dst_parts[:-1], create=True)
        try:
            target = dst_parts[-1] if dst_parts else "."
            if not stat.S_ISDIR(st.st_mode) and _is_real_dir(target, dst_dir):
                inner = os.open(target, _DIR, dir_fd=dst_dir)
                os.close(dst_dir)
                dst_dir, target = inner, (src_parts[-1] if src_parts else Path(src_root).name)
            _copy_entry(src_dir, name, st, dst_dir, target)
        finally:
            os.close(dst_dir)
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


def copy_paths(src: str | os.PathLike, dst: str | os.PathLike, follow_dst: bool) -> None:
    """``copy`` between two host paths the caller names (see ``host_rel``)."""
    copy(HOST_ROOT, host_rel(src, follow_last=False), HOST_ROOT, host_rel(dst, follow_last=follow_dst))


def _parts(rel: str) -> list[str]:
    parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
    if any(p == ".." or p == "/" for p in parts):
        raise ValueError(f"{rel}: must stay below its root (no '..')")
    return parts


def _walk(root: Path, parts: list[str], create: bool) -> int:
    """A descriptor of ``root/parts...``: the root is opened as given, nothing below follows a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
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


def _copy_entry(src_dir: int, name: str, st: os.stat_result, dst_dir: int, target: str) -> None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        link = os.readlink(name, dir_fd=src_dir)
        _clear(target, dst_dir, keep_dir=False)
        os.symlink(link, target, dir_fd=dst_dir)
    elif stat.S_ISDIR(mode):
        _copy_dir(src_dir, name, dst_dir, target, mode)
    elif stat.S_ISREG(mode):
        _copy_file(src_dir, name, dst_dir, target, st)
    # FIFOs, sockets and devices are skipped (see the module doc)


def _copy_dir(src_dir: int, name: str, dst_dir: int, target: str, mode: int) -> None:
    try:
        inner_src = os.open(name, _DIR, dir_fd=src_dir)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since it was listed
            raise ValueError(f"{name}: changed into a symlink during the copy") from None
        raise
    try:
        if target != ".":
            _clear(target, dst_dir, keep_dir=True)
            try:
                os.mkdir(target, 0o700, dir_fd=dst_dir)
            except FileExistsError:
                pass
        inner_dst = os.open(target, _DIR, dir_fd=dst_dir)
        try:
            for child in sorted(os.listdir(inner_src)):
                try:
                    st = os.stat(child, dir_fd=inner_src, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed since it was listed
                _copy_entry(inner_src, child, st, inner_dst, child)
            os.chmod(inner_dst, stat.S_IMODE(mode) & 0o777)
        finally:
            os.close(inner_dst)
    finally:
        os.close(inner_src)


def _copy_file(src_dir: int, name: str, dst_dir: int, target: str, st: os.stat_result) -> None:
    fd_in = os.open(name, _FILE_IN, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(fd_in).st_mode):
            return  # swapped for a special file since it was listed
        os.set_blocking(fd_in, True)
        _clear(target, dst_dir, keep_dir=False)
        fd_out = os.open(target, _FILE_OUT, 0o600, dir_fd=dst_dir)
        try:
            while chunk := os.read(fd_in, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd_out, view):]
            os.chmod(fd_out, stat.S_IMODE(st.st_mode) & 0o777)
            os.utime(fd_out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
