"""The memory the bwrap sandboxes' tmpfs may take, and the disk scratch past it.

A tmpfs's size is a cap, charged to the host's memory as files fill it: 16 sandboxes with a 1 GiB
``/tmp`` and a 1 GiB ``/var/tmp`` each may take 32 GiB, more than many hosts have. ``TMPFS``
counts the caps of the sandboxes of this process that hold tmpfs now; a sandbox whose caps would
take the total past its budget gets its ``/tmp`` and ``/var/tmp`` on disk instead
(``make_scratch``: a private directory, removed at close).
"""

from __future__ import annotations

import os
import tempfile
import threading

#: Where disk scratch directories are made (disk by the FHS, unlike a /tmp that may be tmpfs).
SCRATCH_PARENT = "/var/tmp"
#: The subdirectories of a scratch directory bound at the sandbox's /tmp and /var/tmp.
SCRATCH_MOUNTS = {"/tmp": "tmp", "/var/tmp": "var-tmp"}


class TmpfsBudget:
    """Bytes of tmpfs caps held by this process's sandboxes (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.used = 0

    def take(self, size: int, budget: int) -> bool:
        """Hold ``size`` bytes when the total stays within ``budget`` bytes; whether it did."""
        with self._lock:
            if self.used + size > budget:
                return False
            self.used += size
            return True

    def give_back(self, size: int) -> None:
        """Release ``size`` bytes that ``take`` held."""
        with self._lock:
            self.used = max(0, self.used - size)


#: The one budget of this process.
TMPFS = TmpfsBudget()


def default_budget() -> int:
    """Half of this host's physical memory, bytes (the kernel's own default size of a tmpfs)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


def make_scratch(ids: tuple[int, int] | None) -> str:
    """A new scratch directory for one sandbox, with ``SCRATCH_MOUNTS``' subdirectories (mode
    1777, as /tmp), all owned by ``ids`` (the sandbox's host uid and gid) when given. The
    directory itself is mode 0700: no other host user reaches inside.

    Raises:
        OSError: it cannot be made.
    """
    parent = SCRATCH_PARENT if os.access(SCRATCH_PARENT, os.W_OK | os.X_OK) else None
    root = tempfile.mkdtemp(prefix="swe-sandbox-bwrap-scratch-", dir=parent)
    for name in SCRATCH_MOUNTS.values():
        path = os.path.join(root, name)
        os.mkdir(path)
        os.chmod(path, 0o1777)
        if ids is not None:
            os.chown(path, *ids)
    if ids is not None:
        os.chown(root, *ids)
    return root
