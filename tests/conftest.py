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

#: Issues 4 (docker, podman) and 5 (ssh) are in progress: their backends are on main but not yet
#: registered, and .ci/run does not start their engines yet, so their tests are not collected.
#: They join the run when scripts/setup.sh calls scripts/setup-engines.sh (see the session note).
collect_ignore = ["containers", "ssh", "unit/test_engines_units.py"]

#: Every backend the conformance suite runs against. Add "docker", "podman", "ssh" here.
BACKENDS = ["local", "bwrap"]

#: Backends whose processes the host sees in its own /proc (same kernel, pid namespaces nest).
HOST_SEES_PROCESSES = {"local", "bwrap"}

#: backend -> {test function name: reason}. Each entry becomes ``xfail(strict=True, reason=...)``.
KNOWN_LIMITATIONS: dict[str, dict[str, str]] = {
    "local": {
        "test_commands_cannot_write_into_the_runner_channel":
            "no isolation: a command runs as the calling user, who may open the runner's pipes",
    },
    "bwrap": {},
}

#: Default per-command timeout of the environments the fixtures create (seconds).
FIXTURE_TIMEOUT = 30


def require_backend(name: str) -> None:
    """Skip (or, under CI, fail) the current test when backend ``name`` cannot run here."""
    reason = environment_class(name).unavailable_reason()
    if reason is None:
        return
    if "CI" in os.environ:
        pytest.fail(f"backend {name!r} is unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"backend {name!r} is unavailable: {reason}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("env") if callspec is not None else None
        reason = KNOWN_LIMITATIONS.get(backend, {}).get(getattr(item, "originalname", item.name))
        if reason:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"{backend}: {reason}"))


@pytest.fixture(
    scope="module",
    params=[pytest.param(name, marks=getattr(pytest.mark, name), id=name) for name in BACKENDS],
)
def env(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One environment per backend, shared by the tests of a module (it starts on first use).

    Tests that kill, break or close things use ``make_env`` instead.
    """
    require_backend(request.param)
    environment = swe_sandbox.get_environment(request.param, timeout=FIXTURE_TIMEOUT)
    try:
        yield environment
    finally:
        environment.close()


@pytest.fixture
def backend(env: Any) -> str:
    """The name of the backend under test."""
    return env.config.backend


@pytest.fixture
def make_env(env: Any) -> Iterator[Callable[..., Any]]:
    """Factory of fresh environments of the backend under test; all are closed after the test."""
    made: list[Any] = []

    def factory(**overrides: Any) -> Any:
        overrides.setdefault("timeout", FIXTURE_TIMEOUT)
        environment = swe_sandbox.get_environment(env.config.backend, **overrides)
        made.append(environment)
        return environment

    yield factory
    for environment in made:
        environment.close()


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
