"""Backend ``local``: the runner as a child process on the host. No isolation at all.

Commands run as the calling user, with the host's files and network. Only the execute contract
holds (timeouts, tree kill, output order and cap, empty stdin). The host environment is not
forwarded except ``PASSTHROUGH_ENV`` (needed for tools to work), plus ``env`` and ``forward_env``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from swe_sandbox.config import EnvironmentConfig
from swe_sandbox.environments import hostcopy
from swe_sandbox.environments.base import Channel, Environment, spawn_runner
from swe_sandbox.runner import BOOTSTRAP, ISOLATED, RUN_TOKEN_VAR, kill_tree

#: Host variables the local backend keeps: locale, identity and search path, never credentials.
PASSTHROUGH_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


class LocalConfig(EnvironmentConfig):
    """Config of the ``local`` backend."""

    backend: str = "local"
    python: str = ""
    """Interpreter that runs the runner; empty: the one running swe-sandbox."""


class LocalEnvironment(Environment):
    """Runs commands directly on the host (no isolation; for trusted commands and development)."""

    config_class = LocalConfig
    isolation = "none: commands run on the host as you, with your files and network"
    config: LocalConfig

    def _open_channel(self) -> Channel:
        base = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        argv = [self.config.python or sys.executable, *ISOLATED, "-c", BOOTSTRAP]
        return spawn_runner(argv, self.sandbox_env(base), cwd=self.config.cwd or None)

    def _stop(self) -> None:
        """If the runner died before it could, end what its commands left running on the host."""
        run_id = self.info.get("run_id")
        if run_id:
            kill_tree(marker=f"\0{RUN_TOKEN_VAR}={run_id}\0".encode(), budget=1.0)

    def _upload(self, src: Path, dst: str) -> None:
        hostcopy.copy_paths(src, dst, follow_dst=False)  # a link at dst is replaced, as in a container

    def _download(self, src: str, dst: Path) -> None:
        hostcopy.copy_paths(src, dst, follow_dst=True, limit=self.config.max_download_bytes)

