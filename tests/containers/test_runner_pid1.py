"""What a red team found against the runner as PID 1 of its sandbox (docker, podman and bwrap).

- A chain of processes that fork as fast as they can, each child leaving the session, outran a
  timeout's kill rounds: the call came back after ~4 s with hundreds of forkers alive, and a second
  such chain starved the runner until the host gave the sandbox up. As PID 1 the runner now stops
  every other process of its namespace at once before it looks for the tree (``runner.kill_tree``).
- A command that removed and made again the default working directory broke every later command
  that had no ``cwd`` (the runner's own directory was the deleted one).
"""

from __future__ import annotations

import time

import pytest

import swe_sandbox

from helpers.variants import require_backend

BACKENDS = [pytest.param(name, marks=getattr(pytest.mark, name), id=name) for name in ("docker", "podman", "bwrap")]

#: 64 processes (six forks), each forking as fast as it can: the child leaves the session and
#: forks on, the parent exits; bounded by the sandbox's process limit. Started in the background, so
#: the command's shell itself waits in ``sleep``.
FAST_CHAIN = ("python3 -c '\nimport os\nfor _ in range(6): os.fork()\nwhile True:\n try:\n  pid = os.fork()\n"
              " except OSError:\n  continue\n if pid == 0:\n  os.setsid()\n  continue\n os._exit(0)\n' & sleep 100")


@pytest.fixture(params=BACKENDS)
def backend(request):
    require_backend(request.param)
    return request.param


def count_python(env) -> int:
    return int(env.execute("ps -eo comm= | grep -c '^python3$' || true", timeout=60)["output"].strip() or 0)


def test_a_fast_forking_chain_dies_with_its_timeout(backend):
    limits = {"pids_limit": 512} if backend != "bwrap" else {"max_processes": 512}
    with swe_sandbox.get_environment(backend, **limits) as env:
        for _ in range(2):  # the second chain once starved the runner for good
            started = time.monotonic()
            result = env.execute({"command": FAST_CHAIN}, timeout=0.5)
            assert result["extra"]["timed_out"] is True, result
            assert time.monotonic() - started < 2.5, "the timeout's kill outlasted its budget"
            assert count_python(env) == 0, "forkers outlived the timeout"
        assert env.execute("echo alive", timeout=10)["output"] == "alive\n"


def test_a_timeout_still_spares_earlier_background_jobs_when_the_world_is_stopped(backend):
    """Stopping every process for the kill lets the others go on after (SIGCONT)."""
    with swe_sandbox.get_environment(backend) as env:
        env.execute("(while :; do date +%s%N >> /tmp/ticks; sleep 0.05; done) >/dev/null 2>&1 &")
        assert env.execute("sleep 30", timeout=0.5)["extra"]["timed_out"] is True
        before = int(env.execute("wc -l < /tmp/ticks")["output"])
        time.sleep(0.5)  # fixed: the ticker writes on its own clock; nothing else to poll
        assert int(env.execute("wc -l < /tmp/ticks")["output"]) > before, "the earlier job was left stopped"


@pytest.mark.parametrize("engine", [pytest.param(e, marks=getattr(pytest.mark, e)) for e in ("docker", "podman")])
def test_the_default_directory_removed_and_made_again(engine):
    require_backend(engine)
    with swe_sandbox.get_environment(engine) as env:
        home = env.execute("pwd")["output"].strip()
        assert home == env.config.mount_point
        done = env.execute(f"cd / && rm -rf {home} && mkdir -p {home} && echo made")
        assert done["output"] == "made\n", done
        again = env.execute("pwd; echo next")
        assert (again["returncode"], again["output"]) == (0, f"{home}\nnext\n"), again
