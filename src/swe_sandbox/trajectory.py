"""Trajectory files: mini-swe-agent's format, written atomically, secrets redacted.

A trajectory is one JSON object (``trajectory_format: "mini-swe-agent-1.1"``, as mini-swe-agent
v2 writes it, so its inspector opens ours)::

    {"info": {"exit_status": str, "submission": str,
              "model_stats": {"instance_cost": float (USD), "api_calls": int},
              "config": {"agent": {...}, "agent_type": str, "model": {...}, "model_type": str,
                         "environment": {...}, "environment_type": str},
              "swe_sandbox_version": str},
     "messages": [...],
     "trajectory_format": "mini-swe-agent-1.1"}

Files are replaced atomically (``swe_sandbox.files.atomic_write_text``: temporary file in the
same directory, ``fsync``, ``os.replace``), so a reader never sees a half-written file, even while
the agent is running. Writing never fails on odd text: a lone surrogate (e.g. ``"\ud800"`` in a model's tool-call arguments, which cannot be
encoded as UTF-8) is written as its JSON escape ``\ud800``, so the file is valid JSON in UTF-8 and
reads back to the same string.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from swe_sandbox import files
from swe_sandbox.errors import ConfigError
from swe_sandbox.redact import redact

TRAJECTORY_FORMAT = "mini-swe-agent-1.1"
#: Formats ``load_trajectory`` accepts: ours / mini-swe-agent v2, and mini-swe-agent v1.
KNOWN_FORMATS = ("mini-swe-agent-1.1", "mini-swe-agent-1")


def recursive_merge(*dicts: dict[str, Any]) -> dict[str, Any]:
    """Merge nested dicts left to right (later values win; dicts are merged, not replaced)."""
    out: dict[str, Any] = {}
    for data in dicts:
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = recursive_merge(out[key], value)
            else:
                out[key] = value
    return out


def write_trajectory(path: str | os.PathLike, data: dict[str, Any], secrets: Iterable[str] = ()) -> None:
    """Write ``data`` to ``path`` atomically as indented JSON, secrets masked (``swe_sandbox.redact``,
    with ``secrets`` as more values to mask); always valid JSON in UTF-8 (see ``to_json``)."""
    files.atomic_write_text(path, files.to_json(redact(data, secrets), indent=2) + "\n")


def load_trajectory(path: str | os.PathLike) -> dict[str, Any]:
    """Read a trajectory file: ours, mini-swe-agent v2 (``mini-swe-agent-1.1``) or v1.

    A bare JSON list of messages (an old mini-swe-agent export) is accepted too and returned as
    ``{"messages": [...], "info": {}}``.

    Raises:
        ConfigError: unreadable file, not JSON, or no ``messages`` list.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read trajectory {path}: {exc}") from None
    if isinstance(data, list):
        data = {"messages": data, "info": {}}
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ConfigError(f"trajectory {path}: expected an object with a 'messages' list")
    return data
