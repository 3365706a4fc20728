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

Files are replaced atomically (temporary file in the same directory, ``fsync``, ``os.replace``),
so a reader never sees a half-written file, even while the agent is running. Writing never fails
on odd text: a lone surrogate (e.g. ``"\ud800"`` in a model's tool-call arguments, which cannot be
encoded as UTF-8) is written as its JSON escape ``\ud800``, so the file is valid JSON in UTF-8 and
reads back to the same string.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from swe_sandbox.errors import ConfigError
from swe_sandbox.redact import redact

TRAJECTORY_FORMAT = "mini-swe-agent-1.1"
#: Formats ``load_trajectory`` accepts: ours / mini-swe-agent v2, and mini-swe-agent v1.
KNOWN_FORMATS = ("mini-swe-agent-1.1", "mini-swe-agent-1")
SURROGATE_RE = re.compile("[\ud800-\udfff]")


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


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, whatever it holds: characters that UTF-8 cannot encode (lone surrogates)
    become the bytes they stand for (``surrogateescape``) or, failing that, ``?``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def to_json(data: Any, **kwargs: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, default=str, **kwargs)`` with lone surrogates written
    as ``\\uXXXX`` escapes, so the text always encodes as UTF-8 and stays valid JSON."""
    text = json.dumps(data, ensure_ascii=False, default=str, **kwargs)
    # With ensure_ascii=False, json leaves surrogates raw, and only inside string literals: the
    # escape is what ensure_ascii=True writes, and json.loads reads it back to the same character.
    return SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically: readers see the old or the new file, never half.

    The parent directory is created when missing. Text UTF-8 cannot encode (lone surrogates) is
    written as ``utf8`` says, never an error.

    Raises:
        OSError: the directory is not writable (the temporary file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(utf8(text))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (best effort: some filesystems refuse to fsync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_trajectory(path: str | os.PathLike, data: dict[str, Any], secrets: Iterable[str] = ()) -> None:
    """Write ``data`` to ``path`` atomically as indented JSON, secrets masked (``swe_sandbox.redact``,
    with ``secrets`` as more values to mask); always valid JSON in UTF-8 (see ``to_json``)."""
    atomic_write_text(path, to_json(redact(data, secrets), indent=2) + "\n")


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
