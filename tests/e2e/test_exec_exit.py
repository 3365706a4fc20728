"""``swe-sandbox exec`` as the program itself ends at once when its command is done
(``guard.exit_at_once``: no interpreter teardown): its status, its whole output and what
``atexit`` handlers write must survive that."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.variants import require_backend

pytestmark = pytest.mark.bwrap


def exec_process(*args: str) -> subprocess.CompletedProcess[bytes]:
    require_backend("bwrap")
    return subprocess.run([sys.executable, "-m", "swe_sandbox", "exec", "--env", "bwrap", *args],
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def test_status_and_a_large_output_arrive_whole():
    done = exec_process("--", "head -c 3000000 /dev/zero | tr '\\0' y; echo; echo to-stderr >&2; exit 3")
    assert done.returncode == 3, done.stderr
    assert done.stdout.count(b"y") == 3_000_000 and b"to-stderr" in done.stdout


def test_json_and_a_timeout():
    done = exec_process("--json", "--timeout", "0.5", "--", "echo partial; sleep 30")
    assert done.returncode == 124
    result = json.loads(done.stdout)
    assert result["output"] == "partial\n" and result["extra"]["timed_out"] is True


def test_atexit_handlers_still_run(tmp_path):
    """An ``atexit`` handler (here registered by a ``sitecustomize`` on the path) runs before the end."""
    mark = tmp_path / "atexit-ran"
    (tmp_path / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(mark)!r}, 'w').write('yes'))\n")
    require_backend("bwrap")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "exec", "--env", "bwrap", "--", "true"],
                          capture_output=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "yes"
