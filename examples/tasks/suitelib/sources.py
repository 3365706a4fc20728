"""Source copies: a project's installed packages, and pure-Python pytest for the sandboxes.

Only source files are copied (``swe_sandbox.agent.demo.copy_source``: ``.py``, ``.pyi``,
``py.typed``), with each distribution's license, so a package with optional C speedups
(MarkupSafe) runs its pure-Python code. pytest and what it needs at run time are copied from the
host's installed distributions (their file lists, ``importlib.metadata``); a distribution
holding compiled code is refused, since the sandbox's Python may not be the host's.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from importlib import metadata
from pathlib import Path

from swe_sandbox.agent.demo import copy_license, copy_source, package_version

from suitelib.spec import Project

#: The test runner put into every sandbox, and its run-time requirements (found from metadata).
TEST_RUNNER = "pytest"
COMPILED = (".so", ".pyd", ".dylib")


def project_versions(project: Project) -> dict[str, str]:
    """``{distribution: installed version}``.

    Raises:
        RuntimeError: a distribution is not installed (``pip install -e '.[dev]'`` installs them).
    """
    versions = {}
    for distribution in project.packages.values():
        version = package_version(distribution)
        if version == "unknown":
            raise RuntimeError(f"{distribution} is not installed: pip install -e '.[dev]'")
        versions[distribution] = version
    return versions


def copy_project(project: Project, dest: Path) -> None:
    """Copy the project's packages (and licenses) into ``dest`` by its layout."""
    root = dest / "src" if project.layout == "src" else dest
    for name, distribution in project.packages.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        copy_source(name, root / name)
        copy_license(distribution, root / name)
    (dest / ".gitignore").write_text("__pycache__/\n*.py[cod]\n.pytest_cache/\n", encoding="utf-8")


def runtime_closure(name: str = TEST_RUNNER) -> list[metadata.Distribution]:
    """``name``'s distribution and every distribution it requires on this interpreter (markers
    evaluated here; extras not followed)."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        seen[key] = dist = metadata.distribution(key)
        for spec in dist.requires or ():
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def copy_test_runner(dest: Path) -> list[str]:
    """Copy pytest and its requirements (source and metadata, no bytecode) into ``dest``.

    Returns:
        list[str]: ``name==version`` of each copied distribution.

    Raises:
        RuntimeError: a distribution ships compiled code.
    """
    copied = []
    for dist in runtime_closure():
        files = [f for f in dist.files or () if "__pycache__" not in f.parts and not str(f).startswith("..")]
        compiled = [str(f) for f in files if str(f).endswith(COMPILED)]
        if compiled:
            raise RuntimeError(f"{dist.metadata['Name']} ships compiled code ({compiled[0]}): not portable")
        for file in files:
            target = dest / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dist.locate_file(file), target)
        copied.append(f"{dist.metadata['Name']}=={dist.version}")
    return copied


def reachable_by_others(path: Path) -> bool:
    """Whether every directory from ``/`` down to ``path`` can be traversed by any user (bwrap, run
    by root, binds paths as an unprivileged uid: it must reach them)."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


def shareable_tools(tools: Path, key: str) -> Path:
    """``tools`` if any user can reach it, else a world-readable copy under the system's temporary
    directory (``swe-sandbox-suite-tools-<key>``, made again when missing)."""
    if reachable_by_others(tools.resolve()) and tools.stat().st_mode & stat.S_IROTH:
        return tools.resolve()
    shared = Path(tempfile.gettempdir()) / f"swe-sandbox-suite-tools-{key}"
    if not shared.is_dir():
        staging = Path(tempfile.mkdtemp(prefix="swe-sandbox-suite-tools-"))
        shutil.copytree(tools, staging / "tools")
        for path in [staging / "tools", *(staging / "tools").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        os.replace(staging / "tools", shared)
        shutil.rmtree(staging, ignore_errors=True)
    return shared
