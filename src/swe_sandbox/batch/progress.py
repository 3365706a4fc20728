"""Progress of a batch: what the driver reports, and its plain-lines display.

``BatchProgress`` receives the events (its methods do nothing); ``Tally`` counts them;
``LineProgress`` (not a terminal: CI logs) prints one plain line per finished attempt, control
characters escaped (``swe_sandbox.terminal``). The live display of a terminal is
``swe_sandbox.batch.live.LiveProgress`` (``live.make_progress`` picks one). ``update`` is called
from the rollouts' threads; every method is thread-safe.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

from swe_sandbox.batch.ray.settings import short_node
from swe_sandbox.terminal import escape_controls

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.records import AttemptRecord
    from swe_sandbox.batch.rollouts import RolloutResult

class BatchProgress:
    """Receives a batch's events; shows nothing. Subclass it for another display."""

    def started(self, *, total: int, pending: int, finished: list[AttemptRecord]) -> None:
        """The batch starts: ``total`` instances, ``pending`` to run, ``finished``: done before."""

    def update(self, instance_id: str, **fields: Any) -> None:
        """A running instance's news: ``phase``, ``step``, ``cost`` (USD), ``command``; ``detail``
        (shown instead of the command while not empty): the image pull under way; on Ray also
        ``node`` (host name) and ``ray_node`` (the Ray node id) of where it runs."""

    def finished(self, record: AttemptRecord | None, result: RolloutResult) -> None:
        """An attempt ended (``record`` None: interrupted, not recorded)."""

    def stopped(self) -> None:
        """The batch ended (or was interrupted)."""


class Tally(BatchProgress):
    """Counts shared by the displays: done, resolved, cost, exit statuses, running instances."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = self.done = self.resolved = self.evaluated = 0
        self.cost = 0.0
        self.statuses: Counter[str] = Counter()
        self.running: dict[str, dict[str, Any]] = {}
        self.start_time = time.monotonic()
        self.done_this_run = 0

    def started(self, *, total: int, pending: int, finished: list[AttemptRecord]) -> None:
        with self.lock:
            self.total = total
            for record in finished:
                self._count(record)

    def _count(self, record: AttemptRecord) -> None:
        if record.eval_only:  # the evaluation of an instance already counted done: only its verdict
            self.resolved += bool(record.resolved)
            self.evaluated += record.eval_status is not None
            return
        if record.done:
            self.done += 1
            self.resolved += bool(record.resolved)
            self.evaluated += record.eval_status is not None
        self.statuses[record.exit_status] += 1
        self.cost += record.cost

    def update(self, instance_id: str, **fields: Any) -> None:
        with self.lock:
            self.running.setdefault(instance_id, {"since": time.monotonic()}).update(fields)

    def finished(self, record: AttemptRecord | None, result: RolloutResult) -> None:
        with self.lock:
            for key in [k for k in self.running if _covers(k, result)]:
                del self.running[key]
            if record is not None:
                self._count(record)
                self.done_this_run += record.done

    def slots_in_use(self) -> Counter[str]:
        """Running instances per Ray node (short id), for those that reported one. Call with ``lock`` held."""
        return Counter(short_node(info["ray_node"]) for info in self.running.values() if info.get("ray_node"))

    def eta_s(self) -> float | None:
        """Seconds left at this run's pace so far; None before the first instance is done."""
        if not self.done_this_run:
            return None
        pace = (time.monotonic() - self.start_time) / self.done_this_run
        return pace * max(0, self.total - self.done)

    def headline(self) -> str:
        eta = self.eta_s()
        rate = f"  resolved {self.resolved}/{self.evaluated}" if self.evaluated else ""
        return (f"{self.done}/{self.total} done{rate}  ${self.cost:.2f}"
                f"{f'  ETA {_duration(eta)}' if eta is not None else ''}")


def _covers(key: str, result: RolloutResult) -> bool:
    """Whether the running ``key`` is ``result``'s: its label, or (a group's samples run as one
    unit on Ray: ``id/0,1``) a unit holding its sample."""
    if key == result.label:
        return True
    instance_id, _, samples = key.partition("/")
    return instance_id == result.instance_id and str(result.sample) in samples.split(",")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class LineProgress(Tally):
    """One plain line per finished attempt on ``stream`` (default stderr): for logs, not terminals."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream: TextIO | None = stream or sys.stderr

    def started(self, *, total: int, pending: int, finished: list[AttemptRecord]) -> None:
        super().started(total=total, pending=pending, finished=finished)
        self._print(f"batch: {total} instances, {pending} to run, {self.done} done before")

    def finished(self, record: AttemptRecord | None, result: RolloutResult) -> None:
        super().finished(record, result)
        if record is None:
            self._print(f"{result.label}: interrupted (runs again on resume)")
            return
        verdict = f" eval={record.eval_status}" if record.eval_status else ""
        again = "" if record.done else " (infrastructure failure: not done)"
        where = f" on node {short_node(record.ray_node)}" if record.ray_node else ""
        self._print(f"{record.label}: {record.exit_status}{verdict} ${record.cost:.4f} "
                    f"{record.steps} steps {record.duration_s:.1f}s attempt {record.attempt}{where}{again}"
                    f"  [{self.headline()}]")

    def _print(self, line: str) -> None:
        """Print ``line``; once the stream fails (a closed pipe: ``| head``), print nothing more: a
        display failure never stops the batch."""
        with self.lock:
            if self.stream is None:
                return
            try:
                print(escape_controls(line), file=self.stream, flush=True)
            except (OSError, ValueError):  # EPIPE, a closed file
                self.stream = None
