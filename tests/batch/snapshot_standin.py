"""A TEMPORARY stand-in for the snapshot API (issue 24) while it is being built on main: the batch
tests of groups run against it until the real ``env.snapshot()`` lands, then this file goes.

A "snapshot" is a tar of the directory commands start in (the task's tree), kept on the host; a
"fork" is a new sandbox of the same config with that tree restored; a "reset" restores it in place.
"""

from __future__ import annotations

import concurrent.futures as cf
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from swe_sandbox import capabilities, errors
from swe_sandbox.environments.base import Environment

TAR = ".standin-snapshot.tar"


def real_api() -> bool:
    """Whether the real snapshot API is here (then the stand-in is not installed)."""
    return hasattr(Environment, "snapshot") and hasattr(errors, "ResetFailed")


class StandInResetFailed(errors.SandboxError):
    def __init__(self, message: str, drift: list[str] | None = None) -> None:
        super().__init__(message)
        self.drift = drift or [message]


class StandInSnapshot:
    def __init__(self, env: Environment) -> None:
        started = time.monotonic()
        env.start()
        self.cls, self.config = type(env), env.config
        self.cwd = env.execute({"command": "pwd"})["output"].strip()
        self.store = Path(tempfile.mkdtemp(prefix="standin-snap-"))
        done = env.execute({"command": f"tar -cf {TAR} --exclude=./{TAR} . && echo ok"})
        assert done["returncode"] == 0, done
        env.download(f"{self.cwd}/{TAR}", self.store / "tree.tar")
        env.execute({"command": f"rm -f {TAR}"})
        self.id, self.backend, self.roots = self.store.name, env.config.backend, (self.cwd,)
        self.taken_s = time.monotonic() - started

    def restore(self, env: Environment) -> None:
        env.execute({"command": "find . -mindepth 1 -delete"})
        env.upload(self.store / "tree.tar", f"{self.cwd}/{TAR}")
        done = env.execute({"command": f"tar -xf {TAR} && rm -f {TAR}"})
        if done["returncode"] != 0:
            raise StandInResetFailed(f"restore failed: {done['output'][-300:]}")

    def environment(self) -> Environment:
        env = self.cls(self.config)
        env.start()
        self.restore(env)
        return env

    def fork(self, n: int) -> list[Environment]:
        with cf.ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(lambda _: self.environment(), range(n)))

    def remove(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)


def _snapshot(self: Environment) -> StandInSnapshot:
    return StandInSnapshot(self)


def _reset(self: Environment, snap: Any) -> None:
    try:
        snap.restore(self)
    except StandInResetFailed:
        self.close()
        raise


def install(monkeypatch: Any = None) -> None:
    """Install the stand-in (with ``monkeypatch``: undone after the test), unless the real API is here."""
    if real_api():
        return
    setattr_ = monkeypatch.setattr if monkeypatch is not None else (lambda o, n, v, raising=True: setattr(o, n, v))
    setattr_(capabilities, "SNAPSHOT", "snapshot", raising=False)
    setattr_(capabilities, "RESET_IN_PLACE", "reset_in_place", raising=False)
    setattr_(errors, "ResetFailed", StandInResetFailed, raising=False)
    setattr_(Environment, "snapshot", _snapshot, raising=False)
    setattr_(Environment, "reset", _reset, raising=False)
