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


class SelectionError(ValueError):
    """An invalid ``--filter`` or ``--slice``.

    Attributes:
        option: the option at fault, as the command line spells it (``"--filter"``, ``"--slice"``).
    """

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


def load_task_file(path: Path, image_template: str | None = None, split: str | None = None) -> list[Task]:
    """The tasks of ``path`` (``load_dataset(path, split)``), ``image_template`` naming the image of
    each task that has none.

    Args:
        path: a task file (``.jsonl``, ``.json``, ``.parquet``) or a dataset directory.
        image_template: a format string over a task's fields (``apply_image_template``); None: none.
        split: with a dataset directory, the split to read. Default None.

    Returns:
        list[Task]: in file order.

    Raises:
        TaskFileError: the file does not load, or the template does not fit a task.
    """
    tasks = load_dataset(path, split)
    if image_template:
        apply_image_template(tasks, image_template)
    return tasks


def select_tasks(tasks: list[Task], filter_re: str | None = None, slice_spec: str | None = None,
                 shuffle: bool = False) -> list[Task]:
    """mini-swe-agent's selection: shuffle, then filter, then slice.

    Args:
        tasks: the loaded tasks (not changed).
        filter_re: a regular expression the instance id must ``re.match``; None or empty: every task.
        slice_spec: ``START:STOP[:STEP]`` of what is left, e.g. ``0:10``; None or empty: all of it.
        shuffle: shuffle first, with ``SHUFFLE_SEED``. Default False.

    Returns:
        list[Task]: the selected tasks, in the selection's order.

    Raises:
        SelectionError: ``filter_re`` is not a regular expression, or ``slice_spec`` not a slice.
    """
    selected = list(tasks)
    if shuffle:
        random.Random(SHUFFLE_SEED).shuffle(selected)
    if filter_re:
        try:
            pattern = re.compile(filter_re)
        except re.error as exc:
            raise SelectionError("--filter", f"not a regular expression: {exc}") from None
        selected = [t for t in selected if pattern.match(t.instance_id)]
    if slice_spec:
        selected = _sliced(selected, slice_spec)
    return selected


def _sliced(tasks: list[Task], slice_spec: str) -> list[Task]:
    try:
        parts = [int(p) if p.strip() else None for p in slice_spec.split(":")]
        sliced = tasks[slice(*parts)] if 1 <= len(parts) <= 3 and ":" in slice_spec else None
    except ValueError:
        sliced = None
    if sliced is None:
        raise SelectionError("--slice", f"expected START:STOP, e.g. 0:10; got {slice_spec!r}")
    return sliced


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
