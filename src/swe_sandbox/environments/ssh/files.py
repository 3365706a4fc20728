"""File transfer of the ``ssh`` backend, through SFTP on the environment's connection.

Trees are copied entry by entry: directories created, regular files streamed (pipelined) with
their permission bits, symbolic links copied as links, special files (FIFOs, sockets, devices)
skipped, as every backend does. On the remote side, a link where a file or directory is to be
written is removed first, and a link among the destination's parents is refused: a command may
have planted it. (SFTP has no ``openat``: a sandbox swapping a name for a link in the instant
between that check and the write is not stopped; see the README's known limits.) Downloads land
in a fresh local directory first and reach ``dst`` through ``hostcopy`` (no link followed there,
setuid bits dropped). A download counts what it writes against its ``max_download_bytes``: each
file's announced (apparent) size before it is read, then the bytes really read, so a file growing
on the remote side is cut off at the limit; past it, the local directory goes and ``dst`` is
never touched.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tempfile
from pathlib import Path

from swe_sandbox.environments import hostcopy


def upload(sftp, src: Path, top: str, confined: str = "/") -> None:
    """Copy the host file or directory ``src`` to the remote path ``top`` (parents created; a file
    onto an existing directory lands inside it).

    Args:
        confined: the directory the sandbox's commands write to (its workspace): links among the
            parents of ``top`` are refused below it, followed elsewhere (the host's own layout).

    Raises:
        ValueError: a parent of ``top`` below ``confined`` is a symlink.
        FileExistsError: a directory would replace an existing file.
    """
    make_dirs(sftp, posixpath.dirname(top), confined)
    kind = _lkind(sftp, top)
    if not src.is_dir() or src.is_symlink():
        if kind == "dir":
            top = posixpath.join(top, src.name)
        return _put(sftp, src, top)
    if kind == "file":
        raise FileExistsError(17, "upload: a file is in the way of the directory", top)
    _put_tree(sftp, src, top)


def _put_tree(sftp, src: Path, top: str) -> None:
    _make_dir(sftp, top)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        remote = posixpath.join(top, entry.name)
        if entry.is_dir(follow_symlinks=False):
            _put_tree(sftp, Path(entry.path), remote)
        elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
            _put(sftp, Path(entry.path), remote)


def download(sftp, remote: str, local: Path, limit: int | None = None) -> None:
    """Copy the remote file or directory ``remote`` to the host path ``local`` (a file onto an
    existing directory lands inside it), writing at most ``limit`` bytes (``None``: no limit).

    Raises:
        FileNotFoundError: ``remote`` does not exist (nothing is created).
        DownloadTooLarge: past ``limit`` (nothing is created).
    """
    try:
        attr = sftp.lstat(remote)
    except FileNotFoundError:
        raise FileNotFoundError(2, "download: no such file or directory in the sandbox", remote) from None
    budget = hostcopy.Budget(limit, remote)
    with tempfile.TemporaryDirectory(prefix="swe-sandbox-download-") as tmp:
        name = posixpath.basename(remote.rstrip("/")) or "root"
        _get(sftp, remote, Path(tmp) / name, attr, budget)
        hostcopy.copy(Path(tmp), name, hostcopy.HOST_ROOT, hostcopy.host_rel(local), limit=limit, source=remote)


def _get(sftp, remote: str, local: Path, attr, budget: hostcopy.Budget) -> None:
    """Into a fresh local directory (nothing there to follow)."""
    mode = attr.st_mode
    if stat.S_ISDIR(mode):
        local.mkdir()
        for entry in sftp.listdir_attr(remote):
            _get(sftp, posixpath.join(remote, entry.filename), local / entry.filename, entry, budget)
        os.chmod(local, mode & 0o777)
    elif stat.S_ISLNK(mode):
        os.symlink(sftp.readlink(remote), local)
    elif stat.S_ISREG(mode):
        _get_file(sftp, remote, local, attr.st_size or 0, budget)
        os.chmod(local, mode & 0o777)
    # FIFOs, sockets, devices: skipped (reading a FIFO would block)


def _get_file(sftp, remote: str, local: Path, size: int, budget: hostcopy.Budget) -> None:
    """``sftp.get`` (pipelined reads) that counts: refused by the announced size before any read,
    cut off once what is read would pass the budget (a file growing on the remote side)."""
    budget.need(size, remote)
    with sftp.open(remote, "rb") as src, open(local, "xb") as dst:
        src.prefetch(size)
        # at most one byte past the room left: more means the file grew past the limit
        while data := src.read(min(1 << 15, budget.room() + 1)):
            budget.spend(len(data), remote)
            dst.write(data)


def _kind_following(sftp, path: str) -> str:
    try:
        return "dir" if stat.S_ISDIR(sftp.stat(path).st_mode) else "file"
    except FileNotFoundError:
        return "none"


def _lkind(sftp, path: str) -> str:
    try:
        mode = sftp.lstat(path).st_mode
    except FileNotFoundError:
        return "none"
    return "dir" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "file"


def make_dirs(sftp, path: str, confined: str = "/") -> None:
    """``mkdir -p`` over SFTP, refusing to go through a symlink below ``confined``.

    Raises:
        ValueError: a component of ``path`` below ``confined`` is a symlink (or a file).
    """
    parts = [p for p in path.split("/") if p]
    here = "/" if path.startswith("/") else ""
    trusted = posixpath.normpath(confined)
    for part in parts:
        here = posixpath.join(here, part) if here else part
        if here.startswith(trusted.rstrip("/") + "/"):
            kind = _lkind(sftp, here)
        else:
            kind = _kind_following(sftp, here)  # the host's own layout (/tmp -> /private/tmp...)
        if kind == "none":
            sftp.mkdir(here)
        elif kind != "dir":
            raise ValueError(f"{here}: is a symlink or not a directory (copies never go through links)")


def _make_dir(sftp, path: str) -> None:
    """One directory of a tree being copied: a link (or file) in its place is replaced."""
    kind = _lkind(sftp, path)
    if kind == "link":
        sftp.remove(path)
    elif kind == "file":
        raise FileExistsError(17, "upload: a file is in the way of a directory", path)
    if kind != "dir":
        sftp.mkdir(path)


def _put(sftp, local: Path, remote: str) -> None:
    kind = _lkind(sftp, remote)
    if kind == "dir":
        raise FileExistsError(17, "upload: a directory is in the way", remote)
    if kind != "none":
        sftp.remove(remote)  # never write through a link a command planted
    if local.is_symlink():
        sftp.symlink(os.readlink(local), remote)
        return
    with open(local, "rb") as src, sftp.open(remote, "wb") as dst:
        dst.set_pipelined(True)
        while chunk := src.read(1 << 15):
            dst.write(chunk)
        dst.chmod(os.stat(local).st_mode & 0o7777)
