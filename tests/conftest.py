"""Shared fixtures: one ``env`` fixture, parametrised over every backend (anyio's conftest style).

Adding a backend to the conformance suite is one line: put its name in ``BACKENDS``. Each backend
gets its own marker (declared in pyproject.toml), so ``pytest -m bwrap`` runs one backend only.

A backend whose ``unavailable_reason()`` is not None is skipped with that reason, except when the
``CI`` environment variable is set: a backend missing in CI is a failure, not a skip.

What a backend cannot do is declared in ``KNOWN_LIMITATIONS`` and becomes a strict xfail with a
reason, never a silent skip.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import swe_sandbox
from swe_sandbox.environments import environment_class

# tests/ on sys.path (whatever the import mode): test modules import helpers from here and from
# tests/helpers/ as ``from conftest import run`` / ``from helpers.openai_server import ...``.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

#: Every backend (or backend variant) the conformance suite runs against.
BACKENDS = ["local", "bwrap", "docker", "docker-exec", "podman", "podman-exec", "ssh", "ssh-exec"]

#: Variant -> (backend, overrides). A callable is called on first use (the test sshd starts then).
VARIANTS: dict[str, tuple[str, Any]] = {
    "docker-exec": ("docker", {"runner": "exec"}),
    "podman-exec": ("podman", {"runner": "exec"}),
    "ssh": ("ssh", lambda: _ssh_spec("python")),
    "ssh-exec": ("ssh", lambda: _ssh_spec("exec")),
}

#: Backends whose processes the host sees in its own /proc (same kernel, pid namespaces nest;
#: the test sshd runs on loopback).
HOST_SEES_PROCESSES = set(BACKENDS)

#: The exec fallback's limitation, shared by every backend variant that uses it.
_EXEC_FALLBACK = {
    "test_sandbox_vanished_between_commands_raises":
        "exec fallback: no long-lived runner watches the sandbox between commands",
    "test_commands_cannot_write_into_the_runner_channel":
        "exec fallback: the per-command wrapper is a plain shell of the command's user, so a command can "
        "write into the exec's streams (what it writes lands in its own output; the result stays its own)",
    "test_runner_is_not_named_python":
        "exec fallback: there is no runner; a command's parent is the per-command `sh` wrapper",
}

#: What the attack suite (conformance/test_attacks.py) still finds where the exec fallback runs commands.
_EXEC_FALLBACK_ATTACKS = {
    "test_runner_channel_is_reachable_from_no_other_process":
        "exec fallback: the per-command wrapper (and its output reader) is a plain shell of the command's user "
        "holding the exec's streams, which that user's processes may open through /proc",
    "test_a_command_cannot_forge_a_later_result[sentinel]":
        "exec fallback: a background job can write into a later command's output (the exec's stdout, or the FIFO "
        "its command writes to), which is relayed as raw bytes; only the returncode is checked against the engine",
}
#: ... and in containers, where the exec fallback's lifetime guard is a shell of the container's root.
_CONTAINER_EXEC_ATTACKS = {
    "test_nothing_outlives_a_timeout_through_the_guard":
        "exec fallback: the lifetime guard is a shell run by the container's root, so a root command can make it "
        "exec anything (what it starts descends from no command, and survives the command's timeout)",
}
_AS_ROOT = os.geteuid() == 0  # local runs as the tester, and the test sshd logs in as the tester: root in CI
#: Attacks that succeed where commands run on this host itself as root (local, and ssh without a sandbox).
_ON_THE_HOST_AS_ROOT = {
    "test_kernel_interfaces_are_not_writable":
        "commands run on the host itself as its root, who may write its kernel settings (only an open for "
        "writing is tried, nothing is written)",
    "test_nothing_outlives_a_timeout_through_the_guard":
        "commands run on the host itself as its root, who may replace its own `sleep` (only tested, never done)",
    "test_sandbox_uid_is_not_host_root": "commands run on the host itself as the calling user, here root",
} if _AS_ROOT else {}

#: ... and where they run over SSH without a sandbox (the test sshd logs in as the tester, on this host).
_SSH_ATTACKS = {
    **{name: f"SSH alone is not a sandbox: {why}" for name, why in _ON_THE_HOST_AS_ROOT.items()},
    "test_no_setid_file_reaches_a_host_workspace":
        "SSH alone is not a sandbox: the workspace is the SSH user's own directory on the remote (here this host), "
        "where that user may set any mode bits on its files",
}

#: backend -> {test function name, or ``name[case]`` for one parametrized case: reason}. Each entry
#: becomes ``xfail(strict=True, reason=...)``.
KNOWN_LIMITATIONS: dict[str, dict[str, str]] = {
    "local": {
        "test_commands_cannot_write_into_the_runner_channel":
            "no isolation: a command runs as the calling user, who may open the runner's pipes",
        **{name: f"no isolation: {why}" for name, why in _ON_THE_HOST_AS_ROOT.items()},
        "test_runner_channel_is_reachable_from_no_other_process":
            "no isolation: the host process holding the other ends of the runner's pipes runs as the commands' user",
        "test_no_setid_file_reaches_a_host_workspace":
            "no isolation: commands run on the host and write the caller's own directories directly",
    },
    "bwrap": {
        "test_absolute_paths_outside_the_working_directory":
            "only the workspace mount is shared with the host; the rest of the sandbox is read-only binds and "
            "private tmpfs, so upload/download reach paths under mount_point only (ValueError elsewhere)",
    },
    "docker-exec": {**_EXEC_FALLBACK, **_EXEC_FALLBACK_ATTACKS, **_CONTAINER_EXEC_ATTACKS},
    # in a user namespace, podman's exec streams refuse the command's opens (EACCES): that check passes there
    "podman-exec": {**{k: v for k, v in _EXEC_FALLBACK.items() if k != "test_commands_cannot_write_into_the_runner_channel"},
                    **_EXEC_FALLBACK_ATTACKS, **_CONTAINER_EXEC_ATTACKS},
    "ssh": {  # the test sshd logs in as the user running the tests: root in CI
        **({"test_commands_cannot_write_into_the_runner_channel":
            "SSH alone is not a sandbox: commands run as the SSH user, here root, whose CAP_SYS_PTRACE opens "
            "the non-dumpable runner's pipes (an unprivileged SSH user cannot)"} if os.geteuid() == 0 else {}),
        **_SSH_ATTACKS,
        **({"test_runner_channel_is_reachable_from_no_other_process":
            "SSH alone is not a sandbox: commands run as the SSH user, here root, whose CAP_SYS_PTRACE reads the "
            "runner's fds and those of sshd, which holds their other ends"} if _AS_ROOT else {}),
    },
    "ssh-exec": {
        **_EXEC_FALLBACK,
        **_SSH_ATTACKS,
        **_EXEC_FALLBACK_ATTACKS,
        "test_a_forged_token_of_another_command_spares_nothing_at_a_timeout":
            "exec fallback on ssh: no runner adopts orphans and the remote's PID 1 adopts everyone's, so an escapee "
            "that clears its environment and closes its trace fds (8, 9) is not told apart from the host's daemons",
    },
}

#: Default per-command timeout of the environments the fixtures create (seconds).
FIXTURE_TIMEOUT = 30


def _ssh_spec(runner: str) -> dict[str, Any]:
    from ssh.sshd import ssh_spec

    spec = ssh_spec(runner)
    spec.pop("backend")
    return spec


def variant_spec(name: str) -> tuple[str, dict[str, Any]]:
    """``(backend, overrides)`` of a ``BACKENDS`` entry, for ``get_environment(backend, **overrides)``."""
    backend, overrides = VARIANTS.get(name, (name, {}))
    return backend, dict(overrides() if callable(overrides) else overrides)


def variant_cli_args(name: str) -> list[str]:
    """``--env BACKEND -c environment.KEY=VALUE ...``: the command-line options selecting variant ``name``."""
    import json

    backend, overrides = variant_spec(name)
    args = ["--env", backend]
    for key, value in overrides.items():
        args += ["-c", f"environment.{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return args


def make_variant(name: str, **overrides: Any) -> Any:
    """A new (not yet started) environment of the ``BACKENDS`` entry ``name``."""
    backend, base = variant_spec(name)
    return swe_sandbox.get_environment(backend, **{**base, **overrides})


def require_backend(name: str) -> None:
    """Skip (or, under CI, fail) the current test when backend (or variant) ``name`` cannot run here."""
    reason = environment_class(VARIANTS.get(name, (name,))[0]).unavailable_reason()
    if reason is None:
        return
    if "CI" in os.environ:
        pytest.fail(f"backend {name!r} is unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"backend {name!r} is unavailable: {reason}")


#: Variants the agent's own tests (tests/unit) are not repeated on: the agent sees the same
#: contract there (the conformance suite and the e2e test cover those modes).
UNIT_SKIPS_VARIANTS = {"docker-exec", "podman-exec", "ssh-exec"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit = Path(__file__).parent / "unit"
    repeated = [item for item in items if unit in Path(str(item.fspath)).parents
                and getattr(getattr(item, "callspec", None), "params", {}).get("env") in UNIT_SKIPS_VARIANTS]
    if repeated:
        config.hook.pytest_deselected(items=repeated)
        items[:] = [item for item in items if item not in repeated]
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("env") if callspec is not None else None
        if backend not in KNOWN_LIMITATIONS:
            continue
        name = getattr(item, "originalname", item.name)
        case = callspec.id.replace(f"{backend}-", "", 1) if callspec.id.startswith(f"{backend}-") else ""
        limits = KNOWN_LIMITATIONS[backend]
        reason = limits.get(f"{name}[{case}]") or limits.get(name)
        if reason:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"{backend}: {reason}"))


@pytest.fixture(
    scope="module",
    params=[pytest.param(name, marks=getattr(pytest.mark, VARIANTS.get(name, (name,))[0]), id=name)
            for name in BACKENDS],
)
def env(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One environment per backend variant, shared by the tests of a module (it starts on first use).

    Tests that kill, break or close things use ``make_env`` instead.
    """
    require_backend(request.param)
    environment = make_variant(request.param, timeout=FIXTURE_TIMEOUT)
    environment.test_variant = request.param
    try:
        yield environment
    finally:
        environment.close()


@pytest.fixture
def backend(env: Any) -> str:
    """The ``BACKENDS`` entry under test (a backend name, or a variant such as ``docker-exec``)."""
    return env.test_variant


@pytest.fixture
def make_env(env: Any) -> Iterator[Callable[..., Any]]:
    """Factory of fresh environments of the backend variant under test; all are closed after the test."""
    made: list[Any] = []

    def factory(**overrides: Any) -> Any:
        overrides.setdefault("timeout", FIXTURE_TIMEOUT)
        environment = make_variant(env.test_variant, **overrides)
        made.append(environment)
        return environment

    yield factory
    for environment in made:
        environment.close()


@pytest.fixture
def workspace_env(make_env: Callable[..., Any], backend: str, tmp_path: Path) -> Any:
    """A fresh environment of the backend under test working on ``tmp_path``: local runs in it, the
    others get it as their ``workspace`` (bind-mounted, or copied in: read results back with
    ``read_in_sandbox``, not from ``tmp_path``)."""
    if variant_spec(backend)[0] == "local":
        return make_env(cwd=str(tmp_path))
    return make_env(workspace=str(shareable_workspace(tmp_path)))


#: Owner given to test workspaces when the tests run as root: bwrap then runs as this unprivileged
#: uid (``host_uid``: the workspace's owner) and refuses a workspace that uid cannot write.
TEST_WORKSPACE_UID = 65534


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


def read_in_sandbox(env: Any, path: str) -> str:
    """The text of ``path`` (relative to the working directory) as the sandbox sees it."""
    result = run(env, f"cat -- {path}")
    assert result["returncode"] == 0, result
    return result["output"]


# -- helpers shared by the conformance modules -------------------------------------------------


def run(env: Any, command: str, **kwargs: Any) -> dict[str, Any]:
    """``env.execute({"command": command}, **kwargs)``."""
    return env.execute({"command": command}, **kwargs)


def unique_marker() -> str:
    """A number nobody else uses, fit to be a ``sleep`` duration: ``sleep MARKER`` is findable."""
    return f"{secrets.randbelow(10**6) + 10**6}.{secrets.randbelow(10**6):06d}"


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
print("SCAN_DONE")
"""


def sandbox_processes_with(env: Any, marker: str) -> list[str]:
    """Live processes inside the sandbox whose command line contains ``marker``.

    The scanner gets the marker reversed, so its own command line never matches.
    """
    script = _FIND_SCRIPT.replace("'", "'\"'\"'")
    result = run(env, f"python3 -c '{script}' {marker[::-1]}", timeout=20)
    assert "SCAN_DONE" in result["output"], result
    return [line for line in result["output"].splitlines() if line.startswith("ALIVE")]


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


def start_cli_until_running(argv: list[str], marker: str, within: float = 60.0) -> Any:
    """Start ``swe-sandbox`` (``argv``) and return its ``Popen`` once a sandbox process whose command
    line holds ``marker`` runs (the CLI's own argv, which holds it too, does not count).

    SIGINT is reset to its default in the child: a test run started as a background job (``cmd &``
    in a script) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
    """
    import signal
    import subprocess

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + within
    while not [p for p in host_processes_with(marker) if "swe_sandbox" not in p]:
        if time.monotonic() >= deadline or proc.poll() is not None:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the command never started (exit {proc.returncode}): {out}{err}")
        time.sleep(0.05)
    return proc


def wait_host_gone(marker: str, grace: float = 1.0) -> list[str]:
    """Host processes with ``marker`` still alive after ``grace`` seconds (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + grace
    while True:
        left = host_processes_with(marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def wait_sandbox_gone(env: Any, marker: str, grace: float = 1.0) -> list[str]:
    """Sandbox processes with ``marker`` still alive after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        left = sandbox_processes_with(env, marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def host_server_pid(marker: str, within: float = 20.0) -> int:
    """Host pid of the process serving the sandbox command whose command line holds ``marker``: the
    runner (comm ``swe-sandbox-run``) or, in the exec fallback, the command's wrapper script.

    A command cannot kill its runner from inside (PID 1 of its namespace, non-dumpable), so tests
    of a sandbox that dies kill it from here, as a crash or an OOM kill would.
    """
    from swe_sandbox.environments.fallback import SCRIPT_NAME

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
        if comm == "swe-sandbox-run" or SCRIPT_NAME.encode() in argv:
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

    def kill() -> None:
        os.kill(host_server_pid(marker), signal.SIGKILL)
        thread.killed_at = time.monotonic()

    thread = threading.Thread(target=kill, daemon=True)
    thread.killed_at = None  # monotonic seconds of the kill, once done
    thread.start()
    return thread


# -- a registry on loopback (tests/pull/): session-wide here, where every module shares them --------


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real registry on loopback (Debian's docker-registry, ``helpers.registry``), for the session."""
    from helpers.registry import Registry

    server = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pushed(registry: Any) -> Iterator[Any]:
    """Our base image pushed to ``registry`` under a new name (``helpers.engine_images``); what the
    tests pulled of it is removed from both engines at the end."""
    from helpers.engine_images import ENGINES, push_test_image, remove_pushed

    image = push_test_image(registry)
    yield image
    for engine in ENGINES:
        if environment_class(engine).unavailable_reason() is None:
            remove_pushed(engine, image)


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """``127.0.0.1:PORT`` where connections are taken (the kernel's backlog) and never answered."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"127.0.0.1:{sock.getsockname()[1]}"
