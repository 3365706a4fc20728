"""Snapshots of a sandbox's filesystem state, forks started from them, and verified resets
(DESIGN.md section 10).

Every command is a fresh ``bash -c`` and the runner is the sandbox's first process, so a sandbox's
state is its files plus its processes; a snapshot keeps the files (processes never survive it: a
background server is not running in a fork) and a reset ends the processes.

    snap = env.snapshot()            # the state now (env keeps running)
    forks = snap.fork(8)             # 8 started sandboxes, each isolated from env and each other
    env.reset(snap)                  # back to the snapshot in place, proven, or ResetFailed
    snap.remove()                    # (or ``with env.snapshot() as snap:``)

``Snapshot`` is the part every backend shares (fork, remove, the checks); a backend's snapshot
class fills in ``restore_into`` (a fresh sandbox gets the state), ``reset`` (a used one is brought
back and proven) and ``_remove``. ``StoreSnapshot`` is the one for backends whose state is a few
trees (``Environment.snapshot_roots``): a copy of each in a host store directory, copied out with
``hostcopy`` where the host reaches the tree (bwrap, local; the tree is live and hostile: no link is
followed), back in with ``cp -a`` (the store is static), else through ``download``/``upload`` (ssh). Container engines commit the whole root instead (``container.snapshot``).

A verified reset: (1) the runner kills every process but itself (``Environment.kill_all``);
(2) each tree's digest (``treedigest``), read by the host, is compared with the snapshot's: what
the snapshot lacks (or holds as something else) is removed by the runner, what differs or is
missing is copied back from the store (``treedigest.plan``); (3) each tree's digest must now equal
the snapshot's; (4) no process may be left. Any difference is drift: the environment is closed
and ``ResetFailed`` lists what differed.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from swe_sandbox.environments import hostcopy, treedigest
from swe_sandbox.environments.scratch import SCRATCH_PARENT
from swe_sandbox.errors import SandboxError, SnapshotError

if TYPE_CHECKING:
    from swe_sandbox.config import EnvironmentConfig

#: An ``environments.base.Environment`` (not imported: ``base`` imports this module).
Environment: TypeAlias = Any

#: Most sandboxes ``fork`` starts at once (each start is mostly waiting on an engine or a copy).
FORK_WORKERS = 8
#: Prefix of a host store directory: ``<prefix><owner pid>-<id>`` under ``SCRATCH_PARENT``.
STORE_PREFIX = "swe-sandbox-snapshot-"
#: How a tree the host cannot write is restored from inside (the kept copy as a tar on stdin).
RESTORE_COMMAND = "tar -xf - --no-same-owner -C {path}"
#: Seconds a restore from inside may take.
RESTORE_TIMEOUT_S = 600.0
#: The file in a store saying which process owns it (``gc_stores``).
OWNER_FILE = "owner.json"


@dataclass(frozen=True)
class SnapshotRoot:
    """One tree of a sandbox's state that a ``StoreSnapshot`` keeps.

    Attributes:
        name: its name in the store (``workspace``, ``tmp``, ``var-tmp``): the same in a fork, whose
            ``path`` may differ (an ssh fork has a workspace of its own).
        path: the tree as commands see it (absolute).
        host: where this host reads it directly now, or None (then ``download``).
        owner: ``(uid, gid)`` the restored entries get on the host (bwrap: the sandbox's uid).
        host_writable: the host may write ``host`` too; else the tree is restored from inside,
            by ``tar`` reading the kept copy on its stdin (a tmpfs of the sandbox's user namespace,
            where a host uid it does not map cannot create files). Without ``host``: ``upload``.
    """

    name: str
    path: str
    host: Path | None = None
    owner: tuple[int, int] | None = None
    host_writable: bool = True


class Snapshot:
    """A sandbox's filesystem state at one moment; new sandboxes start from it.

    Attributes:
        id (str): unique, 12 hex digits.
        backend (str): the backend's name (``docker``, ``bwrap``, ...).
        roots (tuple[str, ...]): the sandbox paths captured (``("/",)``: the whole root).
        image (str | None): the committed image (containers), else None.
        store (Path | None): the host directory holding the copies (store backends), else None.
        taken_s (float): seconds the snapshot took.
    """

    image: str | None = None
    store: Path | None = None

    def __init__(self, env: Environment, roots: tuple[str, ...]):
        self.id = uuid.uuid4().hex[:12]
        self.backend = env.config.backend
        self.roots = roots
        self.taken_s = 0.0
        self.env_class = type(env)
        self.config: EnvironmentConfig = env.sibling_config()
        self._source_config = env.config
        self._removed = False
        self._lock = threading.Lock()

    # -- what every backend shares -------------------------------------------------------------
    def environment(self) -> Environment:
        """A new, started sandbox of the same backend and config, holding the snapshot's state;
        the caller closes it.

        Raises:
            SnapshotError: the snapshot was removed, or the sandbox could not be started or filled
                (nothing is left running).
        """
        self.check_usable()
        env = self.env_class(self.fork_config())
        try:
            env.start()
            self.restore_into(env)
        except BaseException as exc:
            env.close()
            if isinstance(exc, (SandboxError, OSError, ValueError)) and not isinstance(exc, SnapshotError):
                raise SnapshotError(f"cannot start a sandbox from snapshot {self.id}: {exc}") from exc
            raise
        return env

    def fork(self, n: int) -> list[Environment]:
        """``n`` new sandboxes from the snapshot (``environment()`` each), started concurrently
        (at most ``FORK_WORKERS`` at once); all or nothing.

        Raises:
            ValueError: ``n`` is not a positive int.
            SnapshotError: one could not be made; the others were closed.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"fork: n must be a positive number of sandboxes, got {n!r}")
        with ThreadPoolExecutor(max_workers=min(n, FORK_WORKERS), thread_name_prefix="swe-sandbox-fork") as pool:
            futures = [pool.submit(self.environment) for _ in range(n)]
        made = [f.result() for f in futures if f.exception() is None]
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            for env in made:
                env.close()
            raise failed[0]  # type: ignore[misc]
        return made

    def check_usable(self) -> None:
        """Raises SnapshotError when the snapshot was removed."""
        if self._removed:
            raise SnapshotError(f"snapshot {self.id} was removed")

    def check_compatible(self, env: Environment) -> None:
        """Raises ValueError unless ``env`` is of the snapshot's backend class and config."""
        if type(env) is not self.env_class or env.sibling_config() not in (self.config, self.fork_config()):
            raise ValueError(f"reset: snapshot {self.id} is of a {self.backend} sandbox with another config "
                             f"({self.env_class.__name__}); reset only sandboxes of its own backend and config")

    def remove(self) -> None:
        """Remove what the snapshot holds (image, store); idempotent. Sandboxes started from it go on."""
        with self._lock:
            if self._removed:
                return
            self._removed = True
        self._remove()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} of {self.backend}: {', '.join(self.roots)}>"

    # -- what a backend's snapshot fills in ----------------------------------------------------
    def fork_config(self) -> EnvironmentConfig:
        """The config a sandbox started from the snapshot gets (default: the source's sibling config)."""
        return self.config

    def restore_into(self, env: Environment) -> None:
        """Give the freshly started ``env`` the snapshot's state."""
        raise NotImplementedError

    def reset(self, env: Environment) -> list[str]:
        """Bring ``env`` (started, under its lock) back to the snapshot; what drifted (empty: proven)."""
        raise NotImplementedError

    def _remove(self) -> None:
        """Remove the image or store (once)."""


class StoreSnapshot(Snapshot):
    """A snapshot kept as copies of the sandbox's trees in a host store directory (bwrap, local, ssh)."""

    def __init__(self, env: Environment, roots: list[SnapshotRoot]):
        super().__init__(env, tuple(root.path for root in roots))
        self.store = make_store()
        self.digests: dict[str, dict[str, str]] = {}
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.store), True)

    @classmethod
    def take(cls, env: Environment) -> StoreSnapshot:
        """Copy ``env``'s trees (``snapshot_roots``) into a new store.

        Raises:
            SnapshotError: a tree could not be copied (the store is removed again).
        """
        began = time.monotonic()
        roots = env.snapshot_roots()
        snap = cls(env, roots)
        for root in roots:
            try:
                snap.digests[root.name] = snap.copy_out(env, root)
            except (OSError, ValueError, SandboxError) as exc:
                snap.remove()
                raise SnapshotError(f"{env.config.backend}: cannot snapshot {root.path}: {exc}") from exc
        snap.taken_s = time.monotonic() - began
        return snap

    def copy_out(self, env: Environment, root: SnapshotRoot) -> dict[str, str]:
        """Copy ``root`` into the store; the copy's digest."""
        assert self.store is not None
        kept = self.store / root.name
        if root.host is not None:
            hostcopy.copy(root.host, "", self.store, root.name, keep_fifos=True)
        else:
            env.download(root.path, kept)
        kept.mkdir(exist_ok=True)
        digest = treedigest.host_tree(kept)  # the copy is this process's: what a restore gives the sandbox
        if root.host is not None:  # the tree's own entry as it is (the copy's has no sticky bit)
            digest[""] = treedigest.host_tree(root.host, own=root.owner, own_only=True)[""]
        return digest

    def restore_into(self, env: Environment) -> None:
        self.check_usable()
        assert self.store is not None
        for root in env.snapshot_roots():
            kept = self.store / root.name
            if root.host is not None and root.host_writable:
                copy_static(kept, root.host, root.owner)
            elif root.host is None:
                env.upload(kept, root.path)
            elif any(kept.iterdir()):
                result = env.execute({"command": RESTORE_COMMAND.format(path=shlex.quote(root.path))},
                                     stdin=tar_of(kept), timeout=RESTORE_TIMEOUT_S)
                if result["returncode"] != 0:
                    raise SnapshotError(f"cannot restore {root.path}: {result['output'][-500:]}")

    def reset(self, env: Environment) -> list[str]:
        """Kill every process, then undo only what differs from the snapshot's digests (what the
        snapshot lacks removed by the runner, what differs or is missing copied back from the
        store), then compare every tree again."""
        roots = env.snapshot_roots()
        processes, errors, _ = env.kill_all(clear=list(env.volatile_dirs))
        drift = [f"process left: {p}" for p in processes] + [f"cannot remove {e}" for e in errors]
        if drift:
            return drift
        plans = {root.name: treedigest.plan(self.digests.get(root.name, {}), self.digest_now(env, root))
                 for root in roots}
        remove = [posixpath.join(root.path, rel) for root in roots for rel in plans[root.name][0]]
        errors = env.kill_all(remove=remove).errors if remove else []
        if errors:
            return [f"cannot remove {e}" for e in errors]
        for root in roots:
            self.put_back(env, root, plans[root.name][1])
        for root in roots:
            drift += treedigest.differences(self.digests.get(root.name, {}), self.digest_now(env, root), root.path)
        processes = env.kill_all().processes
        return drift + [f"process started during the reset: {p}" for p in processes]

    def put_back(self, env: Environment, root: SnapshotRoot, rels: list[str]) -> None:
        """Copy ``rels`` (paths relative to ``root``, outermost first) from the store into ``env``."""
        assert self.store is not None
        kept = self.store / root.name
        if not rels:
            return
        if root.host is not None and root.host_writable:
            for rel in rels:
                hostcopy.copy(kept, rel, root.host, rel, owner=root.owner, keep_fifos=True)
        elif root.host is None:
            for rel in rels:
                env.upload(kept / rel, posixpath.join(root.path, rel))
        else:
            result = env.execute({"command": RESTORE_COMMAND.format(path=shlex.quote(root.path))},
                                 stdin=tar_of(kept, rels), timeout=RESTORE_TIMEOUT_S)
            if result["returncode"] != 0:
                raise SnapshotError(f"cannot restore {root.path}: {result['output'][-500:]}")

    @staticmethod
    def digest_now(env: Environment, root: SnapshotRoot) -> dict[str, str]:
        """``root``'s digest as it is in ``env`` now (read by the host: directly, or a download)."""
        if root.host is not None:
            return treedigest.host_tree(root.host, own=root.owner)
        with tempfile.TemporaryDirectory(prefix="swe-sandbox-reset-") as tmp:
            env.download(root.path, Path(tmp) / "tree")
            (Path(tmp) / "tree").mkdir(exist_ok=True)
            return treedigest.host_tree(Path(tmp) / "tree")

    def _remove(self) -> None:
        self._finalizer()


def copy_static(src: Path, dst: Path, owner: tuple[int, int] | None) -> None:
    """Copy what is in ``src`` into the existing directory ``dst`` with ``cp -a`` (links as links,
    modes kept; a reflink where the filesystem has them), then give it to ``owner``; ``dst`` itself
    keeps its mode and owner.

    For trees nothing writes to while they are copied (a store into a fresh or emptied sandbox
    whose processes are all gone): ``cp`` does not guard against a directory swapped for a link
    meanwhile, as ``hostcopy`` does for a live sandbox's tree.

    Raises:
        OSError: ``cp`` or ``chown`` failed (their message).
    """
    steps = [["cp", "-a", "--reflink=auto", "--", f"{src}/.", f"{dst}/"]]
    names = [str(dst / child.name) for child in src.iterdir()] if owner is not None else []
    if names:
        steps.append(["chown", "-R", "-h", f"{owner[0]}:{owner[1]}", "--", *names])  # type: ignore[index]
    kept = os.stat(dst)  # ``cp -a src/.`` gives dst the store's own mode and owner: put back after
    try:
        for argv in steps:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise OSError(f"{argv[0]} failed: {done.stderr.strip()[-500:]}")
    finally:
        os.chown(dst, kept.st_uid, kept.st_gid)
        os.chmod(dst, stat.S_IMODE(kept.st_mode))


def tar_of(directory: Path, rels: list[str] | None = None) -> bytes:
    """An uncompressed tar of ``rels`` (paths relative to ``directory``; default: everything in
    it), names relative to it, links kept as links."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for rel in sorted(rels if rels is not None else [child.name for child in directory.iterdir()]):
            archive.add(directory / rel, arcname=rel)
    return buf.getvalue()


def make_store() -> Path:
    """A new private (0700) store directory under ``SCRATCH_PARENT``, marked with its owner process."""
    from swe_sandbox.environments.container.engine import process_start_id

    parent = SCRATCH_PARENT if os.access(SCRATCH_PARENT, os.W_OK | os.X_OK) else None
    store = Path(tempfile.mkdtemp(prefix=f"{STORE_PREFIX}{os.getpid()}-", dir=parent))
    (store / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": process_start_id(os.getpid())}))
    return store


def gc_stores(*, dry_run: bool = False) -> list[dict[str, str]]:
    """Remove the snapshot stores whose owner process is gone (``swe-sandbox gc``).

    Returns:
        list[dict[str, str]]: one ``{"backend": "snapshot", "id", "run_id", "owner_pid", "action"}``
        per store looked at (``removed``, ``would remove``, ``kept (owner alive)``).
    """
    from swe_sandbox.environments.container.engine import process_start_id

    parent = Path(SCRATCH_PARENT if os.access(SCRATCH_PARENT, os.W_OK | os.X_OK) else tempfile.gettempdir())
    report = []
    for store in sorted(parent.glob(STORE_PREFIX + "*")):
        try:
            owner = json.loads((store / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = {}
        pid = owner.get("pid") if isinstance(owner, dict) else None
        alive = isinstance(pid, int) and owner.get("start") is not None and process_start_id(pid) == owner["start"]
        entry = {"backend": "snapshot", "id": store.name, "run_id": "", "owner_pid": str(pid or "")}
        if alive:
            entry["action"] = "kept (owner alive)"
        elif dry_run:
            entry["action"] = "would remove"
        else:
            shutil.rmtree(store, ignore_errors=True)
            entry["action"] = "removed"
        report.append(entry)
    return report
