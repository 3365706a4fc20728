"""File transfer of the ``ssh`` backend, through SFTP on the environment's connection.

Trees are copied entry by entry: directories created, regular files streamed (pipelined) with
their permission bits, symbolic links copied as links (never followed).
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path


def upload(sftp, src: Path, top: str) -> None:
    """Copy the host file or directory ``src`` to the remote path ``top`` (parents created)."""
    if not src.is_dir():
        make_dirs(sftp, posixpath.dirname(top))
        return _put(sftp, src, top)
    make_dirs(sftp, top)
    for root, dirs, files in os.walk(src):
        there = posixpath.normpath(posixpath.join(top, Path(root).relative_to(src).as_posix()))
        for name in dirs + files:
            here, remote = Path(root, name), posixpath.join(there, name)
            if here.is_dir() and not here.is_symlink():
                make_dirs(sftp, remote)
            else:
                _put(sftp, here, remote)


def download(sftp, remote: str, local: Path) -> None:
    """Copy the remote file or directory ``remote`` to the host path ``local`` (a file onto an
    existing directory lands inside it).

    Raises:
        FileNotFoundError: ``remote`` does not exist (nothing is created).
    """
    try:
        mode = sftp.lstat(remote).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(2, "download: no such file or directory in the sandbox", remote) from None
    if not stat.S_ISDIR(mode) and local.is_dir() and not local.is_symlink():
        local = local / posixpath.basename(remote)
    _download(sftp, remote, local, mode)


def _download(sftp, remote: str, local: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        local.mkdir(parents=True, exist_ok=True)
        for entry in sftp.listdir_attr(remote):
            _download(sftp, posixpath.join(remote, entry.filename), local / entry.filename, entry.st_mode)
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    if local.is_symlink() or (stat.S_ISLNK(mode) and local.exists()):
        local.unlink()
    if stat.S_ISLNK(mode):
        os.symlink(sftp.readlink(remote), local)
    else:
        sftp.get(remote, str(local))
        os.chmod(local, mode & 0o7777)


def make_dirs(sftp, path: str) -> None:
    """``mkdir -p`` over SFTP."""
    try:
        sftp.mkdir(path)
    except OSError:
        try:
            is_dir = stat.S_ISDIR(sftp.stat(path).st_mode)
        except OSError:
            is_dir = False
        if not is_dir:
            if posixpath.dirname(path) == path:
                raise
            make_dirs(sftp, posixpath.dirname(path))
            sftp.mkdir(path)


def _put(sftp, local: Path, remote: str) -> None:
    if local.is_symlink():
        try:
            sftp.remove(remote)
        except OSError:
            pass
        sftp.symlink(os.readlink(local), remote)
        return
    with open(local, "rb") as src, sftp.open(remote, "wb") as dst:
        dst.set_pipelined(True)
        while chunk := src.read(1 << 15):
            dst.write(chunk)
        dst.chmod(os.stat(local).st_mode & 0o7777)
