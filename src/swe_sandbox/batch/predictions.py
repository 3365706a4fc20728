"""Predictions files: what ``swe-sandbox eval`` reads (SWE-bench's and mini-swe-agent's shapes).

Accepted, as the SWE-bench harness accepts them:

- ``preds.json`` as mini-swe-agent and ``swe-sandbox batch`` write it: ``{instance_id: {...}}``;
- a ``.json`` list of prediction objects;
- a ``.jsonl`` file, one prediction object a line.

A prediction has ``instance_id``, ``model_patch`` (a string; null or ``""`` is an empty patch) and
optionally ``model_name_or_path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swe_sandbox.batch.jsonfiles import jsonl_items, parse_json
from swe_sandbox.errors import TaskFileError

DEFAULT_MODEL_NAME = "unknown"


def load_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Read a predictions file.

    Returns:
        list[dict]: ``{"instance_id", "model_patch" (str or None), "model_name_or_path"}`` each.

    Raises:
        TaskFileError: (a ``ConfigError``) unreadable, not JSON (the message names the line), not
            one of the shapes above, a prediction without ``instance_id`` or with a ``model_patch``
            that is not a string, or the same ``instance_id`` twice.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"cannot read predictions file {path}: {exc}") from None
    items = _jsonl(text, path) if path.suffix == ".jsonl" else _json(text, path)
    seen: set[str] = set()
    preds = []
    for where, item in items:
        pred = _check(item, f"{path} {where}")
        if pred["instance_id"] in seen:
            raise TaskFileError(f"{path} {where}: instance_id: {pred['instance_id']!r} appears twice")
        seen.add(pred["instance_id"])
        preds.append(pred)
    return preds


def _json(text: str, path: Path) -> list[tuple[str, Any]]:
    data = parse_json(text, path)
    if isinstance(data, dict):
        return [(f"entry {key!r}", {"instance_id": key, **value} if isinstance(value, dict) else value)
                for key, value in data.items()]
    if isinstance(data, list):
        return [(f"item {i}", item) for i, item in enumerate(data, 1)]
    raise TaskFileError(f"{path}: expected {{instance_id: prediction}} or a list of predictions, "
                        f"got {type(data).__name__}")


def _jsonl(text: str, path: Path) -> list[tuple[str, Any]]:
    return [(f"line {number}", item) for number, item in jsonl_items(text, path)]


def _check(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: expected a prediction object, got {type(item).__name__}")
    instance_id = item.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        raise TaskFileError(f"{where}: instance_id: missing (required)")
    patch = item.get("model_patch")
    if patch is not None and not isinstance(patch, str):
        raise TaskFileError(f"{where}: model_patch: expected a string or null, got {type(patch).__name__}")
    name = item.get("model_name_or_path") or DEFAULT_MODEL_NAME
    return {"instance_id": instance_id, "model_patch": patch, "model_name_or_path": str(name)}
