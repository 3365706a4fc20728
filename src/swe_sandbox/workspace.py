"""A host directory copied into a sandbox's working directory (``run --workspace``, a task's
``workspace``), without the special files (FIFOs, sockets, devices) that cannot be copied.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swe_sandbox.environments import get_environment
from swe_sandbox.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.environments.base import Environment


def special_files(root: Path) -> list[Path]:
    """Entries under ``root`` that are neither regular files, directories nor symlinks (FIFOs,
    sockets, devices), relative to ``root``, sorted. Symlinks are not followed."""
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:  # unreadable: the copy reports it
            continue
        for entry in entries:
            try:
                if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                    continue
            except OSError:
                continue
            found.append(Path(entry.path).relative_to(root))
    return sorted(found)


def _ignore_special(directory: str, names: list[str]) -> set[str]:
    """``shutil.copytree`` ignore function: the special files (see ``special_files``) of ``directory``."""
    ignored = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            ignored.add(name)
    return ignored


def upload_workspace(environment: Environment, workspace: Path, target: str,
                     warn: Callable[[str], None] | None = None) -> None:
    """Copy the directory ``workspace`` to ``target`` in the sandbox, without its special files.

    FIFOs, sockets and devices cannot be copied (and a FIFO would block the copy): when there are
    any, ``warn`` gets one line naming them and the copy goes through a temporary staging
    directory that leaves them out. ``workspace`` itself is never modified.

    Raises:
        ConfigError: the copy failed (an unreadable file...); one line, naming the first problem.
    """
    special = special_files(workspace)
    staging: Path | None = None
    source = workspace
    try:
        if special:
            names = ", ".join(str(p) for p in special[:3]) + (f", ... ({len(special) - 3} more)"
                                                              if len(special) > 3 else "")
            if warn is not None:
                warn(f"--workspace: skipped {len(special)} special file(s) (FIFO, socket or device), "
                     f"not copied into the sandbox: {names}")
            staging = Path(tempfile.mkdtemp(prefix="swe-sandbox-staging-"))
            source = staging / "workspace"
            shutil.copytree(workspace, source, symlinks=True, ignore=_ignore_special)
        environment.upload(source, target)
    except shutil.Error as exc:  # copytree's list of (src, dst, why)
        problems = exc.args[0] if exc.args and isinstance(exc.args[0], list) else [str(exc)]
        first = problems[0]
        detail = f"{first[0]}: {first[2]}" if isinstance(first, tuple) and len(first) == 3 else str(first)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"--workspace: cannot copy {workspace} into the sandbox: {detail}{more}") from None
    except OSError as exc:
        raise ConfigError(f"--workspace: cannot copy {workspace} into the sandbox: {exc}") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


#: The backend with no sandbox directory of its own: a workspace is copied to a fresh scratch
#: directory on the host, made its ``cwd``. Every other backend gets the copy uploaded into the
#: sandbox, to ``copy_target``.
SCRATCH_BACKEND = "local"


def scratch_cwd(data: dict[str, Any], prefix: str) -> Path | None:
    """On ``SCRATCH_BACKEND``, make a fresh directory and set it as ``data``'s ``cwd``.

    Args:
        data: an environment config (changed in place: its ``cwd``).
        prefix: the directory's name prefix (under the system's temporary directory).

    Returns:
        Path | None: the directory (the caller removes it after the run), or None on another backend.
    """
    if data.get("backend") != SCRATCH_BACKEND:
        return None
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    data["cwd"] = str(scratch)
    return scratch


def copy_target(config: Any) -> str:
    """Where a workspace copy goes in the sandbox: where commands start (``cwd``), else ``mount_point``.

    Args:
        config: the environment's validated config.

    Returns:
        str: the directory, or ``""`` when the backend has neither.
    """
    return getattr(config, "cwd", "") or getattr(config, "mount_point", "")


def build_environment(data: dict[str, Any], workspace: Path | None,
                      warn: Callable[[str], None] | None = None) -> tuple[Environment, Path | None]:
    """Create the environment and put a copy of ``workspace`` in its working directory.

    ``local`` gets a fresh temporary copy as its ``cwd`` (``scratch_cwd``; returned, to be removed
    after the run); other backends get the copy uploaded to ``copy_target``.
    Special files (FIFOs, sockets, devices) are left out, with a line to ``warn``.

    Raises:
        ConfigError: ``workspace`` is not a directory, the backend has no directory to put it in,
            or the copy failed.
    """
    if workspace is None:
        return get_environment(data), None
    if not workspace.is_dir():
        raise ConfigError(f"--workspace: {workspace} is not a directory")
    data = dict(data)
    if data.get("backend") != "local" and data.get("workspace"):
        raise ConfigError("environment.workspace and --workspace both given: use one")
    scratch = scratch_cwd(data, "swe-sandbox-workspace-")
    environment = None
    try:
        environment = get_environment(data)
        target = copy_target(environment.config)
        if not target:
            raise ConfigError(f"--workspace: backend {data.get('backend')!r} has no working directory to copy it "
                              "to; set -c environment.cwd=DIR")
        upload_workspace(environment, workspace, target, warn)
    except BaseException:
        if environment is not None:
            environment.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return environment, scratch
