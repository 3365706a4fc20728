"""The container images of a task file: named by a template, grouped by image, pulls on instance lines.

``--image-template`` names the image of every task without ``image``: a Python format string over
the task's fields (those we use and every other one the file has, e.g. SWE-bench's ``repo`` or
``version``) plus ``instance_id_docker``, the instance id as SWE-bench's image names spell it
(``__`` becomes ``_1776_``, all lower case: ``swebench/image_builder/image_spec.py``, ``ImageSpec.name``),
so a SWE-bench export runs with
``--image-template 'docker.io/swebench/sweb.eval.x86_64.{instance_id_docker}:latest'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swe_sandbox.batch.tasks import TaskFileError
from swe_sandbox.environments.container.image_ref import check_reference

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.tasks import Task
    from swe_sandbox.environments.container.pull_progress import PullProgress

#: Docker Hub allows no ``__`` in names; SWE-bench's images spell it so.
DUNDER_REPLACEMENT = "_1776_"


def instance_id_docker(instance_id: str) -> str:
    """``django__django-11099`` -> ``django_1776_django-11099`` (lower case), as in SWE-bench's image names."""
    return instance_id.replace("__", DUNDER_REPLACEMENT).lower()


def apply_image_template(tasks: list[Task], template: str) -> None:
    """Set ``image`` of every task that has none to ``template`` formatted over its fields.

    Raises:
        TaskFileError: the template names a field a task does not have, or is not a format
            string (the message names the task's line).
    """
    for task in tasks:
        if task.image:
            continue
        fields = template_fields(task)
        try:
            image = template.format(**fields)
        except KeyError as exc:
            raise TaskFileError(f"task {task.instance_id!r} (line {task.source_line}): --image-template: no field "
                                f"{exc.args[0]!r} (fields: {', '.join(sorted(fields))})") from None
        except (ValueError, IndexError, AttributeError) as exc:
            raise TaskFileError(f"--image-template: not a format string over task fields: {exc}") from None
        try:
            task.image = check_reference(image)
        except ValueError as exc:
            where = f"task {task.instance_id!r} (line {task.source_line})"
            raise TaskFileError(f"{where}: --image-template: {exc}") from None


def images_of(tasks: list[Task], default: str = "") -> dict[str, list[str]]:
    """``{image: [instance_id, ...]}`` in task order; a task without ``image`` counts for ``default``."""
    found: dict[str, list[str]] = {}
    for task in tasks:
        image = task.image or default
        if image:
            found.setdefault(image, []).append(task.instance_id)
    return found


def pull_reporter(instance_id: str, report: Callable[..., None]) -> Callable[[PullProgress], None]:
    """A pull listener that shows an instance's image pull on its line of the batch's progress."""

    def listener(progress: PullProgress) -> None:
        if progress.finished:
            report(instance_id, phase="starting", detail="")
        else:
            report(instance_id, phase="pulling", detail=f"{progress.image}  {progress.summary()}")

    return listener


def template_fields(task: Task) -> dict[str, Any]:
    """What ``--image-template`` may name for ``task``: the fields its line has (not the defaults
    filled in for the others) and ``instance_id_docker``."""
    return {**task.model_dump(exclude_unset=True), "instance_id_docker": instance_id_docker(task.instance_id)}
