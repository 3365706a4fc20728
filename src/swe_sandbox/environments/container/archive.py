"""Tar archives for the container engines' archive API: the workspace in, files in and out.

Archives coming out of a sandbox are untrusted: ``extract_single`` refuses entries that would land
outside the destination, device files, links pointing out, and drops setuid bits; it reads the
archive as a stream (never buffered whole) and stops at the first entry that would take the
download past its ``max_download_bytes``.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from swe_sandbox.environments import hostcopy
from swe_sandbox.errors import SandboxError


def _retag(info: tarfile.TarInfo, owner: tuple[int, int]) -> tarfile.TarInfo | None:
    if info.isdev():  # FIFOs, devices: skipped, as by every backend's copy
        return None
    info.uid, info.gid = owner
    info.uname = info.gname = ""
    return info


def place_symlink(target: str, name: str, dst: Path) -> None:
    """Deliver the link ``name`` -> ``target`` to ``dst`` by ``hostcopy``'s rules (inside an
    existing directory, replacing a file or link, never through one)."""
    with tempfile.TemporaryDirectory(prefix="swe-sandbox-download-") as tmp:
        os.symlink(target, Path(tmp) / name)
        hostcopy.copy(Path(tmp), name, hostcopy.HOST_ROOT, hostcopy.host_rel(dst))


def tar_directory(src: Path, owner: tuple[int, int]) -> IO[bytes]:
    """A tar of the *contents* of ``src`` (extracted into the target directory), owned by ``owner``."""
    spool = tempfile.SpooledTemporaryFile(64 << 20)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(src.iterdir()):
            tar.add(str(child), arcname=child.name, filter=lambda i: _retag(i, owner))
    spool.seek(0)
    return spool


def tar_empty_dir(name: str, owner: tuple[int, int]) -> IO[bytes]:
    """A tar holding one directory entry ``name`` (mode 755) owned by ``owner``: extracted over an
    existing directory, it hands that directory to ``owner``."""
    spool = tempfile.SpooledTemporaryFile(1 << 16)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
        retagged = _retag(info, owner)
        assert retagged is not None  # a directory: only devices are dropped
        tar.addfile(retagged)
    spool.seek(0)
    return spool


def tar_path(src: Path, arcname: str, owner: tuple[int, int]) -> IO[bytes]:
    """A tar holding ``src`` (file or directory tree) under the name ``arcname``."""
    if not os.path.lexists(src):
        raise FileNotFoundError(src)
    spool = tempfile.SpooledTemporaryFile(64 << 20)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(src), arcname=arcname, filter=lambda i: _retag(i, owner))
    spool.seek(0)
    return spool


def _check_member(member: tarfile.TarInfo, root: str) -> tarfile.TarInfo:
    """The checks of ``tarfile.data_filter``, by hand, for Pythons without it (< 3.10.12 / 3.11.4)."""
    target = os.path.realpath(os.path.join(root, member.name))
    if not target.startswith(os.path.realpath(root) + os.sep) and target != os.path.realpath(root):
        raise SandboxError(f"download: unsafe path in archive: {member.name!r}")
    if member.isdev() or member.islnk() and (
            os.path.isabs(member.linkname) or ".." in PurePosixPath(member.linkname).parts):
        raise SandboxError(f"download: unsafe entry in archive: {member.name!r}")
    member.mode &= 0o777
    return member


def _safe_members(tar: tarfile.TarFile, root: str, symlinks: list[tuple[str, str]], budget: hostcopy.Budget):
    """The archive's members minus its symlinks (collected in ``symlinks``), each checked; a file
    that would take the download past its limit stops it (its size in the header is all that is
    extracted of it: its apparent size, a sparse member's full length)."""
    for member in tar:
        if member.issym():
            symlinks.append((member.name, member.linkname))
            continue
        if member.isdev():  # FIFOs, devices: skipped, as by every backend's copy
            continue
        if member.isreg():
            budget.spend(member.size, posixpath.join(posixpath.dirname(budget.source), member.name))
        if not hasattr(tarfile, "data_filter"):
            yield _check_member(member, root)
            continue
        try:
            yield tarfile.data_filter(member, root)
        except tarfile.FilterError as exc:
            raise SandboxError(f"download: unsafe entry in archive: {member.name!r} ({exc})") from None


def _add_symlinks(root: str, symlinks: list[tuple[str, str]]) -> None:
    """Create the archive's symlinks last, as they are (like a local copy keeps ``/usr/bin/python``)."""
    base = os.path.realpath(root)
    for name, target in symlinks:
        path = os.path.join(base, os.path.normpath(name).lstrip("/"))
        parent = os.path.realpath(os.path.dirname(path))
        if not (parent + os.sep).startswith(base + os.sep) or name.startswith("/") or ".." in name.split("/"):
            raise SandboxError(f"download: unsafe path in archive: {name!r}")
        if os.path.lexists(path):
            raise SandboxError(f"download: the archive holds {name!r} twice (a symlink and a file)")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)


def extract_single(fileobj, name: str, dst: Path, *, limit: int | None = None, source: str = "") -> None:
    """Extract the tree ``name`` of a tar (as the archive API returns it) to the host path ``dst``.

    The archive comes from an untrusted sandbox. Entries are checked with ``tarfile``'s ``data``
    filter (nothing outside ``dst``, no device files, no hard links out, no setuid bits), and
    symlinks are only created once everything else is written, so no entry is ever written
    through one; they are kept as they are, pointing anywhere, as ``local`` and ``ssh`` keep them.
    The archive is read as a stream, into a temporary directory that goes whatever happens.

    Args:
        limit: the most bytes the download may write on the host (``max_download_bytes``), counted
            by the sizes in the archive's headers, then again by ``hostcopy`` on the way to ``dst``
            (a hard link becomes one copy per name there).
        source: the sandbox path downloaded (``.../name``), for errors.

    Raises:
        SandboxError: an unsafe entry, or ``name`` is not in the archive.
        DownloadTooLarge: past ``limit``; nothing reaches ``dst``.
    """
    source = source or name
    budget = hostcopy.Budget(limit, source)
    with tempfile.TemporaryDirectory(prefix="swe-sandbox-download-") as tmp:
        symlinks: list[tuple[str, str]] = []
        with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
            checked: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
            for member in _safe_members(tar, tmp, symlinks, budget):  # a directory's mode could lock out its files
                tar.extract(member, tmp, set_attrs=not member.isdir(), **checked)
        _add_symlinks(tmp, symlinks)
        got = Path(tmp) / name
        if not got.exists() and not got.is_symlink():
            raise SandboxError(f"download: the archive holds no {name!r}")
        # never through a link already at dst (an earlier download's): see hostcopy
        hostcopy.copy(Path(tmp), name, hostcopy.HOST_ROOT, hostcopy.host_rel(dst), limit=limit, source=source)


class ChunkReader(io.RawIOBase):
    """A readable file over an iterable of byte chunks, read as they come (nothing buffered but the
    current chunk)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks: Iterator[bytes] = iter(chunks)
        self._view = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._view:
            try:
                self._view = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._view))
        buffer[:n] = self._view[:n]
        self._view = self._view[n:]
        return n

    def close(self) -> None:
        closer = getattr(self._chunks, "close", None)
        if closer is not None:  # a generator over the engine's response: stop it
            closer()
        super().close()


def extract_chunks(chunks: Iterable[bytes], name: str, dst: Path, *, limit: int | None = None,
                   source: str = "") -> None:
    """``extract_single`` of a tar given as a stream of chunks, read as they come: a download past
    ``limit`` stops after the header that announces it, the rest of the stream unread."""
    with ChunkReader(chunks) as stream:
        extract_single(stream, name, dst, limit=limit, source=source)


def shift_owners(chunks: Iterable[bytes], uid_base: int, gid_base: int, size: int) -> Iterator[bytes]:
    """The tar stream ``chunks`` with each owner in ``[base, base + size)`` moved down by its base
    (host ids of a user namespace back to the container's own; others as they are), streamed: a
    header, then the member's bytes 1 MiB at a time (a huge or sparse member is never held)."""
    def shift(value: int, base: int) -> int:
        return value - base if base <= value < base + size else value

    with ChunkReader(chunks) as reader, tarfile.open(fileobj=reader, mode="r|") as src:
        for member in src:
            member.uid, member.gid = shift(member.uid, uid_base), shift(member.gid, gid_base)
            member.pax_headers = {key: value for key, value in member.pax_headers.items()  # else they win
                                  if key not in ("uid", "gid", "uname", "gname")}
            member.uname = member.gname = ""
            yield member.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            data = src.extractfile(member) if member.isreg() else None
            if data is not None:
                left = member.size
                while left > 0:
                    block = data.read(min(left, 1 << 20))
                    if not block:
                        raise tarfile.ReadError(f"{member.name}: the archive ends inside it")
                    left -= len(block)
                    yield block
                if member.size % tarfile.BLOCKSIZE:
                    yield b"\0" * (tarfile.BLOCKSIZE - member.size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)
