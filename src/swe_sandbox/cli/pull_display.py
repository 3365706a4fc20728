"""Image pulls on the command line: a rich progress bar per image on a terminal, plain lines elsewhere.

    docker  127.0.0.1:5000/swebench/sweb.eval.x86_64.django_1776_django-11099  ━━━━━━╸━━━━  3/7 layers, 412.0 MB/1.1 GB  38.2 MB/s  0:00:11

``PullDisplay`` is a pull listener (``swe_sandbox.environments.container.pulling.report_pulls``): it shows each
pull from its first event to its end, then stops drawing once no pull is left, so the command's
own output never mixes with it. Not on a terminal (logs, CI) it writes one line when a pull starts
and one when it ends. Podman 4 reports no byte counts: its bar counts layers only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from swe_sandbox.environments.base import Environment
    from swe_sandbox.environments.container.pull_progress import PullProgress


class PullDisplay:
    """Shows the pulls it is told about (call it with a ``PullProgress``); thread-safe."""

    def __init__(self, console: Console | None = None):
        self._console = console  # default: stderr, made at the first pull (most commands pull nothing)
        self.lock = threading.Lock()
        self.bars: Any = None  # a rich Progress while a pull is shown on a terminal
        self.tasks: dict[tuple[str, str], Any] = {}
        self.started: dict[tuple[str, str], float] = {}

    @property
    def console(self) -> Console:
        """Where the pulls are shown: the console given, else a rich console on stderr."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)
        return self._console

    def __call__(self, progress: PullProgress) -> None:
        key = (progress.engine, progress.image)
        with self.lock:
            if key not in self.started:
                if progress.finished:
                    return  # a pull that ended before this display heard of it
                self.started[key] = time.monotonic()
                self._begin(key)
            if self.bars is not None:
                self.bars.update(self.tasks[key], **_bar(progress))
            if progress.finished:
                self._end(key, progress)

    def _begin(self, key: tuple[str, str]) -> None:
        engine, image = key
        if not self.console.is_terminal:
            self.console.print(f"{engine}: pulling {image}", markup=False)
            return
        if self.bars is None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bars = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[summary]}"),
                                 TimeElapsedColumn(), console=self.console, transient=False)
            self.bars.start()
        self.tasks[key] = self.bars.add_task(f"{engine}  {image}", total=None, summary="")

    def _end(self, key: tuple[str, str], progress: PullProgress) -> None:
        engine, image = key
        took = time.monotonic() - self.started.pop(key)
        outcome = "failed" if progress.failed else "pulled"
        if self.bars is None:
            self.console.print(f"{engine}: {outcome} {image} ({progress.summary()}) in {took:.1f} s", markup=False)
            return
        self.bars.update(self.tasks.pop(key), description=f"{engine}  {image}  {outcome}")
        if not self.tasks:
            self.bars.stop()
            self.bars = None


def _bar(progress: PullProgress) -> dict[str, Any]:
    """The bar's state: bytes when the engine counts them, else layers; full once pulled."""
    total = progress.bytes_total or len(progress.layers) or None
    completed = progress.bytes_done if progress.bytes_total else progress.layers_done
    if progress.finished and not progress.failed:
        total = completed = total or 1
    return {"total": total, "completed": completed, "summary": progress.summary()}


@contextmanager
def show_pulls(console: Console | None = None) -> Iterator[PullDisplay]:
    """Within this block (this thread), image pulls are shown on ``console`` (default: stderr)."""
    from swe_sandbox.environments.container.pulling import report_pulls

    display = PullDisplay(console)
    with report_pulls(display):
        yield display


def show_pulls_of(environment: Environment) -> AbstractContextManager[Any]:
    """``show_pulls()`` when ``environment`` may pull an image (its config has an ``image_pull``
    policy: docker, podman), else nothing: the pull machinery is not even imported."""
    return show_pulls() if hasattr(environment.config, "image_pull") else nullcontext()
