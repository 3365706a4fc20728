"""``max_download_bytes`` on each copy path, with the cases a real sandbox cannot stage on demand: a
file that grows between its stat and its read, an archive stream that never ends, a hard link
counted once per name it lands under. The conformance suite (tests/conformance/test_files.py)
checks the same bound end to end on every backend variant.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from swe_sandbox import ConfigError, get_environment
from swe_sandbox.environments import hostcopy
from swe_sandbox.environments.container import archive
from swe_sandbox.environments.ssh import files as ssh_files
from swe_sandbox.errors import DownloadTooLarge, SandboxError

LIMIT = 1 << 20


def test_config_default_and_validation():
    assert get_environment("local").config.max_download_bytes == 4 << 30
    assert get_environment("local", max_download_bytes=123).config.max_download_bytes == 123
    for bad in (0, -1, "lots", 1.5):
        with pytest.raises(ConfigError, match="max_download_bytes"):
            get_environment("local", max_download_bytes=bad)


def test_the_error_is_a_sandbox_error_naming_the_limit_and_the_path():
    exc = DownloadTooLarge(limit=LIMIT, path="/workspace/big", source="/workspace")
    assert isinstance(exc, SandboxError)
    assert exc.limit == LIMIT and exc.path == "/workspace/big"
    assert f"environment.max_download_bytes = {LIMIT}" in str(exc) and "/workspace/big" in str(exc)


# -- hostcopy (local, bwrap, and the last step of every download) -----------------------------------


@pytest.fixture
def grow_on_first_read(monkeypatch):
    """Make ``path`` grow by ``extra`` bytes when the copy first reads it (after its stat); record
    every ``os.write`` the copy makes."""
    written: list[int] = []
    real_read, real_write = os.read, os.write

    def arm(path: Path, extra: int) -> list[int]:
        ino = path.stat().st_ino
        grown = []

        def read(fd, n):
            if not grown and os.fstat(fd).st_ino == ino:
                grown.append(True)
                with open(path, "ab") as f:
                    f.write(b"g" * extra)
            return real_read(fd, n)

        def write(fd, data):
            written.append(len(data))
            return real_write(fd, data)

        monkeypatch.setattr(os, "read", read)
        monkeypatch.setattr(os, "write", write)
        return written

    return arm


def test_hostcopy_a_file_growing_during_the_copy_is_cut_off_and_removed(tmp_path, grow_on_first_read):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "grow").write_bytes(b"x" * 100_000)
    written = grow_on_first_read(tmp_path / "src" / "grow", 2 * LIMIT)
    with pytest.raises(DownloadTooLarge, match=f"max_download_bytes = {LIMIT}"):
        hostcopy.copy(tmp_path / "src", "grow", tmp_path, "out/deep/grow", limit=LIMIT)
    assert sum(written) <= LIMIT  # no byte past the limit was ever written
    assert not (tmp_path / "out").exists()  # the partial file and the parents made for it are gone


def test_hostcopy_a_tree_cut_off_midway_leaves_only_what_was_there(tmp_path, grow_on_first_read):
    src = tmp_path / "src"
    (src / "d" / "sub").mkdir(parents=True)
    (src / "d" / "a").write_bytes(b"a" * 1000)
    (src / "d" / "sub" / "z").write_bytes(b"z" * 1000)  # copied after d/a (names in order)
    (src / "d" / "link").symlink_to("a")
    (tmp_path / "dst" / "d").mkdir(parents=True)
    (tmp_path / "dst" / "d" / "mine").write_text("kept")
    written = grow_on_first_read(src / "d" / "sub" / "z", 2 * LIMIT)
    with pytest.raises(DownloadTooLarge, match="sub/z"):
        hostcopy.copy(src, "d", tmp_path / "dst", "d", limit=LIMIT)
    assert sum(written) <= LIMIT
    assert sorted(p.name for p in (tmp_path / "dst" / "d").iterdir()) == ["mine"]


def test_hostcopy_refuses_before_writing_anything(tmp_path, grow_on_first_read):
    src = tmp_path / "src"
    (src / "t").mkdir(parents=True)
    (src / "t" / "a").write_bytes(b"a" * (LIMIT // 2))
    with open(src / "t" / "sparse", "wb") as f:
        f.truncate(LIMIT // 2 + 1)
    written = grow_on_first_read(src / "t" / "a", 0)
    with pytest.raises(DownloadTooLarge):
        hostcopy.copy(src, "t", tmp_path, "out", limit=LIMIT)
    assert written == [] and not (tmp_path / "out").exists()
    hostcopy.copy(src, "t", tmp_path, "out", limit=LIMIT + 1)  # at the limit: copied
    assert (tmp_path / "out" / "sparse").stat().st_size == LIMIT // 2 + 1


def test_hostcopy_counts_a_hard_link_once_per_name(tmp_path):
    """The host gets one copy per name (hostcopy does not keep hard links), so each counts."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"f" * (LIMIT // 3 + 1))
    for i in range(2):
        os.link(src / "f", src / f"h{i}")
    with pytest.raises(DownloadTooLarge):
        hostcopy.copy(tmp_path, "src", tmp_path, "out", limit=LIMIT)
    assert not (tmp_path / "out").exists()


def test_upload_has_no_limit(tmp_path):
    (tmp_path / "f").write_bytes(b"f" * 10)
    hostcopy.copy(tmp_path, "f", tmp_path, "g")  # no limit given: none applies
    assert (tmp_path / "g").read_bytes() == b"f" * 10


# -- archives (docker, podman) ------------------------------------------------------------------------


def _member(name: str, size: int, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode, info.linkname = size, kind, 0o644, linkname
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def test_archive_stream_is_not_buffered_whole(tmp_path):
    """A header announcing 1 TiB: refused after the first chunk; the rest is never read."""
    consumed = []

    def chunks():
        consumed.append(1)
        yield _member("big", 1 << 40)
        for _ in range(64):
            consumed.append(1)
            yield bytes(1 << 20)

    with pytest.raises(DownloadTooLarge, match="big"):
        archive.extract_chunks(chunks(), "big", tmp_path / "out" / "big", limit=LIMIT, source="/workspace/big")
    assert len(consumed) <= 2
    assert not (tmp_path / "out").exists()


def test_archive_counts_the_whole_tree_and_hard_links(tmp_path):
    half = LIMIT // 2 + 1
    tree = (_member("t", 0, tarfile.DIRTYPE) + _member("t/a", half) + _padded(b"a" * half)
            + _member("t/b", half) + _padded(b"b" * half) + bytes(1024))
    with pytest.raises(DownloadTooLarge, match="t/b"):
        archive.extract_chunks([tree], "t", tmp_path / "out", limit=LIMIT, source="/w/t")
    assert not (tmp_path / "out").exists()
    third = LIMIT // 3 + 1
    linked = (_member("t", 0, tarfile.DIRTYPE) + _member("t/f", third) + _padded(b"f" * third)
              + _member("t/h1", 0, tarfile.LNKTYPE, "t/f") + _member("t/h2", 0, tarfile.LNKTYPE, "t/f")
              + bytes(1024))
    with pytest.raises(DownloadTooLarge):
        archive.extract_chunks([linked], "t", tmp_path / "out", limit=LIMIT, source="/w/t")
    assert not (tmp_path / "out").exists()
    archive.extract_chunks([linked], "t", tmp_path / "out", limit=3 * third, source="/w/t")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["f", "h1", "h2"]


def test_archive_stream_in_small_chunks_round_trips(tmp_path):
    data = os.urandom(300_000)
    tar = _member("f", len(data)) + _padded(data) + bytes(1024)
    pieces = [tar[i:i + 100] for i in range(0, len(tar), 100)]
    archive.extract_chunks(iter(pieces), "f", tmp_path / "f", limit=len(data), source="/w/f")
    assert (tmp_path / "f").read_bytes() == data


# -- SFTP (ssh) ----------------------------------------------------------------------------------------


class _Attr:
    def __init__(self, name: str, mode: int, size: int):
        self.filename, self.st_mode, self.st_size = name, mode, size


class _EndlessFile:
    """A remote file whose stat says 10 bytes and whose reads never end (it grows as it is read)."""

    def __init__(self, reads: list[int]):
        self.reads = reads

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def prefetch(self, size=None, *args, **kwargs):
        pass

    def set_pipelined(self, *args):
        pass

    def read(self, n=None):
        n = 32768 if n is None else n
        self.reads.append(n)
        return b"r" * n


class _FakeSftp:
    def __init__(self, files: dict[str, int]):
        self.files, self.reads = files, []

    def lstat(self, path):
        if path == "/d":
            return _Attr("d", stat.S_IFDIR | 0o755, 4096)
        if path in self.files:
            return _Attr(path.rsplit("/", 1)[-1], stat.S_IFREG | 0o644, self.files[path])
        raise FileNotFoundError(path)

    stat = lstat

    def listdir_attr(self, path):
        return [_Attr(p.rsplit("/", 1)[-1], stat.S_IFREG | 0o644, size)
                for p, size in self.files.items() if p.startswith(path + "/")]

    def open(self, path, mode="r", *args, **kwargs):
        return _EndlessFile(self.reads)


def test_sftp_a_file_that_keeps_growing_is_cut_off_at_the_limit(tmp_path):
    sftp = _FakeSftp({"/w/grow": 10})
    with pytest.raises(DownloadTooLarge, match="/w/grow"):
        ssh_files.download(sftp, "/w/grow", tmp_path / "out" / "grow", limit=LIMIT)
    assert sum(sftp.reads) <= LIMIT + 32768  # it stopped reading, too
    assert not (tmp_path / "out").exists()


def test_sftp_refuses_by_announced_size_before_reading(tmp_path):
    sftp = _FakeSftp({"/d/a": LIMIT // 2, "/d/sparse": LIMIT // 2 + 1})
    with pytest.raises(DownloadTooLarge, match=f"max_download_bytes = {LIMIT}"):
        ssh_files.download(sftp, "/d", tmp_path / "out", limit=LIMIT)
    assert not (tmp_path / "out").exists()
    sftp = _FakeSftp({"/big": 1 << 40})
    with pytest.raises(DownloadTooLarge, match="/big"):
        ssh_files.download(sftp, "/big", tmp_path / "big", limit=LIMIT)
    assert sftp.reads == []
