"""Which tasks a run takes: a task file loaded (images named by a template), then selected.

The selection is mini-swe-agent's: shuffle (seed ``SHUFFLE_SEED``), then ``--filter`` (``re.match``
on the instance id), then ``--slice A:B`` (a Python slice of what is left). ``swe-sandbox batch``
parses the options; the rules are here.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from swe_sandbox.batch.images import apply_image_template
from swe_sandbox.batch.tasks import Task, load_dataset

#: mini-swe-agent's seed, so ``--shuffle`` picks the same order.
SHUFFLE_SEED = 42


def load_task_file(path: Path, image_template: str | None = None, split: str | None = None,
                   allow_workspace_outside: bool = False) -> list[Task]:
    """The tasks of ``path`` (``load_dataset(path, split)``), ``image_template`` naming the image of
    each task that has none.

    Args:
        path: a task file (``.jsonl``, ``.json``, ``.parquet``) or a dataset directory.
        image_template: a format string over a task's fields (``apply_image_template``); None: none.
        split: with a dataset directory, the split to read. Default None.
        allow_workspace_outside: accept a task ``workspace`` outside the task file's directory
            (``load_dataset``). Default False.

    Returns:
        list[Task]: in file order.

    Raises:
        TaskFileError: the file does not load, or the template does not fit a task.
    """
    tasks = load_dataset(path, split, allow_workspace_outside=allow_workspace_outside)
    if image_template:
        apply_image_template(tasks, image_template)
    return tasks


def filter_pattern(filter_re: str) -> re.Pattern[str]:
    """``--filter``'s regular expression, compiled.

    Args:
        filter_re: the expression (matched with ``re.match``: from the id's start).

    Returns:
        re.Pattern[str]: the compiled expression.

    Raises:
        ValueError: not a regular expression (the message says why).
    """
    try:
        return re.compile(filter_re)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None


def parse_slice(slice_spec: str) -> slice:
    """``--slice``'s ``START:STOP[:STEP]`` as a slice (each part may be empty).

    Args:
        slice_spec: e.g. ``0:10``, ``5:``, ``::2``.

    Returns:
        slice: the Python slice.

    Raises:
        ValueError: no ``:``, more than three parts, a part that is not an integer, or a step of 0.
    """
    parts = slice_spec.split(":")
    try:
        numbers = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        numbers = []
    if not 2 <= len(parts) <= 3 or len(numbers) != len(parts) or (len(numbers) == 3 and numbers[2] == 0):
        raise ValueError(f"expected START:STOP, e.g. 0:10; got {slice_spec!r}")
    return slice(*numbers)


def select_tasks(tasks: list[Task], pattern: re.Pattern[str] | None = None, window: slice | None = None,
                 shuffle: bool = False) -> list[Task]:
    """mini-swe-agent's selection: shuffle, then filter, then slice.

    Args:
        tasks: the loaded tasks (not changed).
        pattern: the instance id must ``re.match`` it (``filter_pattern``); None: every task.
        window: the part of what is left to keep (``parse_slice``); None: all of it.
        shuffle: shuffle first, with ``SHUFFLE_SEED``. Default False.

    Returns:
        list[Task]: the selected tasks, in the selection's order.
    """
    selected = list(tasks)
    if shuffle:
        random.Random(SHUFFLE_SEED).shuffle(selected)
    if pattern is not None:
        selected = [t for t in selected if pattern.match(t.instance_id)]
    if window is not None:
        selected = selected[window]
    return selected


def predicted_tasks(tasks: Iterable[Task], predictions: Iterable[Mapping[str, Any]]) -> list[Task]:
    """The tasks an evaluation runs: those with a prediction.

    Args:
        tasks: the loaded tasks.
        predictions: SWE-bench predictions (each with ``instance_id``).

    Returns:
        list[Task]: in task order.
    """
    ids = {p["instance_id"] for p in predictions}
    return [t for t in tasks if t.instance_id in ids]
