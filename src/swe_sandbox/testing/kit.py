"""Helpers of the conformance kit: the backend under test (``Variant``), capability requirements,
and probes of processes inside the sandbox and on the host.

Kit tests use these through the fixtures of ``swe_sandbox.testing.fixtures``; a project's own tests
may import them too (``from swe_sandbox.testing.kit import run, unique_marker``).
"""

from __future__ import annotations

import os
import secrets
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import swe_sandbox
from swe_sandbox.capabilities import has_capability as has  # noqa: F401 - the suites import it from here
from swe_sandbox.capabilities import missing_capabilities
from swe_sandbox.config import load_environment_config, preset_names
from swe_sandbox.environments import environment_class
from swe_sandbox.environments.fallback import SCRIPT_NAME

if TYPE_CHECKING:
    from swe_sandbox.environments.base import Environment

#: Default per-command timeout of the environments the kit's fixtures create (seconds).
FIXTURE_TIMEOUT = 30
#: Name of the marker ``requires`` puts on a test (registered by ``swe_sandbox.testing.plugin``).
REQUIRES_MARKER = "swe_sandbox_requires"
#: Owner given to test workspaces when the tests run as root: bwrap then runs as this unprivileged
#: uid (``host_uid``: the workspace's owner) and refuses a workspace that uid cannot write.
TEST_WORKSPACE_UID = 65534
#: The runner's process name (``comm``): what the sandbox's PID 1 is called where it has a pid
#: namespace of its own with the runner as its init.
RUNNER_COMM = "swe-sandbox-run"


def requires(*capabilities: str) -> pytest.MarkDecorator:
    """Mark a kit test (or, as ``pytestmark``, a module) as needing ``capabilities``.

    Where the backend under test lacks one, the test becomes ``xfail(strict=True)`` with the
    backend's reason (see ``swe_sandbox.capabilities``).
    """
    return getattr(pytest.mark, REQUIRES_MARKER)(*capabilities)


@dataclass
class Variant:
    """A backend under test: a name for test ids, the backend, and the config fields it is made with.

    Attributes:
        name: the id shown in test names (``docker-exec``).
        backend: a registered backend name (``swe_sandbox.environments`` entry point or built-in).
        settings: config fields (without ``backend``), or a callable returning them, called on first
            use (so a server the variant needs starts only when a test uses it).
    """

    name: str
    backend: str
    settings: Mapping[str, Any] | Callable[[], Mapping[str, Any]] = field(default_factory=dict)
    _resolved: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    _missing: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_name(cls, name: str) -> Variant:
        """The variant of ``--swe-sandbox-backend NAME``: a preset name or YAML file, else a backend name.

        Raises:
            swe_sandbox.errors.ConfigError: ``name`` is neither (the message lists the presets and
                the registered backends), a YAML file that does not load, or a backend that does not.
        """
        data = dict(load_environment_config(name))
        backend = str(data.pop("backend", name))
        environment_class(backend)  # a backend whose entry point does not load is refused here
        return cls(Path(name).stem if name.endswith((".yaml", ".yml")) else name, backend, data)

    @property
    def environment_class(self) -> type[Environment]:
        return environment_class(self.backend)

    def config(self) -> dict[str, Any]:
        """The config fields of the variant (``backend`` excluded); resolves ``settings`` once."""
        if self._resolved is None:
            self._resolved = dict(self.settings() if callable(self.settings) else self.settings)
        return dict(self._resolved)

    def make(self, **overrides: Any) -> Any:
        """A new environment of this variant (not started yet): the backend's preset of the same name
        when there is one (``docker``'s image, ...), then the variant's config, then ``overrides``."""
        base, fields = self.environment_args(**overrides)
        return swe_sandbox.get_environment(base, **fields)

    def environment_args(self, **overrides: Any) -> tuple[str | dict[str, str], dict[str, Any]]:
        """``(config, fields)`` such that ``get_environment(config, **fields)`` is ``make(**overrides)``
        (for a process of its own: both are plain JSON data, resolving ``settings`` here)."""
        base = self.backend if self.backend in preset_names() else {"backend": self.backend}
        return base, {**self.config(), **overrides}

    def missing(self) -> dict[str, str]:
        """``{capability: reason}`` of what the variant lacks (its backend's declaration)."""
        if self._missing is None:
            probe = self.make()
            self._missing = missing_capabilities(type(probe), probe.config)
            probe.close()
        return dict(self._missing)

    def require_available(self) -> None:
        """Skip the current test when the backend cannot run here (fail instead when ``CI`` is set)."""
        reason = self.environment_class.unavailable_reason()
        if reason is None:
            return
        if "CI" in os.environ:
            pytest.fail(f"backend {self.name!r} is unavailable in CI: {reason}", pytrace=False)
        pytest.skip(f"backend {self.name!r} is unavailable: {reason}")


def xfail_where_lacking(request: pytest.FixtureRequest, variant: Variant, missing: Mapping[str, str],
                        needed: tuple[str, ...]) -> None:
    """Make the current test ``xfail(strict=True)`` when ``missing`` holds one of ``needed``, with
    the backend's reason: what ``requires`` does, for the config a test's own environments have
    (``missing_capabilities`` may depend on it: local snapshots need a ``cwd``)."""
    lacked = [cap for cap in needed if cap in missing]
    if lacked:
        # the capability is named: an XPASS(strict) then says which declaration is stale
        reason = f"{variant.name}: {missing[lacked[0]]} (declared missing: {lacked[0]})"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def hosts_its_workspace(environment_class: type[Environment]) -> bool:
    """Whether the backend takes a host ``workspace`` directory (else it works where ``cwd`` says)."""
    return "workspace" in environment_class.config_class.model_fields


# -- commands -------------------------------------------------------------------------------------


def run(env: Any, command: str, **kwargs: Any) -> dict[str, Any]:
    """``env.execute({"command": command}, **kwargs)``."""
    return env.execute({"command": command}, **kwargs)


def read_in_sandbox(env: Any, path: str) -> str:
    """The text of ``path`` (relative to the working directory) as the sandbox sees it."""
    result = run(env, f"cat -- {path}")
    assert result["returncode"] == 0, result
    return result["output"]


def unique_marker() -> str:
    """A number nobody else uses, fit to be a ``sleep`` duration: ``sleep MARKER`` is findable."""
    return f"{secrets.randbelow(10**6) + 10**6}.{secrets.randbelow(10**6):06d}"


def shareable_workspace(path: Path) -> Path:
    """``path`` (a fresh directory under pytest's base temp) made fit to be bound as a bwrap workspace.

    As root: owned by ``TEST_WORKSPACE_UID`` (with what is already in it), and pytest's own
    ``0700`` directories above it made searchable (not readable) by others. Otherwise unchanged.
    """
    if os.geteuid() != 0:
        return path
    base = Path(tempfile.gettempdir())
    for parent in path.parents:
        if parent == base or base not in parent.parents:
            break
        os.chmod(parent, os.stat(parent).st_mode & 0o7777 | 0o111)
    for entry in [path, *path.rglob("*")]:
        os.chown(entry, TEST_WORKSPACE_UID, TEST_WORKSPACE_UID, follow_symlinks=False)
    return path


# -- processes ------------------------------------------------------------------------------------

_FIND_SCRIPT = r"""
import os, sys
marker = sys.argv[1][::-1].encode()
me = os.getpid()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            stat = f.read()
        if stat[stat.rfind(b")") + 2:][:1] in (b"Z", b"X"):
            continue
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            cmdline = f.read()
    except OSError:
        continue
    if marker in cmdline:
        print("ALIVE", pid, cmdline.replace(b"\0", b" ").decode("utf-8", "replace"))
        if sys.argv[2:] == ["kill"]:
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass
print("SCAN_DONE")
"""


def sandbox_processes_with(env: Any, marker: str, *, kill: bool = False) -> list[str]:
    """Live processes inside the sandbox whose command line contains ``marker`` (SIGKILLed too
    with ``kill=True``: a test's clean-up of what an attack left, e.g. where that is an xfail).

    The scanner gets the marker reversed, so its own command line never matches.
    """
    script = _FIND_SCRIPT.replace("'", "'\"'\"'")
    result = run(env, f"python3 -c '{script}' {marker[::-1]}{' kill' if kill else ''}", timeout=20)
    assert "SCAN_DONE" in result["output"], result
    return [line for line in result["output"].splitlines() if line.startswith("ALIVE")]


_OTHERS_SCRIPT = r"""
import os, sys
def stat_of(pid):
    with open("/proc/%s/stat" % pid, "rb") as f:
        stat = f.read()
    rest = stat[stat.rfind(b")") + 2:].split()
    return rest[0], int(rest[1])
with open("/proc/1/comm") as f:
    if f.read().strip() != sys.argv[1]:
        print("NOT_INIT")
mine, pid = set(), os.getpid()
while pid > 1:
    mine.add(pid)
    pid = stat_of(pid)[1]
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) in mine or name == "1":
        continue
    try:
        state, _ = stat_of(name)
        with open("/proc/%s/cmdline" % name, "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        continue
    if state not in (b"Z", b"X"):
        print("OTHER", name, cmdline)
print("SCAN_DONE")
"""


def processes_besides_runner(env: Any) -> list[str] | None:
    """Live processes in the sandbox other than its runner and this probe (with its shell), where
    the runner is the init (PID 1) of a pid namespace of the sandbox's own; None elsewhere (a
    sandbox sharing the host's processes, where only ``sandbox_processes_with`` can tell)."""
    script = _OTHERS_SCRIPT.replace("'", "'\"'\"'")
    result = run(env, f"python3 -c '{script}' {RUNNER_COMM}", timeout=20)
    assert "SCAN_DONE" in result["output"], result
    if "NOT_INIT" in result["output"]:
        return None
    return [line for line in result["output"].splitlines() if line.startswith("OTHER")]


_TREE_SCRIPT = r"""
import hashlib, os, stat, sys
sys.stdout.reconfigure(errors="backslashreplace")
def line(path):
    st = os.lstat(path)
    what = ""
    try:
        if stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 16), b""):
                    digest.update(block)
            what = digest.hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            what = "-> " + os.readlink(path)
    except OSError as exc:
        what = "unreadable %d" % exc.errno
    return "%s %o %d:%d %s" % (path, st.st_mode, st.st_uid, st.st_gid, what)
for top in sys.argv[1:]:
    if not os.path.lexists(top):
        print("ABSENT " + top)
        continue
    if top != ".":
        print(line(top))
    if stat.S_ISDIR(os.lstat(top).st_mode):
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(dirs + files):
                print(line(os.path.join(root, name)))
print("TREE_DONE")
"""


def sandbox_tree(env: Any, *paths: str) -> list[str]:
    """What the sandbox holds at ``paths`` (relative to the working directory, or absolute), one
    line per entry at and below each (``.``: what is inside the working directory, not itself):
    path, mode (type included), uid:gid, a regular file's SHA-256 or a link's target (never
    followed); ``ABSENT path`` for a missing one. Times are left out; a FIFO is never opened."""
    script = _TREE_SCRIPT.replace("'", "'\"'\"'")
    result = run(env, f"python3 -c '{script}' " + " ".join(shlex.quote(path) for path in paths), timeout=60)
    lines = result["output"].splitlines()
    assert lines[-1:] == ["TREE_DONE"], result
    return lines[:-1]


def host_processes_with(marker: str) -> list[str]:
    """Live processes on the host (any pid namespace below ours) whose command line holds ``marker``."""
    found = []
    needle = marker.encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            if stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X"):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline:
            found.append(pid + " " + cmdline.replace(b"\0", b" ").decode("utf-8", "replace"))
    return found


def wait_until(condition: Callable[[], Any], within: float = 5.0, interval: float = 0.05) -> bool:
    """Poll ``condition()`` every ``interval`` seconds until it is true or ``within`` seconds passed;
    returns whether it became true."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def still_there(probe: Callable[[], list[str]], within: float, interval: float = 0.05) -> list[str]:
    """Poll ``probe()`` every ``interval`` seconds until it returns nothing or ``within`` seconds
    passed; returns what it returned last (empty: all gone)."""
    deadline = time.monotonic() + within
    while True:
        left = probe()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(interval)


def host_pid_gone(pid: int) -> bool:
    """Whether host process ``pid`` is gone (or a zombie: dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X")


def wait_host_gone(marker: str, grace: float = 1.0) -> list[str]:
    """Host processes with ``marker`` still alive after ``grace`` seconds (SIGKILL is asynchronous)."""
    return still_there(lambda: host_processes_with(marker), grace)


def wait_sandbox_gone(env: Any, marker: str, grace: float = 1.0) -> list[str]:
    """Sandbox processes with ``marker`` still alive after ``grace`` seconds."""
    return still_there(lambda: sandbox_processes_with(env, marker), grace, interval=0.1)


def host_server_pid(marker: str, within: float = 20.0) -> int:
    """Host pid of the process serving the sandbox command whose command line holds ``marker``: the
    runner (comm ``swe-sandbox-run``) or, in the exec fallback, the command's wrapper script.

    A command cannot kill its runner from inside (PID 1 of its namespace, non-dumpable), so tests
    of a sandbox that dies kill it from here, as a crash or an OOM kill would.

    Raises:
        AssertionError: no such process within ``within`` seconds, or none serves it.
    """
    deadline = time.monotonic() + within
    while not (found := [p for p in host_processes_with(marker) if "swe_sandbox" not in p]):
        assert time.monotonic() < deadline, f"no sandbox process with {marker} appeared"
        time.sleep(0.05)
    pid = int(found[0].split()[0])
    while pid > 1:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if comm == RUNNER_COMM or SCRIPT_NAME.encode() in argv:
            return pid
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        pid = int(stat[stat.rfind(b")") + 2:].split()[1])
    raise AssertionError(f"no runner above the process with {marker}")


def kill_server_when_running(marker: str) -> Any:
    """Start a thread that SIGKILLs ``host_server_pid(marker)`` as soon as that process runs (the
    thread's ``killed_at`` then holds when, in monotonic seconds)."""
    import signal
    import threading

    class KillThread(threading.Thread):
        killed_at: float | None

    def kill() -> None:
        os.kill(host_server_pid(marker), signal.SIGKILL)
        thread.killed_at = time.monotonic()

    thread = KillThread(target=kill, daemon=True)
    thread.killed_at = None  # monotonic seconds of the kill, once done
    thread.start()
    return thread
