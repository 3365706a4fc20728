"""``LiveProgress``: a batch's progress on a terminal, with rich (refreshed twice a second).

    ━━━━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━  12/30 done  resolved 7/12  $1.84  ETA 4m10s
    instance            phase       step   cost      last command
    pallets__jinja-3     running       7   $0.1210   python3 -m pytest tests/test_api.py -x
    pallets__jinja-4     pulling       0   $0.0000   127.0.0.1:5000/sweb.eval.x86_64.pallets_1776_jinja-4  2/5 layers, …
    Submitted 11 · LimitsExceeded 1

On Ray (``--ray``) each running instance's line starts with its node's short id, and a line gives
the slots in use per node (``slots in use: 3f2a9c1e 2 · 81b0d4aa 1``).

Every string that comes from a task, the sandbox, the model or a results file (ids, commands,
statuses, nodes) is shown as text, never as rich markup (``sed 's/[/]/_/'`` is a command, not a
closing tag), with its control characters escaped (``swe_sandbox.terminal``), so no escape
sequence reaches the terminal.

A display failure never takes the batch down: the first one stops the live display (a warning
says so, once) and the batch goes on, its events still counted.

``make_progress`` picks the display: this one on a terminal, ``progress.LineProgress`` elsewhere.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from swe_sandbox.batch.progress import BatchProgress, LineProgress, Tally
from swe_sandbox.batch.ray.settings import short_node
from swe_sandbox.terminal import escape_controls, is_terminal

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType
    from rich.text import Text

    from swe_sandbox.batch.records import AttemptRecord
    from swe_sandbox.batch.rollouts import RolloutResult

logger = logging.getLogger("swe_sandbox.batch")

#: Running instances shown at most (the rest are counted).
MAX_ROWS = 16
#: Characters of a running instance's last command shown on its line.
COMMAND_WIDTH = 60


def plain(value: Any, style: str = "") -> Text:
    """``value`` as rich ``Text`` (never parsed as markup), control characters escaped."""
    from rich.text import Text

    return Text(escape_controls(str(value)), style=style)


class LiveProgress(Tally):
    """Overall bar, one line per running instance, counts by exit status (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True, highlight=False)
        self.live = Live(console=self.console, get_renderable=self.render, refresh_per_second=2,
                         transient=False, redirect_stdout=False, redirect_stderr=False)
        self.failed = False

    def started(self, *, total: int, pending: int, finished: list[AttemptRecord]) -> None:
        super().started(total=total, pending=pending, finished=finished)
        self._shielded(self.live.start)

    def finished(self, record: AttemptRecord | None, result: RolloutResult) -> None:
        super().finished(record, result)
        if record is not None and not record.done:
            line = plain(result.label, "yellow") + plain(
                f": {record.exit_status} (infrastructure failure, attempt {record.attempt})")
            self._shielded(lambda: self.live.console.print(line, highlight=False))

    def stopped(self) -> None:
        self._shielded(self.live.stop)

    def _shielded(self, call: Any) -> None:
        """``call()``, unless the display failed before; a failure stops the display, never the batch."""
        if self.failed:
            return
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - whatever broke the display, the batch goes on
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        self.failed = True
        logger.warning("the live display failed (%s: %s); the batch goes on without it",
                       type(exc).__name__, escape_controls(str(exc)))
        try:
            self.live.stop()
        except Exception:  # noqa: BLE001 - it is already broken
            pass

    def render(self) -> Any:
        """The display (rich calls it from its refresh thread); a failure shows one line instead."""
        try:
            return self._render()
        except Exception as exc:  # noqa: BLE001 - the refresh thread must not die
            return plain(f"(display error: {type(exc).__name__}: {exc})", "red")

    def _render(self) -> RenderableType:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        with self.lock:
            headline, rows = self.headline(), sorted(self.running.items())
            statuses = " · ".join(f"{k} {v}" for k, v in self.statuses.most_common())
            slots = " · ".join(f"{node} {n}" for node, n in sorted(self.slots_in_use().items()))
            done, total = self.done, self.total
        bar = Table.grid(padding=(0, 2))
        bar.add_row(ProgressBar(total=max(total, 1), completed=done, width=40), plain(headline))
        table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
        for column in ("instance", "phase", "step", "cost", "last command"):
            table.add_column(column, no_wrap=True, justify="right" if column in ("step", "cost") else "left")
        for instance_id, info in rows[:MAX_ROWS]:
            table.add_row(*self._row(instance_id, info))
        parts: list[RenderableType] = [bar, table] if rows else [bar]
        if len(rows) > MAX_ROWS:
            parts.append(plain(f"… and {len(rows) - MAX_ROWS} more running", "dim"))
        if slots:
            parts.append(plain(f"slots in use: {slots}", "dim"))
        if statuses:
            parts.append(plain(statuses, "dim"))
        return Group(*parts)

    @staticmethod
    def _row(instance_id: str, info: dict[str, Any]) -> tuple[Text, ...]:
        text = info.get("detail") or info.get("command")  # detail: an image pull under way
        command = escape_controls(str(text).strip().splitlines()[0] if str(text or "").strip() else "")
        if len(command) > COMMAND_WIDTH:
            command = command[: COMMAND_WIDTH - 1] + "…"
        elapsed = time.monotonic() - info.get("since", time.monotonic())
        node = f"{short_node(info['ray_node'])} " if info.get("ray_node") else ""
        return (plain(f"{node}{instance_id}"), plain(f"{info.get('phase', '')} {elapsed:.0f}s"),
                plain(info.get("step", "")), plain(f"${float(info.get('cost', 0.0)):.4f}"), plain(command))


def make_progress(console_stream: TextIO | None = None) -> BatchProgress:
    """``LiveProgress`` when ``console_stream`` (default stderr) is a terminal, else ``LineProgress``."""
    stream = console_stream or sys.stderr
    return LiveProgress() if is_terminal(stream) else LineProgress(stream)
