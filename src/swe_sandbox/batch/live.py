"""``LiveProgress``: a batch's progress on a terminal, with rich (refreshed twice a second).

    ━━━━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━  12/30 done  resolved 7/12  $1.84  ETA 4m10s
    instance            phase       step   cost      last command
    pallets__jinja-3     running       7   $0.1210   python3 -m pytest tests/test_api.py -x
    pallets__jinja-4     pulling       0   $0.0000   127.0.0.1:5000/sweb.eval.x86_64.pallets_1776_jinja-4  2/5 layers, …
    Submitted 11 · LimitsExceeded 1

On Ray (``--ray``) each running instance's line starts with its node's short id, and a line gives
the slots in use per node (``slots in use: 3f2a9c1e 2 · 81b0d4aa 1``).

Text that comes from the sandbox or the model (commands) is shown with its control characters
escaped (``swe_sandbox.terminal``), so no escape sequence reaches the terminal.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from swe_sandbox.batch.progress import COMMAND_WIDTH, Tally

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from swe_sandbox.batch.records import AttemptRecord
    from swe_sandbox.batch.rollouts import RolloutResult

#: Running instances shown at most (the rest are counted).
MAX_ROWS = 16


class LiveProgress(Tally):
    """Overall bar, one line per running instance, counts by exit status (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True, highlight=False)
        self.live = Live(console=self.console, get_renderable=self.render, refresh_per_second=2,
                         transient=False, redirect_stdout=False, redirect_stderr=False)

    def started(self, *, total: int, pending: int, finished: list[AttemptRecord]) -> None:
        super().started(total=total, pending=pending, finished=finished)
        self.live.start()

    def finished(self, record: AttemptRecord | None, result: RolloutResult) -> None:
        super().finished(record, result)
        if record is not None and not record.done:
            self.live.console.print(f"[yellow]{result.instance_id}[/]: {record.exit_status} (infrastructure "
                                    f"failure, attempt {record.attempt})", markup=True, highlight=False)

    def stopped(self) -> None:
        self.live.stop()

    def render(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            headline, rows = self.headline(), sorted(self.running.items())
            statuses = " · ".join(f"{k} {v}" for k, v in self.statuses.most_common())
            slots = " · ".join(f"{node} {n}" for node, n in sorted(self.slots_in_use().items()))
            done, total = self.done, self.total
        bar = Table.grid(padding=(0, 2))
        bar.add_row(ProgressBar(total=max(total, 1), completed=done, width=40), Text(headline))
        table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
        for column in ("instance", "phase", "step", "cost", "last command"):
            table.add_column(column, no_wrap=True, justify="right" if column in ("step", "cost") else "left")
        for instance_id, info in rows[:MAX_ROWS]:
            table.add_row(*self._row(instance_id, info))
        parts: list[RenderableType] = [bar, table] if rows else [bar]
        if len(rows) > MAX_ROWS:
            parts.append(Text(f"… and {len(rows) - MAX_ROWS} more running", style="dim"))
        if slots:
            parts.append(Text(f"slots in use: {slots}", style="dim"))
        if statuses:
            parts.append(Text(statuses, style="dim"))
        return Group(*parts)

    @staticmethod
    def _row(instance_id: str, info: dict[str, Any]) -> tuple[str, ...]:
        from swe_sandbox.terminal import escape_controls

        text = info.get("detail") or info.get("command")  # detail: an image pull under way
        command = escape_controls(str(text).strip().splitlines()[0] if text else "")
        if len(command) > COMMAND_WIDTH:
            command = command[: COMMAND_WIDTH - 1] + "…"
        from swe_sandbox.batch.ray.settings import short_node

        elapsed = time.monotonic() - info.get("since", time.monotonic())
        node = f"{short_node(info['ray_node'])} " if info.get("ray_node") else ""
        return (f"{node}{instance_id}", f"{info.get('phase', '')} {elapsed:.0f}s", str(info.get("step", "")),
                f"${float(info.get('cost', 0.0)):.4f}", command)
