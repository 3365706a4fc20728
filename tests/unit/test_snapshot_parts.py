"""The parts of snapshots and verified resets that need no sandbox: the runner's removal and entries,
the host's tree digests, the container reset's plan, the owners of Podman archives, the store's gc.

The contract itself (fork isolation, reset against hostile commands) is the kit's
``swe_sandbox.testing.test_snapshot``, run on every backend.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path

from swe_sandbox import runner
from swe_sandbox.environments import snapshot, treedigest
from swe_sandbox.environments.container.archive import shift_owners
from swe_sandbox.environments.container.snapshot import plan
from swe_sandbox.errors import ResetFailed


def make_tree(root: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_text("one")
    (root / "x").write_text("two")
    (root / "link").symlink_to("/etc/passwd")
    os.mkfifo(root / "fifo")


def test_remove_path_removes_a_tree_and_never_follows_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    tree = tmp_path / "tree"
    tree.mkdir()
    make_tree(tree)
    (tree / "d" / "to-outside").symlink_to(outside)
    errors: list[str] = []
    runner.remove_path(str(tree / "d"), errors)
    runner.clear_dir(str(tree), errors)
    runner.remove_path(str(tmp_path / "missing"), errors)
    assert errors == []
    assert list(tree.iterdir()) == []
    assert (outside / "keep").read_text() == "kept"


def test_path_entry_is_the_path_itself():
    entry = runner.path_entry(sys.executable)
    assert entry is not None and entry.split()[0] in ("file", "link")
    assert runner.path_entry("/nonexistent/path") is None
    assert runner.path_entry("/").startswith("dir ")


def test_path_entry_of_a_file_holds_size_and_sha256(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    os.chmod(tmp_path / "f", 0o640)
    entry = runner.path_entry(str(tmp_path / "f"))
    assert entry == (f"file 0640 {os.getuid()}:{os.getgid()} 3 "
                     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    (tmp_path / "l").symlink_to("f")
    assert runner.path_entry(str(tmp_path / "l")).endswith(" -> f")


def test_host_tree_and_differences(tmp_path):
    make_tree(tmp_path)
    before = treedigest.host_tree(tmp_path)
    assert before["link"] == "link 0777 own -> /etc/passwd"
    assert before["fifo"].startswith("fifo ")
    assert before["d/f"].startswith("file 0644 own 3 ")
    assert treedigest.differences(before, treedigest.host_tree(tmp_path), "/w") == []
    (tmp_path / "d" / "f").write_text("changed")
    (tmp_path / "new").write_text("")
    (tmp_path / "x").unlink()
    os.chmod(tmp_path / "d", 0o700)
    lines = treedigest.differences(before, treedigest.host_tree(tmp_path), "/w")
    assert [line.split(":")[0] for line in lines] == ["/w/d", "/w/d/f", "/w/new", "/w/x"]
    assert "not in the snapshot" in lines[2] and "missing" in lines[3]


def test_differences_are_bounded():
    lines = treedigest.differences({}, {str(i): "file" for i in range(200)}, "/t")
    assert len(lines) == treedigest.MAX_LINES + 1 and lines[-1].startswith("and 150 more")


def test_plan_removes_puts_and_keeps():
    now = {"/a": "file 0644 0:0 1 x", "/d": "dir 0755 0:0", "/d/new": "file 0644 0:0 1 y",
           "/gone": None, "/gone/child": None, "/t": "file 0644 0:0 1 z", "/same": "file 0644 0:0 1 s",
           "/m": "dir 0700 0:0"}
    want = {"/a": "file 0644 0:0 1 X", "/d": "dir 0755 0:0", "/d/new": None, "/gone": "dir 0755 0:0",
            "/gone/child": "file 0644 0:0 1 c", "/t": "dir 0755 0:0", "/same": "file 0644 0:0 1 s",
            "/m": "dir 0755 0:0"}
    remove, put, own_entry = plan(sorted(now), now, want)
    assert remove == ["/a", "/d/new", "/t"]  # another file, not in the snapshot, a file where a dir was
    assert put == ["/a", "/gone", "/m", "/t"]  # /gone/child comes back with /gone
    assert own_entry == {"/m"}  # a directory whose mode alone differs: only its own entry


def tar_with_owner(uid: int, gid: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("f")
        info.size, info.uid, info.gid, info.uname = 2, uid, gid, "someone"
        info.pax_headers = {"uid": str(uid), "gid": str(gid)}
        archive.addfile(info, io.BytesIO(b"hi"))
    return buf.getvalue()


def test_shift_owners_maps_host_ids_back_to_the_container():
    data = b"".join(shift_owners(iter([tar_with_owner(1_000_000_005, 1_000_000_007)]), 1_000_000_000,
                                 1_000_000_000, 65536))
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.getmembers()[0]
        assert (member.uid, member.gid, member.name) == (5, 7, "f")
        assert archive.extractfile(member).read() == b"hi"
    outside = b"".join(shift_owners(iter([tar_with_owner(3, 4)]), 1_000_000_000, 1_000_000_000, 65536))
    with tarfile.open(fileobj=io.BytesIO(outside)) as archive:
        assert (archive.getmembers()[0].uid, archive.getmembers()[0].gid) == (3, 4)


def test_reset_failed_names_the_drift_and_pickles():
    error = ResetFailed([f"/w/{i}: missing" for i in range(7)])
    assert "/w/0: missing" in str(error) and "and 2 more" in str(error) and "closed" in str(error)
    assert pickle.loads(pickle.dumps(error)).drift == error.drift


def test_gc_stores_removes_those_of_dead_owners_only(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "SCRATCH_PARENT", str(tmp_path))
    mine = snapshot.make_store()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"{snapshot.STORE_PREFIX}{dead.stdout.strip()}-x"
    orphan.mkdir()
    (orphan / snapshot.OWNER_FILE).write_text(json.dumps({"pid": int(dead.stdout), "start": "gone"}))
    assert {entry["id"]: entry["action"] for entry in snapshot.gc_stores(dry_run=True)} == {
        mine.name: "kept (owner alive)", orphan.name: "would remove"}
    snapshot.gc_stores()
    assert mine.exists() and not orphan.exists()


def test_tree_plan_undoes_only_what_differs():
    want = {"": "dir 0755", "a": "file 0644 1 x", "d": "dir 0755", "d/f": "file 0644 1 y", "gone": "dir 0755",
            "gone/g": "file 0644 1 z", "same": "file 0644 1 s", "t": "file 0644 1 t"}
    now = {"": "dir 0700", "a": "file 0644 1 X", "d": "dir 0755", "d/f": "file 0644 1 y", "d/new": "file 0644 1 n",
           "same": "file 0644 1 s", "t": "dir 0755", "t/inner": "file 0644 1 i", "extra": "dir 0755",
           "extra/e": "file 0644 1 e"}
    remove, put = treedigest.plan(want, now)
    assert remove == ["a", "d/new", "extra", "t"]  # t's children go with it
    assert put == ["a", "gone", "t"]  # gone/g comes back with gone; the root's own mode is the check's
