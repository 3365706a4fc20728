"""Reading the JSON files a run is given (task and predictions files): errors name the file and line.

A leaf of ``batch/``: ``tasks`` and ``predictions`` both read with it, and neither imports the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swe_sandbox.errors import TaskFileError
from swe_sandbox.files import jsonl_lines


def jsonl_items(text: str, path: Path) -> list[tuple[int, Any]]:
    """``(line number, object)`` of each non-blank line; ``TaskFileError`` names a line that is not JSON."""
    items = []
    for number, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            items.append((number, json.loads(line)))
        except ValueError as exc:
            raise TaskFileError(f"{path} line {number}: not valid JSON: {exc}") from None
    return items


def parse_json(text: str, path: Path) -> Any:
    """``json.loads(text)``; ``TaskFileError`` naming the line where it is not JSON."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise TaskFileError(f"{path} line {getattr(exc, 'lineno', '?')}: not valid JSON: {exc}") from None
