"""Run by the Harbor venv's python (``test_harbor_env.py``): one environment of ``swe_sandbox.harbor``
driven the way Harbor's trial drives it, what ``harbor run`` with the oracle does not reach.

    python exec_contract.py MODULE:CLASS ENVIRONMENT_DIR MARKER   ->  one JSON object of observations

MODULE:CLASS is e.g. ``swe_sandbox.harbor:DockerEnvironment`` (any Harbor environment works); MARKER a number of seconds that only this
run sleeps (``sleep MARKER``), so the host's process table shows whether its processes are gone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths
from harbor.utils.import_path import import_class


def alive(marker: str) -> int:
    """Host processes sleeping ``marker`` seconds (the command's, wherever they run)."""
    done = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    return len(done.stdout.split())


async def timeouts(env, marker: str) -> dict:
    """An exec past its timeout_sec, and one whose awaiting task is cancelled (as Harbor's timeouts do)."""
    seen: dict = {}
    start = time.monotonic()
    try:
        await env.exec(f"setsid sleep {marker} & sleep {marker}", timeout_sec=2)
    except RuntimeError as exc:
        seen["timeout_error"] = str(exc)
    seen["timeout_s"] = time.monotonic() - start
    seen["alive_after_timeout"] = alive(marker)
    task = asyncio.create_task(env.exec(f"setsid sleep {marker} & sleep {marker}"))
    await asyncio.sleep(1.0)
    start = time.monotonic()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        seen["cancel_s"] = time.monotonic() - start
    seen["alive_after_cancel"] = alive(marker)
    seen["after"] = (await env.exec("echo still here")).stdout
    return seen


async def files(env, tmp: Path) -> dict:
    """A tree up and back, and single files both ways."""
    tree = tmp / "tree"
    (tree / "sub" / "empty").mkdir(parents=True)
    (tree / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tree / "sub" / "run.sh").chmod(0o755)
    (tree / "top.txt").write_text("top\n")
    await env.upload_dir(tree, "/data")
    await env.upload_file(tree / "top.txt", "/data/sub/copy.txt")
    back = tmp / "back"
    await env.download_dir("/data", back)
    await env.download_file("/data/sub/copy.txt", tmp / "copy.txt")
    listing = sorted(str(p.relative_to(back)) for p in back.rglob("*"))
    return {"listing": listing, "exec_bit": bool((back / "sub" / "run.sh").stat().st_mode & 0o100),
            "copy": (tmp / "copy.txt").read_text(), "ran": (await env.exec("/data/sub/run.sh")).stdout,
            "is_dir": await env.is_dir("/data/sub"), "is_file": await env.is_file("/data/top.txt")}


async def main(name: str, environment_dir: str, marker: str) -> dict:
    cls = import_class(name)
    with tempfile.TemporaryDirectory() as tmp:
        trial = TrialPaths(Path(tmp) / "trial")
        trial.mkdir()
        env = cls(environment_dir=Path(environment_dir), environment_name="exec-contract",
                  session_id="exec-contract__1", trial_paths=trial, task_env_config=EnvironmentConfig(),
                  persistent_env={"FROM_TRIAL": "trial"})
        await env.start(force_build=False)
        try:
            merged = await env.exec("echo out; echo err >&2; exit 3")
            seen = {"merged": [merged.stdout, merged.stderr, merged.return_code],
                    "env": (await env.exec('echo "$FROM_TRIAL|$A|$B"', env={"A": "1", "B": "two words"})).stdout,
                    "user": (await env.exec("id -un")).stdout, "nobody": (await env.exec("id -un", user="nobody")).stdout,
                    "uid": (await env.exec("id -u", user=65534)).stdout, "pwd": (await env.exec("pwd")).stdout,
                    "cwd": (await env.exec("pwd", cwd="/tmp")).stdout}
            seen.update(await timeouts(env, marker))
            seen.update(await files(env, Path(tmp)))
        finally:
            await env.stop(delete=True)
        seen["alive_after_stop"] = alive(marker)
        return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
