"""``remote_sandbox: bwrap`` of the ``ssh`` backend: the bwrap backend's policy on the remote host.

The remote runner (or fallback wrapper) is started as ``env -i VARS bwrap POLICY -- ...`` with the
argv ``bwrap.bwrap_policy`` builds, the remote workspace bound at ``mount_point``. That argv is
built from THIS host's file system (which system directories exist, which are links), so the
remote's layout is checked to be the same before anything runs there.
"""

from __future__ import annotations

import os
import shlex
from pathlib import PurePosixPath

from swe_sandbox.environments.bwrap import MASKED_FILES, SYSTEM_DIRS, BwrapConfig, bwrap_policy
from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxStartError

LAYOUT_PATHS = (*SYSTEM_DIRS, *MASKED_FILES)


class RemoteBwrap:
    """The bwrap backend's policy for a workspace on the remote host.

    Args:
        config: the bwrap fields (``SshConfig.bwrap``, validated).
        workspace: the remote directory bound at ``config.mount_point``.
    """

    def __init__(self, config: BwrapConfig, workspace: str):
        self.config = config
        self.remote_workspace = workspace

    def policy_argv(self) -> list[str]:
        """``bwrap POLICY --`` for the remote (``bwrap.bwrap_policy``): the command follows."""
        return bwrap_policy(self.config, PurePosixPath(self.remote_workspace))

    def probe(self) -> list[str]:
        """Remote shell lines printing ``bwrap=1`` when bubblewrap works, and the system layout."""
        return ["echo uid=$(id -u)",
                f"{shlex.quote(self.config.bwrap_path)} --unshare-all --unshare-user --ro-bind / / -- true 2>&1"
                " && echo bwrap=1",
                f"for p in {' '.join(LAYOUT_PATHS)}; do if [ -L $p ]; then echo \"$p L$(readlink $p)\"; "
                "elif [ -d $p ]; then echo \"$p D\"; elif [ -e $p ]; then echo \"$p F\"; fi; done"]

    def check(self, host: str, facts: set[str]) -> None:
        """Refuse a remote whose bwrap fails, or whose layout differs from this host's (``bwrap_policy``
        reads this host's file system).

        Raises:
            ConfigError: the SSH user is root there.
            BackendUnavailable: bubblewrap does not work on the remote.
            SandboxStartError: the system layouts differ.
        """
        if "uid=0" in facts:
            raise ConfigError(f"environment.username: remote_sandbox: bwrap refuses to log in to {host} as root: the "
                              "sandbox's root would be that host's root (bwrap there runs as the SSH user, with no "
                              "uid switch or seccomp filter); log in as an unprivileged user")
        if "bwrap=1" not in facts:
            raise BackendUnavailable(f"remote_sandbox: bwrap: bubblewrap does not work on {host}: "
                                     f"{' '.join(f for f in facts if '=' not in f and f[:1] != '/')[:500]}")
        here = {f"{p} L{os.readlink(p)}" if os.path.islink(p) else f"{p} D" if os.path.isdir(p) else f"{p} F"
                for p in LAYOUT_PATHS if os.path.lexists(p)}
        there = {f for f in facts if f[:1] == "/"}
        if here != there:
            raise SandboxStartError(f"remote_sandbox: bwrap: the system layout of {host} differs from this "
                                    f"host's ({sorted(here ^ there)}); not supported yet")
