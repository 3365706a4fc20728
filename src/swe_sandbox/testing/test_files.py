"""``upload`` / ``download``, the same on every backend (DESIGN.md §1 is the commands; this is files).

The rules: a relative sandbox path is relative to the working directory commands start in; trees
keep their bytes, exec bits, empty directories and symlinks (as links, wherever they point);
missing parent directories are created on both sides; a file downloaded onto an existing host
directory lands inside it; a missing source is ``FileNotFoundError`` either way, and leaves nothing.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from swe_sandbox.capabilities import FILES_OUTSIDE_WORKSPACE
from swe_sandbox.errors import DownloadTooLarge
from swe_sandbox.testing.kit import hosts_its_workspace, requires, run, shareable_workspace, unique_marker


@pytest.fixture
def files_env(make_env, backend_under_test, tmp_path):
    """A fresh environment working on ``tmp_path/ws`` (a backend with a ``workspace`` field gets it,
    bound or copied in; the others run in it)."""
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)

    def make(**overrides):
        if hosts_its_workspace(backend_under_test.environment_class):
            return make_env(workspace=str(shareable_workspace(workspace)), **overrides)
        return make_env(**{"cwd": str(workspace), **overrides})

    return make


def _tree(root: Path) -> dict[str, object]:
    """What a copy must keep: each entry's bytes, exec bit, link target, or just that it is a dir."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir",)
        else:
            found[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), os.access(path, os.X_OK))
    return found


def _make_tree(root: Path) -> None:
    (root / "sub" / "empty").mkdir(parents=True)
    (root / "a ü.txt").write_bytes(b"\x00\xffbinary\nline\n")
    (root / "sub" / "data.bin").write_bytes(os.urandom(200_000))
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    (root / "rel").symlink_to("run.sh")
    (root / "abs").symlink_to("/etc/hostname")  # a venv's bin/python -> /usr/bin/python3 is the same


def test_tree_round_trip_keeps_bytes_modes_empty_dirs_and_symlinks(files_env, tmp_path):
    src, back = tmp_path / "src", tmp_path / "back"
    _make_tree(src)
    environment = files_env()
    environment.upload(src, "tree")  # relative: where commands start
    result = run(environment, "cd tree && ./run.sh && readlink rel abs && test -d sub/empty && echo empty-dir "
                              "&& sha256sum sub/data.bin | cut -c1-64")
    digest = hashlib.sha256((src / "sub" / "data.bin").read_bytes()).hexdigest()
    assert result["output"] == f"ran\nrun.sh\n/etc/hostname\nempty-dir\n{digest}\n", result
    environment.download("tree", back)
    assert _tree(back) == _tree(src)
    (tmp_path / "link-to-src").symlink_to(src)
    environment.upload(tmp_path / "link-to-src", "via-link")  # the source itself is followed
    assert run(environment, "via-link/run.sh")["output"] == "ran\n"


def test_single_file_into_new_directories_both_ways(files_env, tmp_path):
    (tmp_path / "f.txt").write_bytes(b"one\n")
    environment = files_env()
    environment.upload(tmp_path / "f.txt", "new/nested/f.txt")
    assert run(environment, "cat new/nested/f.txt")["output"] == "one\n"
    environment.download("new/nested/f.txt", tmp_path / "x" / "y" / "copy.txt")
    assert (tmp_path / "x" / "y" / "copy.txt").read_bytes() == b"one\n"
    (tmp_path / "into").mkdir()
    environment.download("new/nested/f.txt", tmp_path / "into")  # an existing directory: lands inside
    assert (tmp_path / "into" / "f.txt").read_bytes() == b"one\n"


def test_relative_paths_follow_the_configured_working_directory(files_env, tmp_path):
    default = run(files_env(), "pwd")["output"].strip()
    environment = files_env(cwd=f"{default}/sub")
    (tmp_path / "f.txt").write_text("in sub\n")
    environment.upload(tmp_path / "f.txt", "f.txt")
    assert run(environment, "cat f.txt; pwd")["output"] == f"in sub\n{default}/sub\n"
    assert run(environment, "cat sub/f.txt", cwd=default)["output"] == "in sub\n"
    environment.download("f.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_text() == "in sub\n"


def test_missing_source_is_file_not_found_and_leaves_nothing(files_env, tmp_path):
    environment = files_env()
    marker = unique_marker()
    with pytest.raises(FileNotFoundError):
        environment.upload(tmp_path / "no-such-file", f"up-{marker}")
    assert run(environment, f"ls up-{marker} 2>/dev/null || echo absent")["output"] == "absent\n"
    with pytest.raises(FileNotFoundError, match=f"no-such-{marker}"):
        environment.download(f"no-such-{marker}", tmp_path / "out" / "x")
    assert not (tmp_path / "out").exists()


@requires(FILES_OUTSIDE_WORKSPACE)
def test_absolute_paths_outside_the_working_directory(files_env, tmp_path):
    (tmp_path / "f.txt").write_text("abs\n")
    environment = files_env()
    target = f"/tmp/swe-up-{unique_marker()}"
    try:
        environment.upload(tmp_path / "f.txt", f"{target}/f.txt")
        assert run(environment, f"cat {target}/f.txt", cwd="/")["output"] == "abs\n"
        environment.download(f"{target}/f.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == "abs\n"
    finally:
        run(environment, f"rm -rf {target}")


# -- hostile sandboxes: what a command leaves behind must not steer a copy ------------------------


def test_upload_replaces_links_the_sandbox_planted_and_never_writes_through_them(files_env, tmp_path):
    victim, victim_dir = tmp_path / "victim.txt", tmp_path / "victim-dir"
    victim.write_text("ORIGINAL")
    victim_dir.mkdir()
    (tmp_path / "payload").write_text("uploaded")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "x").write_text("x")
    environment = files_env()
    run(environment, f"mkdir d && ln -s {victim} d/payload && mkdir tree && ln -s {victim_dir} tree/sub")
    environment.upload(tmp_path / "payload", "d")  # onto a directory: lands inside, where the link is
    environment.upload(tmp_path / "tree", "tree")
    assert victim.read_text() == "ORIGINAL" and list(victim_dir.iterdir()) == []
    result = run(environment, "test -L d/payload || cat d/payload; echo; test -L tree/sub || cat tree/sub/x")
    assert result["output"] == "uploaded\nx", result


def test_a_second_download_never_writes_through_links_of_the_first(files_env, tmp_path):
    victim, victim_dir = tmp_path / "victim.txt", tmp_path / "victim-dir"
    victim.write_text("ORIGINAL")
    victim_dir.mkdir()
    environment = files_env()
    run(environment, f"mkdir out && ln -s {victim} out/a && ln -s {victim_dir} out/d")
    environment.download("out", tmp_path / "host-out")
    run(environment, "rm out/a out/d && echo PWNED > out/a && mkdir out/d && echo x > out/d/dropped")
    environment.download("out", tmp_path / "host-out")
    assert victim.read_text() == "ORIGINAL" and list(victim_dir.iterdir()) == []
    assert (tmp_path / "host-out" / "a").read_text() == "PWNED\n"
    assert (tmp_path / "host-out" / "d" / "dropped").read_text() == "x\n"


def test_download_drops_setuid_bits_and_skips_special_files(files_env, tmp_path):
    environment = files_env()
    # bwrap refuses the chmod itself (seccomp): the download must drop the bits wherever they exist
    result = run(environment, "mkdir t && echo data > t/f && cp /bin/true t/suid && "
                              "{ chmod 6755 t/suid 2>/dev/null || chmod 755 t/suid; } && mkfifo t/fifo && echo made")
    assert result["output"] == "made\n", result
    environment.download("t", tmp_path / "t")
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["f", "suid"]
    assert (tmp_path / "t" / "suid").stat().st_mode & 0o7777 == 0o755


def test_a_path_that_is_a_symlink_downloads_as_the_link(files_env, tmp_path):
    environment = files_env()
    run(environment, "mkdir real && echo r > real/f && ln -s real linkdir && ln -s /etc linketc "
                     "&& ln -s /nonexistent dangling")
    for name in ("linkdir", "linketc", "dangling"):
        environment.download(name, tmp_path / name)
        assert os.readlink(tmp_path / name) == {"linkdir": "real", "linketc": "/etc", "dangling": "/nonexistent"}[name]


def test_a_file_uploaded_onto_a_directory_lands_inside_and_keeps_it(files_env, tmp_path):
    (tmp_path / "f.txt").write_text("new")
    environment = files_env()
    run(environment, "mkdir -p proj/src && echo important > proj/src/main.py")
    environment.upload(tmp_path / "f.txt", "proj")
    environment.upload(tmp_path / "f.txt", ".")
    result = run(environment, "cat proj/src/main.py proj/f.txt; echo; cat f.txt")
    assert result["output"] == "important\nnew\nnew", result


def test_a_dangling_symlink_uploads_as_the_link(files_env, tmp_path):
    (tmp_path / "dang").symlink_to("/nonexistent/target")
    environment = files_env()
    environment.upload(tmp_path / "dang", "dang")
    assert run(environment, "readlink dang")["output"] == "/nonexistent/target\n"


# -- max_download_bytes: a download never writes more than the limit on the host -------------------

#: A small limit for the tests (the default is 4 GiB).
LIMIT = 1 << 20


def _limit_error():
    return DownloadTooLarge


def test_download_past_max_download_bytes_fails_cleanly_and_one_at_the_limit_passes(files_env, tmp_path):
    """Counted by apparent size (a sparse file counts its full length), over the whole tree; the error
    names the limit and the path, and nothing is left on the host."""
    environment = files_env(max_download_bytes=LIMIT)
    made = run(environment, f"truncate -s {2 * LIMIT} sparse && truncate -s {LIMIT} exact && mkdir tree "
                            f"&& head -c {LIMIT // 2} /dev/urandom > tree/a && head -c {LIMIT // 2 + 1} /dev/zero "
                            f"> tree/b && du -k sparse | cut -f1 && echo made")
    assert made["output"].split() == ["0", "made"], made  # 0 KiB used in the sandbox
    for name in ("sparse", "tree"):
        with pytest.raises(_limit_error(), match=rf"environment\.max_download_bytes = {LIMIT}\b") as caught:
            environment.download(name, tmp_path / "out" / "deep" / name)
        assert name in str(caught.value)
        assert not (tmp_path / "out").exists()  # not even the parents
    (tmp_path / "into").mkdir()
    with pytest.raises(_limit_error()):
        environment.download("sparse", tmp_path / "into")  # onto an existing directory
    assert list((tmp_path / "into").iterdir()) == []
    environment.download("exact", tmp_path / "ok" / "exact")
    assert (tmp_path / "ok" / "exact").read_bytes() == bytes(LIMIT)
    (tmp_path / "ok" / "tree").mkdir()
    run(environment, "rm tree/b")
    environment.download("tree", tmp_path / "ok" / "tree")
    assert sorted(p.name for p in (tmp_path / "ok" / "tree").iterdir()) == ["a"]  # merged into
    assert (tmp_path / "ok" / "tree" / "a").stat().st_size == LIMIT // 2


def test_a_terabyte_sparse_file_fails_at_once_under_the_default_limit(files_env, backend_under_test, tmp_path):
    import time

    # a file size limit (bwrap's RLIMIT_FSIZE) would refuse to make the file: lifted, the download's bound is tested
    limited = "max_file_size_bytes" in backend_under_test.environment_class.config_class.model_fields
    environment = files_env(**({"max_file_size_bytes": None} if limited else {}))
    assert environment.config.max_download_bytes == 4 << 30
    made = run(environment, "truncate -s 1T huge && echo made")
    assert made["output"] == "made\n", made
    started = time.monotonic()
    with pytest.raises(_limit_error(), match=r"huge\b.*environment\.max_download_bytes = 4294967296\b"):
        environment.download("huge", tmp_path / "out" / "huge")
    assert time.monotonic() - started < 10
    assert not (tmp_path / "out").exists()
    assert run(environment, "echo still usable")["output"] == "still usable\n"


def test_a_file_growing_during_the_download_never_takes_the_host_copy_past_the_limit(files_env, tmp_path):
    """A background writer appends while downloads run, one after another, until the file is twice the
    limit: each host copy is at most the limit (the bytes written count, not only the size announced),
    else the download fails and leaves nothing. (tests/unit/test_download_limits.py makes a file grow
    between its stat and its read on each copy path, deterministically.)"""
    import time

    environment = files_env(max_download_bytes=LIMIT)
    started = run(environment, "(for i in $(seq 1 200); do head -c 65536 /dev/zero; sleep 0.01; done > grow) "
                               ">/dev/null 2>&1 & echo $! > writer.pid; echo started")
    assert started["output"] == "started\n", started
    try:
        outcomes = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            size = int(run(environment, "stat -c %s grow 2>/dev/null || echo 0")["output"])
            dst = tmp_path / f"try{len(outcomes)}" / "grow"
            try:
                environment.download("grow", dst)
            except _limit_error():
                assert not dst.parent.exists()
                outcomes.append("refused")
            else:
                assert dst.stat().st_size <= LIMIT
                outcomes.append("copied")
            if size > 2 * LIMIT:
                break
        assert outcomes and outcomes[-1] == "refused", outcomes
    finally:
        run(environment, "kill $(cat writer.pid) 2>/dev/null; true")
