"""Snapshots, forks and verified reset (DESIGN.md section 10), run against the backend under test
as something trying to break them.

``env.snapshot()`` captures the sandbox's files (``snap.roots``; never its processes),
``snap.fork(n)`` starts n isolated copies, ``snap.remove()`` leaves nothing behind, and
``env.reset(snap)`` either restores the sandbox in place and proves it or raises ``ResetFailed``
and closes the environment: every adversarial case below must end one of those two ways, never
with a sandbox that differs from the snapshot. What a backend captures is read from the snapshot
(``snap.roots``), not from the backend's name; a path outside the workspace is only written where
it is captured, so the kit never edits a host's own dotfiles or site-packages.

The module's sandboxes are made on first use inside a test (``World``), so a backend lacking
``SNAPSHOT`` or ``RESET_IN_PLACE`` (declared for the config these sandboxes have: a workspace, or
local's ``cwd``) fails the tests needing it, which are then strict xfails.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from swe_sandbox.capabilities import (
    HOST_ISOLATION,
    HOST_VISIBLE_PROCESSES,
    RESET_IN_PLACE,
    SNAPSHOT,
    SNAPSHOT_METADATA,
    missing_capabilities,
)
from swe_sandbox.errors import ConfigError, ResetFailed, SandboxError, SnapshotError
from swe_sandbox.testing.kit import (
    Variant,
    has,
    hosts_its_workspace,
    processes_besides_runner,
    read_in_sandbox,
    run,
    sandbox_processes_with,
    sandbox_tree,
    shareable_workspace,
    unique_marker,
    wait_host_gone,
    wait_until,
    xfail_where_lacking,
)

#: The workspace every environment of this module starts from: path -> text (a git repository
#: where git is installed).
SEED = {"tracked.txt": "tracked v1\n", "doomed.txt": "to be deleted\n", "pkg/mod.py": "VALUE = 1\n",
        "deep/a/b/c.txt": "deep\n"}
#: A reset that has not returned after this many seconds hangs (a FIFO opened, a loop).
RESET_BUDGET_S = 60.0
#: A reset of a sandbox nothing changed must take less than this (seconds): it is done in place.
CLEAN_RESET_MAX_S = 5.0
#: Forks started at once by the one test that starts many.
MANY_FORKS = 8
#: How long a reverted sandbox is watched for a process that would write again (seconds).
QUIET_S = 0.5
#: Per-command timeout of the module's sandboxes (seconds).
COMMAND_TIMEOUT_S = 30


def under(path: str, roots: tuple[str, ...]) -> bool:
    """Whether sandbox path ``path`` is one of ``roots`` or below one."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def seed_command() -> str:
    """The command writing ``SEED`` in the working directory (as the sandbox's user, so its files
    have the owner the sandbox gives them), committed to a git repository where git is installed."""
    dirs = sorted({str(Path(name).parent) for name in SEED if "/" in name})
    files = " && ".join(f"printf %s {shlex.quote(text)} > {name}" for name, text in SEED.items())
    git = "git -c safe.directory='*' -c user.name=kit -c user.email=kit@example.invalid"
    return (f"mkdir -p {' '.join(dirs)} && {files} && if command -v git > /dev/null; then "
            f"{git} init -q && {git} add -A && {git} commit -qm seed; fi")


def runner_identity(env: Any) -> str:
    """Pid and start time of the process that runs the sandbox's commands (the runner)."""
    return run(env, "echo \"$PPID $(cut -d' ' -f22 /proc/$PPID/stat)\"")["output"]


def image_present(env: Any, image: str) -> bool:
    """Whether the engine behind container environment ``env`` still holds ``image``, as its own
    command-line client says (``image inspect``, and the ``images -a`` listing)."""
    argv, cli_env = env.engine.cli_argv(), env.engine.cli_env()
    inspect = subprocess.run([*argv, "image", "inspect", image], env=cli_env, capture_output=True, timeout=60)
    listing = subprocess.run([*argv, "images", "-a", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"],
                             env=cli_env, capture_output=True, text=True, timeout=60, check=True)
    bare = image.removeprefix("sha256:")
    return inspect.returncode == 0 or any(bare in line for line in listing.stdout.splitlines())


def assert_held_nowhere(env: Any, image: str | None, store: Path | None) -> None:
    """A removed snapshot's image is gone from the engine and its store from the host."""
    if image is not None:
        assert not image_present(env, image), f"image {image} left behind"
    if store is not None:
        assert not Path(store).exists(), f"store {store} left behind"


def bounded(call: Callable[[], Any], within: float) -> Any:
    """``call()`` in a thread: its result, or its exception re-raised.

    Raises:
        AssertionError: it did not return within ``within`` seconds (it is left running).
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(within)
    assert not worker.is_alive(), f"did not return within {within} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def host_files(directory: Path) -> dict[str, bytes]:
    """``{relative path: content}`` of the files below host ``directory`` (links not followed)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and not p.is_symlink()}


# -- the module's sandboxes ------------------------------------------------------------------------


@dataclass
class Origin:
    """A sandbox and its snapshots: ``first`` taken before any command (it started the sandbox),
    ``snap`` once A was written (``tree``: the workspace then); B was written after ``snap``."""

    env: Any
    first: Any
    snap: Any
    tree: list[str]
    outside: list[str]
    """Directories outside the workspace A and B were written in (``a.txt``)."""


@dataclass
class Bench:
    """A sandbox that the reset cases break and reset, its snapshot, and what it held then.

    ``watch`` paths are compared after every case, ``baseline`` holds each path's
    ``sandbox_tree`` at the snapshot (case-specific paths too). ``victim``: a host directory
    outside every root that links made by a case point to (a host-sharing backend), else None.
    """

    env: Any
    snap: Any
    watch: list[str]
    baseline: dict[str, list[str]]
    cwd: str = ""
    home: str | None = None
    site: str | None = None
    dirs: list[str] = field(default_factory=list)
    victim: Path | None = None
    victim_files: dict[str, bytes] = field(default_factory=dict)
    fresh_s: list[float] = field(default_factory=list)

    def trees(self, paths: list[str]) -> dict[str, list[str]]:
        return {path: sandbox_tree(self.env, path) for path in paths}

    def drifted(self, extra: tuple[str, ...] = ()) -> dict[str, tuple[list[str], list[str]]]:
        """``{path: (at the snapshot, now)}`` of every watched path that differs."""
        paths = self.watch + list(extra)
        now = self.trees(paths)
        return {path: (self.baseline[path], now[path]) for path in paths if now[path] != self.baseline[path]}

    def target(self) -> str:
        """Where a case's links point outside the sandbox's roots (a file that must stay intact)."""
        if self.victim is not None:
            return str(self.victim / "victim.txt")
        return f"{self.dirs[0]}/victim.txt" if self.dirs else "/etc/hostname"

    def target_dir(self) -> str:
        return str(self.victim / "canary") if self.victim is not None else (self.dirs[0] if self.dirs else "/etc")

    def check_victim(self) -> None:
        if self.victim is not None:
            assert host_files(self.victim) == self.victim_files, "a file outside the sandbox's roots was changed"


class World:
    """The module's environments and snapshots, made on first use (inside a test), closed and
    removed at the module's end."""

    def __init__(self, variant: Variant, tmp: pytest.TempPathFactory):
        self.variant, self.tmp = variant, tmp
        self.held: list[Any] = []

    def hold(self, thing: Any) -> Any:
        """``thing`` (an environment or a snapshot) closed or removed at the module's end."""
        self.held.append(thing)
        return thing

    def fresh(self, *, seeded: bool = True, **overrides: Any) -> Any:
        """A new environment on a new workspace directory (a backend with a ``workspace`` field gets
        it, the others work in it: ``cwd``), holding ``SEED`` (``seeded``: started for that)."""
        path = self.tmp.mktemp("snapkit-ws")
        hosted = hosts_its_workspace(self.variant.environment_class)
        where = {"workspace": str(shareable_workspace(path))} if hosted else {"cwd": str(path)}
        env = self.hold(self.variant.make(**{"timeout": COMMAND_TIMEOUT_S, **where, **overrides}))
        if seeded:
            result = run(env, seed_command())
            assert result["returncode"] == 0, result
        return env

    @functools.cached_property
    def gaps(self) -> dict[str, str]:
        """What the variant lacks with the config of these environments."""
        probe = self.fresh(seeded=False)
        return missing_capabilities(type(probe), probe.config)

    @functools.cached_property
    def origin(self) -> Origin:
        return make_origin(self)

    @functools.cached_property
    def twins(self) -> list[Any]:
        """Two forks of ``origin.snap``, made together."""
        return [self.hold(fork) for fork in self.origin.snap.fork(2)]

    @functools.cached_property
    def made_bench(self) -> Bench:
        return make_bench(self)

    @property
    def bench(self) -> Bench:
        """The bench, its sandbox usable (one a failed test left closed is replaced: a failure
        stays that test's)."""
        bench = self.made_bench
        try:
            run(bench.env, "true")
        except SandboxError:
            replace_bench_env(self, bench, Case("true"))
        return bench

    def close(self) -> None:
        for thing in reversed(self.held):
            (thing.remove if hasattr(thing, "remove") else thing.close)()


def _write_outside(env: Any, token: str) -> list[str]:
    """``a.txt`` (A) in directories of ``token`` under ``/tmp``, ``/var/tmp`` and, in an isolated
    sandbox, ``/opt`` (where it can write them); returns those written."""
    candidates = [f"/tmp/snapkit-{token}", f"/var/tmp/snapkit-{token}"]
    if has(env, HOST_ISOLATION):
        candidates.append(f"/opt/snapkit-{token}")
    script = "; ".join(f"mkdir -p {d} 2>/dev/null && echo A > {d}/a.txt && echo WROTE {d}" for d in candidates)
    return [line.split()[1] for line in run(env, script)["output"].splitlines() if line.startswith("WROTE ")]


#: Links out of the workspace at the snapshot: kept as links (a copy that followed them would put
#: the host's files in the forks).
LINKS_OUT = "ln -s /etc/shadow leak-file && ln -s /etc/ssh leak-dir && ln -s /nonexistent-snapkit dangling"
#: Entries a snapshot's copy must keep as they are without opening them (a FIFO would block it).
#: (A socket's file is not asked for: it is dead without the process that listened on it.)
SPECIAL = "mkfifo fifo && echo secret > unreadable.txt && chmod 000 unreadable.txt"
#: ``SPECIAL`` where a snapshot keeps no FIFOs (``SNAPSHOT_METADATA`` lacking).
SPECIAL_NO_FIFO = "echo secret > unreadable.txt && chmod 000 unreadable.txt"


def special(env: Any) -> str:
    """The special entries a snapshot of ``env`` must keep: ``SPECIAL``, without the FIFO where the
    backend declares it keeps none (``SNAPSHOT_METADATA``)."""
    return SPECIAL if has(env, SNAPSHOT_METADATA) else SPECIAL_NO_FIFO


def make_origin(world: World) -> Origin:
    env = world.fresh()
    first = world.hold(env.snapshot())  # the workspace as seeded
    command = f"echo A > a.txt && echo A > tracked.txt && rm doomed.txt && {LINKS_OUT} && {special(env)}"
    assert run(env, command)["returncode"] == 0
    outside = _write_outside(env, unique_marker().replace(".", ""))
    world.hold(_Cleanup(env, outside))
    tree = sandbox_tree(env, ".")
    snap = world.hold(bounded(env.snapshot, RESET_BUDGET_S))
    assert sandbox_tree(env, ".") == tree, "taking the snapshot changed the workspace"
    command = "echo B > b.txt && echo B > a.txt" + "".join(f" && echo B > {d}/a.txt" for d in outside)
    assert run(env, command)["returncode"] == 0
    return Origin(env, first, snap, tree, outside)


@dataclass
class _Cleanup:
    """Directories written outside the workspace, removed at the module's end (before ``env`` closes)."""

    env: Any
    paths: list[str]

    def close(self) -> None:
        if self.paths:
            run(self.env, "rm -rf " + " ".join(self.paths))


@pytest.fixture(scope="module")
def world(backend_under_test: Variant, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    backend_under_test.require_available()
    made = World(backend_under_test, tmp_path_factory)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(autouse=True)
def snapshots(request: pytest.FixtureRequest, backend_under_test: Variant, world: World) -> None:
    """Every test here needs ``SNAPSHOT`` (a strict xfail where the backend lacks it)."""
    xfail_where_lacking(request, backend_under_test, world.gaps, (SNAPSHOT,))


@pytest.fixture
def resets(request: pytest.FixtureRequest, backend_under_test: Variant, world: World) -> None:
    """The test needs ``RESET_IN_PLACE`` too."""
    xfail_where_lacking(request, backend_under_test, world.gaps, (SNAPSHOT, RESET_IN_PLACE))


needs_reset = pytest.mark.usefixtures("resets")


# -- what a snapshot is, and forks ------------------------------------------------------------------


def test_a_snapshot_describes_itself(world):
    origin = world.origin
    snap, env = origin.snap, origin.env
    assert isinstance(snap.id, str) and snap.id and snap.id != origin.first.id
    assert snap.backend == env.config.backend
    assert isinstance(snap.roots, tuple) and snap.roots and all(root.startswith("/") for root in snap.roots)
    cwd = run(env, "pwd -P")["output"].strip()
    assert under(cwd, snap.roots) or under(run(env, "pwd")["output"].strip(), snap.roots), (cwd, snap.roots)
    assert isinstance(snap.taken_s, float) and 0 < snap.taken_s < 600
    assert snap.image is not None or snap.store is not None, "the snapshot is held nowhere"
    if snap.store is not None:
        assert Path(snap.store).is_dir(), snap.store
    if snap.image is not None:
        assert image_present(env, snap.image), snap.image


def test_an_isolated_sandbox_has_its_home_and_tmp_captured(world):
    """Where the sandbox is isolated, its HOME and /tmp are its own: state to capture (a backend on
    the host itself captures only its workspace: /tmp and HOME are the host's)."""
    origin = world.origin
    home = run(origin.env, "printf %s \"$HOME\"")["output"]
    captured = {path: under(path, origin.snap.roots) for path in (home, "/tmp", "/var/tmp")}
    if has(origin.env, HOST_ISOLATION):
        assert all(captured.values()), f"roots {origin.snap.roots}: {captured}"
    else:
        assert not captured["/tmp"], f"the host's own /tmp is in the snapshot: {origin.snap.roots}"


def test_forks_see_the_snapshot_not_later_writes(world):
    origin = world.origin
    for fork in world.twins:
        assert type(fork) is type(origin.env)
        assert sandbox_tree(fork, ".") == origin.tree
        assert read_in_sandbox(fork, "a.txt") == "A\n" and read_in_sandbox(fork, "tracked.txt") == "A\n"
        assert sandbox_tree(fork, "b.txt", "doomed.txt") == ["ABSENT b.txt", "ABSENT doomed.txt"]
        for directory in origin.outside:
            if under(directory, origin.snap.roots):
                assert read_in_sandbox(fork, f"{directory}/a.txt") == "A\n", directory


def test_a_forks_writes_stay_in_that_fork(world):
    origin, (writer, sibling) = world.origin, world.twins
    captured = [d for d in origin.outside if under(d, origin.snap.roots)]
    siblings_tree = sandbox_tree(sibling, ".")
    command = "echo F > a.txt && echo F > f.txt && rm tracked.txt" + "".join(f" && echo F > {d}/a.txt" for d in captured)
    assert run(writer, command)["returncode"] == 0
    assert run(origin.env, "echo C > c.txt")["returncode"] == 0
    assert sandbox_tree(sibling, ".") == siblings_tree, "a fork's writes reached its sibling"
    assert read_in_sandbox(origin.env, "a.txt") == "B\n" and read_in_sandbox(origin.env, "tracked.txt") == "A\n"
    assert sandbox_tree(origin.env, "f.txt") == ["ABSENT f.txt"], "a fork's writes reached the parent"
    assert sandbox_tree(writer, "c.txt", "b.txt") == ["ABSENT c.txt", "ABSENT b.txt"]
    for directory in captured:
        assert read_in_sandbox(sibling, f"{directory}/a.txt") == "A\n", directory
        if has(origin.env, HOST_ISOLATION):
            assert read_in_sandbox(origin.env, f"{directory}/a.txt") == "B\n", directory


def test_many_forks_at_once_all_work_all_isolated(world):
    origin = world.origin
    began = time.monotonic()
    forks = origin.snap.fork(MANY_FORKS)
    try:
        started_s = time.monotonic() - began
        assert len(forks) == MANY_FORKS and len({id(fork) for fork in forks}) == MANY_FORKS
        for index, fork in enumerate(forks):
            assert run(fork, f"echo {index} > who.txt && echo {index} >> a.txt")["returncode"] == 0
        for index, fork in enumerate(forks):
            assert read_in_sandbox(fork, "who.txt") == f"{index}\n"
            assert read_in_sandbox(fork, "a.txt") == f"A\n{index}\n"
        assert sandbox_tree(origin.env, "who.txt") == ["ABSENT who.txt"]
        print(f"{MANY_FORKS} forks started in {started_s:.2f} s")
    finally:
        for fork in forks:
            fork.close()


SERVER = r"""import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
open("port.txt", "w").write("%d\n" % s.getsockname()[1])
while True:
    c, _ = s.accept(); c.sendall(b"pong"); c.close()
"""
PING = ("python3 -c 'import socket; c = socket.create_connection((\"127.0.0.1\", int(open(\"port.txt\").read())), 5); "
        "print(c.recv(4).decode())'")


def test_a_background_server_is_not_in_the_fork(world):
    """Processes are not captured: the fork has the server's files but not the server; the
    parent's server goes on serving."""
    env, marker = world.fresh(), unique_marker()
    script = SERVER.replace("'", "'\"'\"'")
    assert run(env, f"setsid python3 -c '{script}' {marker} > server.log 2>&1 &")["returncode"] == 0
    assert wait_until(lambda: run(env, "test -s port.txt")["returncode"] == 0, within=20)
    with env.snapshot() as snap:
        fork = snap.environment()
        try:
            assert read_in_sandbox(fork, "port.txt") == read_in_sandbox(env, "port.txt")
            if has(fork, HOST_ISOLATION):
                assert sandbox_processes_with(fork, marker) == [], "the server runs in the fork"
                assert run(fork, PING)["returncode"] != 0, "something answers the server's port in the fork"
            else:  # the fork shares the host's processes: the parent's server is the only one
                assert sandbox_processes_with(fork, marker) == sandbox_processes_with(env, marker)
        finally:
            fork.close()
    assert sandbox_processes_with(env, marker), "the parent's server stopped"
    assert run(env, PING)["output"] == "pong\n"


def test_a_removed_snapshot_leaves_nothing_and_its_forks_live_on(world):
    """Forks made before ``remove()`` go on working; once they are closed too, nothing of the
    snapshot is left (an image a fork still runs on may wait for it)."""
    origin = world.origin
    snap = origin.first
    [fork] = snap.fork(1)
    image, store = snap.image, snap.store
    try:
        snap.remove()
        snap.remove()
        assert_held_nowhere(origin.env, None, store)
        assert read_in_sandbox(fork, "tracked.txt") == SEED["tracked.txt"]
        assert run(fork, "echo later > later.txt && cat later.txt")["output"] == "later\n"
        with pytest.raises(SnapshotError):
            snap.fork(1)
        with pytest.raises(SnapshotError):
            snap.environment()
    finally:
        fork.close()
    assert_held_nowhere(origin.env, image, store)


def test_a_snapshot_used_as_a_context_manager_is_removed_on_exit(world):
    with world.origin.env.snapshot() as snap:
        image, store = snap.image, snap.store
    assert_held_nowhere(world.origin.env, image, store)


def test_a_snapshot_starts_its_sandbox_and_outlives_it(world):
    env = world.fresh(seeded=False)
    with env.snapshot() as snap:
        assert run(env, "echo kept > kept.txt")["returncode"] == 0
        env.close()
        fork = world.hold(snap.environment())
        assert sandbox_tree(fork, ".") == [], "an empty workspace's snapshot is not empty"
        with pytest.raises(SandboxError):
            env.snapshot()
        if has(env, RESET_IN_PLACE):
            with pytest.raises(SandboxError):
                env.reset(snap)


@pytest.mark.parametrize("count", [0, -1])
def test_a_fork_of_no_sandbox_is_refused(world, count):
    with pytest.raises(ValueError):
        world.origin.snap.fork(count)


# -- the reset bench --------------------------------------------------------------------------------

_SITE_SCRIPT = ("import site, sysconfig; print(sysconfig.get_paths()['purelib']); "
                "print(site.getusersitepackages())")


def _writable_dir(env: Any, path: str) -> bool:
    """Whether the sandbox can make directory ``path`` and write in it (made if it can)."""
    return run(env, f"mkdir -p {path} && touch {path}/.snapkit && rm {path}/.snapkit")["returncode"] == 0


def _seed_bench(env: Any, roots: tuple[str, ...], token: str) -> dict[str, Any]:
    """What the bench holds beside its workspace, made under ``roots`` only: directories with a seed
    file and a victim, an edited ``~/.bashrc``, a site-packages directory."""
    found: dict[str, Any] = {"dirs": [], "home": None, "site": None}
    for parent in ("/tmp", "/var/tmp", "/opt"):
        path = f"{parent}/snapkit-{token}"
        if under(path, roots) and _writable_dir(env, path):
            assert run(env, f"echo seed > {path}/seed.txt && echo victim > {path}/victim.txt")["returncode"] == 0
            found["dirs"].append(path)
    home = run(env, "printf %s \"$HOME\"")["output"]
    if home.startswith("/") and under(home, roots):
        assert run(env, "echo '# seeded by the kit' >> ~/.bashrc")["returncode"] == 0
        found["home"] = home
    for site in run(env, f"python3 -c \"{_SITE_SCRIPT}\"")["output"].split():
        if under(site, roots) and _writable_dir(env, site):
            found["site"] = site
            break
    return found


def make_bench(world: World) -> Bench:
    env = world.fresh()
    with env.snapshot() as probe:  # what this backend captures decides where the bench writes
        roots = probe.roots
    found = _seed_bench(env, roots, unique_marker().replace(".", ""))
    watch = [".", *found["dirs"]]
    if found["home"]:
        watch += [f"{found['home']}/.bashrc", f"{found['home']}/.snapkit_profile"]
    if found["site"]:
        watch.append(found["site"])
    victim = None
    if not has(env, HOST_ISOLATION):  # the sandbox sees this host's files: links may point here
        victim = world.tmp.mktemp("snapkit-victim")
        (victim / "victim.txt").write_text("victim\n")
        (victim / "canary").mkdir()
        (victim / "canary" / "canary.txt").write_text("canary\n")
    extras = [path for path in EXTRA_WATCH if under(path, roots) or has(env, HOST_ISOLATION)]
    cwd = run(env, "pwd")["output"].strip()
    baseline = {path: sandbox_tree(env, path) for path in [*watch, *extras, cwd]}
    snap = world.hold(env.snapshot())
    bench = Bench(env, snap, watch, baseline, cwd, found["home"], found["site"], found["dirs"], victim,
                  host_files(victim) if victim else {})
    assert bench.drifted((*extras, cwd)) == {}, "taking the snapshot changed the sandbox"
    return bench


#: Paths outside the workspace a case changes (or tries to: they may be read-only), watched in that
#: case only: where captured, or where the sandbox is isolated (they are then the sandbox's own, so
#: its state too: a change there must be reverted or caught like any other).
EXTRA_WATCH = ("/etc/hosts", "/etc/profile", "/usr/local/bin", "/dev/shm")
#: Files a container engine writes anew for each container (a new sandbox's differ from the
#: snapshot's; a reset, which keeps the container, must still put them back).
ENGINE_WRITTEN = ("/etc/hosts",)


@dataclass
class Case:
    """One way to leave a sandbox changed: the command, the paths it changes beyond ``Bench.watch``,
    and whether it leaves processes (the reverted sandbox is then watched for ``QUIET_S``)."""

    command: str
    extra: tuple[str, ...] = ()
    processes: bool = False
    needs: tuple[str, ...] = ()


def _python(code: str) -> str:
    """``python3 -c CODE`` quoted for bash (``code`` holds no single quote)."""
    assert "'" not in code
    return f"python3 -c '{code}'"


def _cases() -> dict[str, Callable[[Bench, str], Case | None]]:
    """Each case's command for a bench and a marker (None: the case does not apply there)."""
    return {
        "setsid-escapee": lambda b, m: Case(f"setsid sleep {m} > /dev/null 2>&1 &", processes=True),
        "setsid-env-cleared": lambda b, m: Case(f"( setsid env -i sleep {m} > /dev/null 2>&1 & )", processes=True),
        "double-forked": lambda b, m: Case(
            f"( ( setsid sh -c 'exec sleep {m}' > /dev/null 2>&1 & ) & ); ( nohup sleep {m} > /dev/null 2>&1 & )",
            processes=True),
        "forking-while-killed": lambda b, m: Case(
            f"setsid sh -c 'i=0; while [ $i -lt 300 ]; do (sleep {m} &); i=$((i+1)); done' > /dev/null 2>&1 &",
            processes=True),
        "writer-in-workspace": lambda b, m: Case(
            f"setsid sh -c 'while :; do date +%N > beat.{m}; sleep 0.02; done' > /dev/null 2>&1 &", processes=True),
        "new-file": lambda b, m: Case("echo stray > stray.txt && echo hidden > .hidden"),
        "deleted-file": lambda b, m: Case("rm doomed.txt"),
        "modified-file": lambda b, m: Case("echo changed >> tracked.txt && echo 'VALUE = 2' > pkg/mod.py"),
        "same-size-same-mtime": lambda b, m: Case(_python(
            "import os; st = os.stat(\"tracked.txt\"); open(\"tracked.txt\", \"w\").write(\"TRACKED v1\\n\"); "
            "os.utime(\"tracked.txt\", ns=(st.st_atime_ns, st.st_mtime_ns))")),
        "mode-changed": lambda b, m: Case("chmod 600 tracked.txt && chmod 755 pkg/mod.py && chmod 700 deep"),
        "type-swapped": lambda b, m: Case("rm tracked.txt && mkdir tracked.txt && rm -rf deep/a && echo x > deep/a"),
        "odd-names": lambda b, m: Case("touch -- -rf --help \"$(printf 'new\\nline')\" \"$(printf 'bad\\377byte')\""),
        "owner-changed": lambda b, m: Case("{ chown 65534:65534 tracked.txt; chmod 4755 pkg/mod.py; } 2>/dev/null; true", needs=(SNAPSHOT_METADATA,)),
        "hard-link-out": lambda b, m: Case(f"rm tracked.txt && {{ ln {b.target()} tracked.txt 2>/dev/null || true; }}"),
        "workspace-mode": lambda b, m: Case("chmod 700 . && chmod 500 deep/a", (b.cwd,), needs=(SNAPSHOT_METADATA,)),
        "stopped-process": lambda b, m: Case(f"setsid sleep {m} > /dev/null 2>&1 & kill -STOP $!", processes=True),
        "new-directories": lambda b, m: Case("mkdir -p newdir/sub && echo x > newdir/sub/f && chmod 000 newdir/sub"),
        "git-history-rewritten": lambda b, m: Case("rm -rf .git 2>/dev/null; mkdir -p .git && echo evil > .git/HEAD"),
        "links-out": lambda b, m: Case(
            f"ln -s {b.target()} link_out && rm tracked.txt && ln -s {b.target()} tracked.txt"
            f" && rm -rf pkg && ln -s {b.target_dir()} pkg && ln -s {b.target_dir()} dirlink"),
        "deleted-file-held-open": lambda b, m: Case(
            _python(f"import os, time; f = open(\"held.{m}\", \"w\"); f.write(\"x\" * 4096); f.flush(); "
                    f"os.unlink(\"doomed.txt\"); os.unlink(\"held.{m}\"); time.sleep({m})") + " > /dev/null 2>&1 &",
            processes=True),
        "fifo-with-a-blocked-writer": lambda b, m: Case(
            f"mkfifo fifo.{m} && mkfifo pkg/mod2.py && ( sh -c 'echo x > fifo.{m}' {m} > /dev/null 2>&1 & )",
            processes=True, needs=(SNAPSHOT_METADATA,)),
        "sockets": lambda b, m: Case(
            _python("import socket; socket.socket(socket.AF_UNIX).bind(\"dead.sock\")") + " && "
            + _python(f"import socket, time; s = socket.socket(socket.AF_UNIX); s.bind(\"live.{m}\"); s.listen(); "
                      f"time.sleep({m})") + " > /dev/null 2>&1 &", processes=True, needs=(SNAPSHOT_METADATA,)),
        "recreated-directory": lambda b, m: Case("rm -rf deep pkg && mkdir deep pkg && chmod 755 deep pkg"),
        "dotfiles": _dotfiles_case,
        "site-packages": _site_case,
        "tmp-dirs": lambda b, m: Case(
            " && ".join(f"echo new > {d}/new.txt && rm {d}/seed.txt && echo changed > {d}/victim.txt" for d in b.dirs))
        if b.dirs else None,
        "system-files": _system_case,
        "shared-memory": lambda b, m: Case(f"echo x > /dev/shm/snapkit-{m}", ("/dev/shm",))
        if "/dev/shm" in b.baseline else None,
    }


def _dotfiles_case(bench: Bench, marker: str) -> Case | None:
    if bench.home is None:
        return None
    return Case("echo 'alias ls=\"echo pwned\"' >> ~/.bashrc && echo 'export EVIL=1' > ~/.snapkit_profile")


def _site_case(bench: Bench, marker: str) -> Case | None:
    if bench.site is None:
        return None
    return Case(f"echo 'import os' > {bench.site}/snapkit-evil.pth && echo 'X = 1' > {bench.site}/snapkit_evil.py")


def _system_case(bench: Bench, marker: str) -> Case | None:
    extra = tuple(path for path in ("/etc/hosts", "/etc/profile", "/usr/local/bin") if path in bench.baseline)
    if not extra:
        return None
    return Case("{ echo '10.0.0.1 pypi.org' >> /etc/hosts; echo 'export EVIL=1' >> /etc/profile; "
                "echo evil > /usr/local/bin/python3-snapkit; chmod +x /usr/local/bin/python3-snapkit; } 2>/dev/null; true", extra)


CASES = _cases()


def expect_caught_or_reverted(world: World, bench: Bench, marker: str, case: Case) -> str:
    """Reset the bench: either ``ResetFailed`` with the environment closed (then a fresh one from
    the snapshot replaces it), or the sandbox equal to the snapshot; returns which."""
    env = bench.env
    try:
        bounded(lambda: env.reset(bench.snap), RESET_BUDGET_S)
    except ResetFailed as exc:
        assert exc.drift and all(isinstance(line, str) and line.strip() for line in exc.drift), exc.drift
        with pytest.raises(SandboxError):
            run(env, "true")
        if has(env, HOST_VISIBLE_PROCESSES):
            assert wait_host_gone(marker) == [], "the closed sandbox left processes behind"
        bench.check_victim()
        replace_bench_env(world, bench, case)
        return "caught: " + "; ".join(exc.drift[:3])
    try:
        check_reverted(bench, marker, case)
    except BaseException:
        replace_bench_env(world, bench, case)  # the next case starts from the snapshot anyway
        raise
    return "reverted"


def check_reverted(bench: Bench, marker: str, case: Case) -> None:
    """The reset returned: no process of the case's, the watched paths as at the snapshot (and
    staying so), nothing outside the roots changed, commands run."""
    env = bench.env
    assert sandbox_processes_with(env, marker) == [], "a process survived the reset"
    others = processes_besides_runner(env)
    assert others is None or others == [], f"processes besides the runner after the reset: {others}"
    if has(env, HOST_VISIBLE_PROCESSES):
        assert wait_host_gone(marker) == [], "a process survived the reset (seen from the host)"
    assert bench.drifted(case.extra) == {}, "the reset returned, but the sandbox is not the snapshot's"
    bench.check_victim()
    if case.processes:
        assert not wait_until(lambda: bool(bench.drifted()), within=QUIET_S), "something changed the sandbox again"
    assert run(env, "echo alive")["output"] == "alive\n"


def replace_bench_env(world: World, bench: Bench, case: Case) -> None:
    """A fresh sandbox from the bench's snapshot in place of the used one, checked equal to it."""
    began = time.monotonic()
    bench.env = world.hold(bench.snap.environment())
    bench.fresh_s.append(time.monotonic() - began)
    own = tuple(path for path in case.extra if path not in ENGINE_WRITTEN)
    assert bench.drifted(own) == {}, "snap.environment() does not hold the snapshot's state"


@needs_reset
def test_a_clean_sandbox_resets_in_place_cheaply(world):
    bench = world.bench
    identity = runner_identity(bench.env)
    for _ in range(2):
        began = time.monotonic()
        bench.env.reset(bench.snap)
        took = time.monotonic() - began
        assert took < CLEAN_RESET_MAX_S, f"a clean reset took {took:.2f} s"
    assert runner_identity(bench.env) == identity, "the reset replaced the sandbox (not in place)"
    assert bench.drifted() == {}
    print(f"clean reset: {took:.3f} s")


@needs_reset
@pytest.mark.parametrize("name", list(CASES))
def test_a_reset_reverts_or_catches(world, name, request, backend_under_test):
    """Every way of leaving the sandbox changed ends in a sandbox equal to the snapshot, or in
    ``ResetFailed`` with the environment closed: never a reused sandbox that differs."""
    bench, marker = world.bench, unique_marker()
    case = CASES[name](bench, marker)
    applies = case is not None
    if case is not None:
        xfail_where_lacking(request, backend_under_test, world.gaps, case.needs)
    if case is None:  # only a backend on the host itself leaves these paths out of its snapshot
        assert not has(bench.env, HOST_ISOLATION), f"{name}: nothing of it is captured: {bench.snap.roots}"
        case = Case("echo stray > stray.txt")
    result = run(bench.env, case.command)
    assert result["returncode"] == 0, result
    outcome = expect_caught_or_reverted(world, bench, marker, case)
    print(f"{name}: {outcome if applies else 'not captured here (a stray file instead): ' + outcome}")


@needs_reset
@pytest.mark.parametrize("whose", ["fork", "sandbox-of-the-same-config"])
def test_another_sandbox_resets_to_the_snapshot(world, whose):
    """A fork of the snapshot, or any sandbox of the same backend and config, resets to it."""
    bench = world.bench
    fork, marker = world.hold(bench.snap.environment() if whose == "fork" else world.fresh()), unique_marker()
    assert run(fork, f"echo stray > stray.txt && rm doomed.txt && (setsid sleep {marker} > /dev/null 2>&1 &)")["returncode"] == 0
    fork.reset(bench.snap)
    assert sandbox_tree(fork, ".") == bench.baseline["."]
    assert sandbox_processes_with(fork, marker) == []


@needs_reset
def test_what_a_snapshot_holds_survives_a_reset(world):
    """Links (relative, absolute, dangling), a FIFO and an unreadable file at the snapshot are all
    there, unchanged, after a reset of a sandbox that changed nothing else."""
    env = world.fresh()
    command = f"ln -s pkg/mod.py rel-link && ln -s /etc/hostname abs-link && {LINKS_OUT} && {special(env)}"
    assert run(env, command)["returncode"] == 0
    tree = sandbox_tree(env, ".")
    with env.snapshot() as snap:
        assert run(env, "echo stray > stray.txt")["returncode"] == 0
        env.reset(snap)
        assert sandbox_tree(env, ".") == tree


@needs_reset
def test_a_tampered_store_is_never_restored_silently(world):
    """A store copy changed after the snapshot (disk damage, another process): the reset catches it
    or still restores the snapshot's state, never the damaged copy."""
    bench = world.bench
    env = world.hold(bench.snap.environment())
    assert run(env, "echo fork v2 > tracked.txt")["returncode"] == 0
    with env.snapshot() as snap:
        if snap.store is None:  # an engine's image: nothing of ours to damage; a plain reset then
            assert snap.image is not None, "the snapshot is held nowhere"
        else:
            damage_store(Path(snap.store))
        assert run(env, "echo stray > stray.txt && echo changed > tracked.txt")["returncode"] == 0
        try:
            env.reset(snap)
        except ResetFailed:
            with pytest.raises(SandboxError):
                run(env, "true")
            return
        assert read_in_sandbox(env, "tracked.txt") == "fork v2\n", "the damaged copy was restored"
        assert sandbox_tree(env, "stray.txt") == ["ABSENT stray.txt"]


def damage_store(store: Path) -> None:
    """Change the store's copies of ``tracked.txt`` or, where it holds none (an archive), cut every
    file in it to half its size."""
    copies = [p for p in store.rglob("tracked.txt") if p.is_file() and not p.is_symlink()]
    for copy in copies:
        copy.write_text("tampered\n")
    if not copies:
        for path in [p for p in store.rglob("*") if p.is_file() and not p.is_symlink()]:
            os.truncate(path, path.stat().st_size // 2)


# -- bad use ----------------------------------------------------------------------------------------


def test_reset_is_refused_exactly_where_the_backend_declares_it(world):
    """Declared: a clean reset returns. Lacking (the exec fallback): ``ConfigError`` naming reset,
    and the sandbox is left as it was."""
    bench = world.bench
    if has(bench.env, RESET_IN_PLACE):
        bench.env.reset(bench.snap)
        assert bench.drifted() == {}
    else:
        marker = unique_marker()
        assert run(bench.env, f"echo kept > kept.{marker}")["returncode"] == 0
        with pytest.raises(ConfigError, match="reset"):
            bench.env.reset(bench.snap)
        assert read_in_sandbox(bench.env, f"kept.{marker}") == "kept\n", "a refused reset changed the sandbox"


def _other_backend(world: World) -> Any:
    """An environment of another backend class (a subclass of the variant's, same config)."""
    base = world.fresh()
    other = type(f"Other{type(base).__name__}", (type(base),), {})
    return world.hold(other(base.config))


@needs_reset
@pytest.mark.parametrize("other", ["backend", "config"])
def test_a_snapshot_of_another_backend_or_config_is_refused(world, other):
    bench = world.bench
    stranger = _other_backend(world) if other == "backend" else world.fresh(env={"SNAPKIT_OTHER": "1"})
    with stranger.snapshot() as snap:
        with pytest.raises(ValueError) as caught:
            bench.env.reset(snap)
    assert not isinstance(caught.value, ConfigError), caught.value
    assert bench.drifted() == {} and run(bench.env, "echo alive")["output"] == "alive\n"


@needs_reset
def test_a_reset_with_a_removed_snapshot_is_refused(world):
    bench = world.bench
    snap = bench.env.snapshot()
    snap.remove()
    with pytest.raises(SnapshotError):
        bench.env.reset(snap)
    assert run(bench.env, "echo alive")["output"] == "alive\n"
