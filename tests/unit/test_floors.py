"""Lower floors reach only down: the workspace rule's one home, gc as each backend's classmethod,
capability and backend names at the ground floor, and no import cycle among the modules they touch."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from types import SimpleNamespace

import swe_sandbox
from swe_sandbox import backends, capabilities
from swe_sandbox.environments import environment_class
from swe_sandbox.workspace import copy_target, scratch_cwd

SRC = Path(swe_sandbox.__file__).parent


def test_scratch_cwd_only_on_local():
    data = {"backend": "local"}
    scratch = scratch_cwd(data, "swe-sandbox-test-")
    try:
        assert scratch is not None and scratch.is_dir() and data["cwd"] == str(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    other = {"backend": "bwrap"}
    assert scratch_cwd(other, "swe-sandbox-test-") is None and other == {"backend": "bwrap"}


def test_copy_target_is_cwd_else_mount_point():
    assert copy_target(SimpleNamespace(cwd="/w", mount_point="/m")) == "/w"
    assert copy_target(SimpleNamespace(cwd="", mount_point="/m")) == "/m"
    assert copy_target(SimpleNamespace()) == ""


def test_gc_is_each_backends_classmethod():
    assert environment_class("local").gc() == [] and environment_class("bwrap").gc(dry_run=True) == []
    assert environment_class("docker").gc.__func__ is not environment_class("local").gc.__func__


def own_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("swe_sandbox"):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("swe_sandbox")}
    return found


def test_ground_floor_modules_import_nothing_of_ours():
    for module in (backends, capabilities):
        assert own_imports(Path(module.__file__)) == set(), module.__name__


def test_config_and_backends_reach_no_backend_or_test_kit():
    """config.py imports only the ground floor (the network policy is a pydantic model of it); no
    backend module imports the test kit."""
    assert own_imports(SRC / "config.py") <= {"swe_sandbox.backends", "swe_sandbox.errors", "swe_sandbox.network.policy"}
    for path in (SRC / "environments").rglob("*.py"):
        assert not any(m.startswith("swe_sandbox.testing") for m in own_imports(path)), path
    engine = own_imports(SRC / "environments" / "container" / "engine.py")
    assert not any(m == "swe_sandbox.environments" or m.endswith(".environment") for m in engine)
