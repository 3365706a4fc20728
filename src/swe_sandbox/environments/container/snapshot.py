"""Snapshots of a container: its whole root committed as an image (``environments.snapshot``).

A fork is a new container of that image (the engine's copy-on-write layers: nothing is copied).
A reset in place (``ContainerSnapshot.reset``) works from what the engine itself reports, never
from what the sandbox says about its files:

1. the runner kills every process but itself (``Environment.kill_all``) and empties ``/dev/shm``;
2. the engine lists every path the container changed against its image (``Engine.changes``);
   (with, on a container of the snapshot's base image, what the snapshot itself had changed: a
   path it added and a command deleted leaves no trace there);
3. each such path's own entry (type, mode, owner, size and sha256; a directory's children are
   listed themselves), read by the runner once nothing else runs (``runner.path_entry``), is
   compared with the same path's in the snapshot's reference sandbox, started from it once and in
   which no command ever runs;
4. what differs is put back from the reference through the engine's archive API, and what the
   snapshot lacks is removed by the runner (no program of the sandbox runs for it);
5. the comparison is made again over the engine's new list, and no process may be left.

Anything still different is drift (``ResetFailed``). More than ``MAX_RESET_CHANGES`` changed paths
is drift too: a fresh container of the image is then the cheaper way back.

A snapshot's image is removed with it; while sandboxes started from it still run, the engine keeps
it and the last of them to close removes it (``release``).
"""

from __future__ import annotations

import io
import posixpath
import shlex
import shutil
import tarfile
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, TypeAlias

from swe_sandbox.capabilities import RESET_IN_PLACE, has_capability
from swe_sandbox.environments import treedigest
from swe_sandbox.environments.container.archive import ChunkReader
from swe_sandbox.environments.container.engine import ENGINE_FILES, LABEL_SNAPSHOT, Engine, error_line
from swe_sandbox.environments.snapshot import Snapshot, make_store
from swe_sandbox.errors import SnapshotError

if TYPE_CHECKING:
    from swe_sandbox.config import EnvironmentConfig

#: An ``Environment`` / a ``container.environment.ContainerEnvironment`` (not imported: that
#: module imports this one).
Environment: TypeAlias = Any
ContainerEnvironment: TypeAlias = Any

#: Repository of snapshot images (built here: never pulled, ``image_ref.BUILT_IMAGES``).
SNAPSHOT_REPOSITORY = "swe-sandbox/snapshot"
#: Most changed paths a reset compares; past it the reset is drift (a fresh fork is cheaper).
MAX_RESET_CHANGES = 5000

_PENDING: dict[str, Engine] = {}  # images removed while a container still used them
_PENDING_LOCK = threading.Lock()


class ContainerSnapshot(Snapshot):
    """A container's root committed as image ``image``; forks are containers of it."""

    def __init__(self, env: ContainerEnvironment):
        super().__init__(env, ("/",))
        self.image: str | None = f"{SNAPSHOT_REPOSITORY}:{self.id}"
        self.engine = env.engine
        self._labels = {**env.labels(), LABEL_SNAPSHOT: self.id}
        #: The paths the source container had changed against its image when the snapshot was taken.
        self.changes: list[str] = []
        self._reference: list[Environment] = []  # a sandbox of the snapshot in which nothing runs
        self._finalizer = weakref.finalize(self, _remove_all, self.engine, self.image, self._reference, None)

    @classmethod
    def take(cls, env: ContainerEnvironment) -> ContainerSnapshot:
        """Commit ``env``'s container (the engine pauses it meanwhile).

        Raises:
            SnapshotError: the engine refused.
        """
        began = time.monotonic()
        snap = cls(env)
        try:
            snap.capture(env)
        except (OSError, tarfile.TarError) as exc:
            snap.remove()
            raise SnapshotError(f"{env.engine.name}: cannot snapshot the container: {exc}") from None
        except env.engine.errors as exc:
            snap.remove()
            raise SnapshotError(f"{env.engine.name}: cannot snapshot the container: {error_line(exc)}") from None
        snap.taken_s = time.monotonic() - began
        return snap

    def capture(self, env: ContainerEnvironment) -> None:
        """Record what ``env``'s container changed, and commit it."""
        cid = env.container_id or ""
        self.changes = [path for path, _ in self.engine.changes(cid)]
        self.engine.commit(cid, self.image or "", self._labels)

    def fork_config(self) -> EnvironmentConfig:
        """The source's config on the snapshot's image, nothing copied in (the image holds it)."""
        return self.config.model_copy(update={"image": self.image, "workspace": None})

    def restore_into(self, env: Environment) -> None:
        self.check_usable()  # the image holds the state: nothing to copy

    def reset(self, env: Environment) -> list[str]:
        container: ContainerEnvironment = env
        cid, reference = container.container_id or "", self.reference()
        first = env.kill_all(clear=env.volatile_dirs)
        if first.processes or first.errors:
            return [f"process left: {p}" for p in first.processes] + [f"cannot remove {e}" for e in first.errors]
        changes = self.engine.changes(cid)
        paths = sorted({path for path, _ in changes} | self.base_changes(container))
        recreated = {path for path, kind in changes if kind == "deleted"}
        unnamed = [path for path in paths if "\ufffd" in path]
        if unnamed or len(paths) > MAX_RESET_CHANGES:
            return [f"{len(unnamed)} changed paths the engine cannot name (not UTF-8)"] if unnamed else \
                [f"{len(paths)} paths changed (more than {MAX_RESET_CHANGES}): a fresh sandbox is cheaper"]
        want = reference.kill_all(digest=paths).entries
        remove, put, own_entry = plan(paths, env.kill_all(digest=paths).entries, want, recreated)
        errors = env.kill_all(remove=remove).errors if remove else []
        if errors:
            return [f"cannot remove {e}" for e in errors]
        source = reference.container_id or ""
        for path in put:
            if _kind(want[path]) == "link":  # an archive of a link may be of its target (Podman)
                data: Any = link_member(path, want[path] or "")
            else:
                data = self.engine.get_owned_archive(source, path)
                data = first_member(data) if path in own_entry else data
            self.engine.put_archive(cid, posixpath.dirname(path), data)
        return self.verify(container, reference, set(paths)) + self.engine_files_drift(env)

    @staticmethod
    def engine_files_drift(env: Environment) -> list[str]:
        """The engine's own files (``ENGINE_FILES``) not as they were when the container started
        (``ContainerEnvironment.engine_files``): not put back (bind mounts), so drift."""
        container: ContainerEnvironment = env
        expected, now = container.engine_files, env.path_entries(ENGINE_FILES)
        return [f"{path}: changed (a file the engine writes at start)" for path in ENGINE_FILES
                if now.get(path) != expected.get(path)]

    def verify(self, env: ContainerEnvironment, reference: Environment, before: set[str]) -> list[str]:
        """Compare every path changed with the reference sandbox's again; then no process may be
        left. (The engine is not asked for its changes again: nothing ran since but the restore,
        whose only new paths are those below a directory put back whole from the reference; a
        second ``docker diff`` costs ~0.6 s here.)"""
        paths = sorted(before)
        now, want = env.kill_all(digest=paths), reference.kill_all(digest=paths).entries
        drift = [f"{path}: {now.entries.get(path) or 'missing'}, the snapshot has {want.get(path) or 'nothing'}"
                 for path in paths if now.entries.get(path) != want.get(path)][:treedigest.MAX_LINES]
        return drift + [f"process started during the reset: {p}" for p in now.processes]

    def base_changes(self, env: ContainerEnvironment) -> set[str]:
        """What the snapshot changed against its base image, when ``env`` runs on that image: a path
        the snapshot added and a command deleted since leaves no trace in the engine's changes there."""
        return set() if env.config.image == self.image else set(self.changes)

    def reference(self) -> Environment:
        """The sandbox of the snapshot a reset compares with and copies from (started on first use;
        no command ever runs in it)."""
        with self._lock:
            if not self._reference:
                self._reference.append(self.environment())
            return self._reference[0]

    def _remove(self) -> None:
        self._finalizer()


class ArchiveSnapshot(ContainerSnapshot):
    """A container's changes against its image, kept as one archive (``Engine.commit_keeps_owners``
    False: Podman 4 commits a container of a user namespace with the host's ids in the new layer,
    which no other container maps back). A fork is a container of the same image with the
    deleted paths removed and the archive put in at ``/``."""

    def __init__(self, env: ContainerEnvironment):
        super().__init__(env)
        self.image = None
        self.store = make_store()
        self.deleted: list[str] = []
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _remove_all, self.engine, None, self._reference, str(self.store))

    def capture(self, env: ContainerEnvironment) -> None:
        """Archive what ``env``'s container changed into the store (a changed directory by its own
        entry, an added one whole, a symlink as a link: Podman's archive of a link is its target's);
        keep the deleted paths."""
        assert self.store is not None
        cid = env.container_id or ""
        changes = sorted(self.engine.changes(cid))
        self.changes = [path for path, _ in changes]
        if any("\ufffd" in path for path in self.changes):
            raise SnapshotError(f"{self.engine.name}: the container holds changed paths whose names are not UTF-8")
        links = symlinks_of(env, [path for path, kind in changes if kind != "deleted"])
        whole: list[str] = []
        with tarfile.open(self.store / "changes.tar", "w", format=tarfile.PAX_FORMAT) as out:
            for path, kind in changes:
                if any(path.startswith(p + "/") for p in whole):
                    continue
                if kind == "deleted":
                    self.deleted.append(path)
                    if not self._exists(cid, path):
                        continue
                    kind = "added"  # re-created: Podman lists nothing below it, so all of it goes
                if path in links:
                    copy_members([link_member(path, links[path])], out, posixpath.dirname(path).lstrip("/"))
                    continue
                stream = self.engine.get_owned_archive(cid, path)
                if copy_members(stream, out, posixpath.dirname(path).lstrip("/"), own_dir=kind == "changed"):
                    whole.append(path.rstrip("/"))

    def _exists(self, cid: str, path: str) -> bool:
        try:
            for _ in self.engine.get_owned_archive(cid, path):
                break
        except self.engine.errors as exc:
            if self.engine.is_not_found(exc):
                return False
            raise
        return True

    def fork_config(self) -> EnvironmentConfig:
        return self.config

    def restore_into(self, env: Environment) -> None:
        self.check_usable()
        assert self.store is not None
        container: ContainerEnvironment = env
        if self.deleted and has_capability(env, RESET_IN_PLACE):
            env.kill_all(remove=self.deleted)
        elif self.deleted:  # the exec fallback: nothing ran in the new sandbox yet
            env.execute({"command": "rm -rf -- " + " ".join(shlex.quote(p) for p in self.deleted)}, timeout=600)
        with open(self.store / "changes.tar", "rb") as archive:
            self.engine.put_archive(container.container_id or "", "/", archive)


def copy_members(stream: Any, out: tarfile.TarFile, parent: str, own_dir: bool = False) -> bool:
    """Append the members of archive ``stream`` to ``out`` under ``parent`` (a relative path; hard
    links' targets too); ``own_dir``: when the first member is a directory, it alone. Whether the
    whole archive was copied."""
    with ChunkReader(stream) as reader, tarfile.open(fileobj=reader, mode="r|") as src:
        for member in src:
            first_dir = own_dir and member.isdir()
            member.name = posixpath.join(parent, member.name) if parent else member.name
            if member.islnk():
                member.linkname = posixpath.join(parent, member.linkname) if parent else member.linkname
            out.addfile(member, src.extractfile(member) if member.isreg() else None)
            if first_dir:
                return False
    return True


def _remove_all(engine: Engine, image: str | None, reference: list[Environment], store: str | None) -> None:
    """Close the reference sandbox, remove the image (one still in use waits for ``release``) and
    the store."""
    try:
        for env in reference:
            env.close()
        if image is not None and not engine.remove_image(image):
            with _PENDING_LOCK:
                _PENDING[image] = engine
    except Exception:  # noqa: BLE001 - a finalizer never raises; gc removes what is left
        pass
    if store is not None:
        shutil.rmtree(store, ignore_errors=True)


def plan(changed: list[str], now: dict[str, str | None], want: dict[str, str | None],
         deleted: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], list[str], set[str]]:
    """What a reset does, outermost path first: the paths to remove (the snapshot lacks them, or
    something of another type is in the way), those to put back from the snapshot (whole: a
    missing directory comes back with everything below it; a path below one put back whole is
    skipped), and which of those are directories on both sides whose own entry alone differs (mode,
    owner: only that entry is put back, their children being changed paths themselves). A path the
    engine lists as ``deleted`` that exists again (``rm -rf d && mkdir d``: Podman then lists none of
    what ``d`` held) is removed and put back whole."""
    remove: list[str] = []
    put: list[str] = []
    own_entry: set[str] = set()
    for path in sorted(changed):
        whole = [p for p in put if p not in own_entry]
        if any(path.startswith(p.rstrip("/") + "/") for p in whole):
            continue
        if path in deleted and now[path] is not None and want[path] is not None:
            remove.append(path)
            put.append(path)
            continue
        if now[path] == want[path]:
            continue
        if want[path] is None:
            remove.append(path)
            continue
        if _kind(now[path]) == _kind(want[path]) == "dir":
            own_entry.add(path)
        elif now[path] is not None:
            remove.append(path)
        put.append(path)
    return remove, put, own_entry


#: The shell loop naming the symlinks among paths: NUL-separated path, target pairs.
_LINKS_SCRIPT = 'for p in {paths}; do [ -L "$p" ] && printf "%s\\0%s\\0" "$p" "$(readlink -- "$p")"; done; true'


def symlinks_of(env: Environment, paths: list[str]) -> dict[str, str]:
    """Which of ``paths`` are symlinks in ``env``, and their targets (through the runner, else a command)."""
    if not paths:
        return {}
    if has_capability(env, RESET_IN_PLACE):
        return {path: (entry or "").partition(" -> ")[2] for path, entry in env.path_entries(paths).items()
                if _kind(entry) == "link"}
    result = env.execute({"command": _LINKS_SCRIPT.format(paths=" ".join(shlex.quote(p) for p in paths))},
                         timeout=600)
    fields = result["output"].split("\0")
    return dict(zip(fields[0:-1:2], fields[1::2], strict=False))


def link_member(path: str, entry_or_target: str) -> bytes:
    """A tar holding the symlink ``basename(path)``: to the target of a runner entry
    (``"link MODE UID:GID -> TARGET"``) or to ``entry_or_target`` itself."""
    head, arrow, target = entry_or_target.partition(" -> ")
    info = tarfile.TarInfo(posixpath.basename(path))
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target if arrow else entry_or_target, 0o777
    owner = head.split()[2] if arrow and len(head.split()) > 2 else "0:0"
    info.uid, info.gid = (int(part) for part in owner.split(":"))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        archive.addfile(info)
    return out.getvalue()


def _kind(entry: str | None) -> str:
    return (entry or "").partition(" ")[0]


def release(engine: Engine, image: str) -> None:
    """A container of ``image`` was removed: remove the image now if its snapshot was removed before."""
    with _PENDING_LOCK:
        pending = _PENDING.pop(image, None)
    if pending is not None:
        _remove_all(pending, image, [], None)


def first_member(stream: Any) -> bytes:
    """A tar holding only the first member of the archive ``stream`` (a directory's own entry)."""
    out = io.BytesIO()
    with ChunkReader(stream) as reader, tarfile.open(fileobj=reader, mode="r|") as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            dst.addfile(member)
            break
    return out.getvalue()
