"""The process that runs one image pull through the engine's SDK (started by ``pulling.PullJob``).

    python -m swe_sandbox.environments.container.pull_child BACKEND URL IMAGE INSECURE TIMEOUT

It writes each event of the engine's pull stream as one JSON line on stdout, and an ``{"error":
...}`` line when the SDK call itself fails (an HTTP error before the stream starts). It ends when
its stdin closes (its parent is gone), so a pull never outlives the process that wanted it.

Why a process: the docker SDK's ``pull`` reads its stream with no socket timeout (it passes
``timeout=None``) and no way to stop it from another thread, and neither SDK can cancel a pull.
Ending this process closes its connection to the engine, and the engine then cancels the pull
(both serve it under the request's context; measured: Podman 4.3 drops its registry connection at
once, Docker 20.10 ends a registry handshake under way by its own 10 s TLS timeout and goes no
further); so ``pull_timeout`` and Ctrl-C stop a pull for real.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from swe_sandbox.environments.container.environment import ContainerEnvironment


def _exit_when_parent_is_gone() -> None:
    """Read stdin to its end (the parent holds the other end), then exit at once. (``os.read``: a
    buffered ``sys.stdin`` would hold its lock and abort the interpreter's own exit.)"""
    try:
        while os.read(0, 1 << 16):
            pass
    finally:
        os._exit(3)


def _write(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    backend, url, image, insecure, timeout = argv
    threading.Thread(target=_exit_when_parent_is_gone, daemon=True).start()
    from swe_sandbox.environments import environment_class
    from swe_sandbox.environments.container.engine import error_line

    cls = cast("type[ContainerEnvironment]", environment_class(backend))  # the parent pulls for a container backend
    engine = cls.engine_class(url, float(timeout))
    try:
        for event in engine.pull_events(image, insecure=insecure == "1"):
            _write(event)
    except engine.errors + (ValueError,) as exc:  # the SDK's, or an undecodable event: told the parent as text
        # the engine's own words when the SDK has them (APIError.explanation, both SDKs)
        _write({"error": str(getattr(exc, "explanation", "") or "") or error_line(exc)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
