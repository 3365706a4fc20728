"""What ``run`` and ``demo`` show: each step's query and result, the approval prompt, the summary.

rich is imported inside each function (``swe_sandbox.terminal`` escapes what the sandbox or the
model wrote, so no escape sequence reaches the terminal).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swe_sandbox.redact import redact
from swe_sandbox.terminal import escape_controls, has_controls

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

#: Submissions longer than this many lines are shown cut (the file has all of it).
SHOW_LINES = 60
#: Characters of a streamed line held back waiting for its end at most; past it, shown as it is.
STREAM_LINE_LIMIT = 4096


def make_cli_agent(model: Any, env: Any, console: Console, *, confirm: bool = False, stream: bool | None = None,
                   **config: Any):
    """A ``DefaultAgent`` that shows progress on ``console`` and, with ``confirm``, asks before each command.

    Args:
        stream (bool | None): show each command's output as it arrives (``env.stream``, when the
            environment has one); None (default): when ``console`` is a terminal (a live display).
    """
    from swe_sandbox.agent.default import ActionRejected, DefaultAgent

    live = console.is_terminal if stream is None else stream

    class CliAgent(DefaultAgent):
        streamed = False

        def on_query(self, message: dict[str, Any]) -> None:
            show_query(console, self.n_steps, self.model_cost, message, secrets=self.known_secrets())

        def run_command(self, action: dict[str, Any], **timeout_kwargs: Any) -> dict[str, Any]:
            events = getattr(self.env, "stream", None)
            if not live or not callable(events):
                return super().run_command(action, **timeout_kwargs)
            self.streamed = True
            show_command(console, action, secrets=self.known_secrets())
            return show_stream(console, events(action, **timeout_kwargs), secrets=self.known_secrets())

        def on_result(self, action: dict[str, Any], result: dict[str, Any]) -> None:
            show_result(console, action, result, secrets=self.known_secrets(), command_shown=self.streamed)
            self.streamed = False

        def approve(self, action: dict[str, Any]) -> dict[str, Any]:
            nonlocal confirm
            if not confirm:
                return action
            answer, value = ask_approval(console, action["command"])  # unmasked: the user approves what runs
            if answer == "all":
                confirm = False
            if answer == "reject":
                raise ActionRejected(value)
            if answer == "edit":
                return {**action, "command": value}
            return action

    return CliAgent(model, env, **config)


def warn(console: Console, text: str) -> None:
    """``warning: TEXT`` on one line of ``console``, control characters escaped."""
    from rich.text import Text


    console.print(Text("warning: ", style="yellow") + Text(escape_controls(text)), soft_wrap=True)


def show_query(console: Console, step: int, cost: float, message: dict[str, Any],
               secrets: Iterable[str] = ()) -> None:
    """One header line per step, and the model's text (cut to a few lines), secrets masked, control
    characters escaped (no escape sequence reaches the terminal: ``swe_sandbox.terminal``)."""
    from rich.text import Text


    console.rule(Text(f"step {step}  ·  ${cost:.4f}", style="bold"), align="left")
    content = redact(message.get("content"), secrets)
    if isinstance(content, str) and content.strip():
        lines = content.strip().splitlines()
        shown = "\n".join(lines[:6]) + (f"\n… ({len(lines) - 6} more lines)" if len(lines) > 6 else "")
        console.print(Text(escape_controls(shown), style="dim"))


def show_command(console: Console, action: dict[str, Any], secrets: Iterable[str] = ()) -> None:
    """The command: its first lines, secrets masked, control characters escaped."""
    from rich.text import Text

    lines = escape_controls(redact(str(action.get("command", "")), secrets)).splitlines() or [""]
    command = "\n  ".join(lines[:4]) + (f"\n  … ({len(lines) - 4} more lines)" if len(lines) > 4 else "")
    console.print(Text("$ ", style="bold cyan") + Text(command))


def show_stream(console: Console, events: Generator[Any, None, None], secrets: Iterable[str] = ()) -> dict[str, Any]:
    """Show a command's output as it arrives, line by line (each complete line with secrets masked
    and control characters escaped: a model-written command's output cannot drive the terminal),
    the last partial line once it ends; return the result dict of the stream's last event.

    Args:
        events: ``Environment.stream(...)``'s generator (closed here, whatever happens).

    Raises:
        Submitted: the command submitted (its output was shown). What ``Environment.stream`` raises.
    """
    import contextlib

    from rich.text import Text

    secrets, pending, open_line = list(secrets), "", False

    def show(text: str) -> None:
        if text:
            console.print(Text(escape_controls(redact(text, secrets)), style="dim"), end="", soft_wrap=True)

    try:
        with contextlib.closing(events):
            for event in events:
                if event.done:
                    return event.result
                lines = (pending + event.text).split("\n")
                pending = lines.pop()
                show("".join(line + "\n" for line in lines))
                open_line = open_line and not lines
                if len(pending) > STREAM_LINE_LIMIT:  # a line without end (a progress bar): shown as it goes
                    show(pending)
                    pending, open_line = "", True
    finally:
        show(pending + "\n" if pending or open_line else "")
    raise RuntimeError("the stream ended without a result")  # pragma: no cover - the contract forbids it


def show_result(console: Console, action: dict[str, Any], result: dict[str, Any],
                secrets: Iterable[str] = (), command_shown: bool = False) -> None:
    """The command (unless ``command_shown``: it was, before its streamed output) and how it
    ended: return code, duration, timeout, rejection."""
    from rich.text import Text

    if not command_shown:
        show_command(console, action, secrets)
    extra = result.get("extra") or {}
    code = result.get("returncode")
    if extra.get("rejected"):
        status = Text("  rejected", style="yellow")
    elif extra.get("not_run"):
        status = Text("  not run", style="yellow")
    else:
        style = "green" if code == 0 else "red"
        status = Text(f"  → returncode {code}", style=style)
        status.append(f"  ({float(extra.get('duration_s') or 0):.2f} s)", style="dim")
        if extra.get("timed_out"):
            status.append("  timed out", style="bold red")
        if extra.get("truncated"):
            status.append("  output truncated", style="yellow")
    console.print(status)


def ask_approval(console: Console, command: str) -> tuple[str, str]:
    """Ask whether to run ``command``: ``("run", "")``, ``("all", "")``, ``("reject", reason)`` or ``("edit", new)``.

    The command is shown as it will run (secrets included: the user approves exactly that), its
    control characters escaped (as ``\\x1b``: visible, and inert on the terminal)."""
    from rich.markup import escape
    from rich.prompt import Prompt
    from rich.syntax import Syntax


    console.print(Syntax(escape_controls(command), "bash", word_wrap=True))
    choice = Prompt.ask(escape("Run it? [y]es / [n]o / [e]dit / [a]ll (stop asking)"), choices=["y", "n", "e", "a"],
                        default="y", console=console, show_choices=False)
    if choice == "n":
        return "reject", Prompt.ask("Reason (told to the model)", default="", console=console)
    if choice == "e":
        if "\n" in command or has_controls(command):  # the prompt would show its default raw
            import click  # typer >= 0.29 vendors its click and no longer exports edit()

            edited = click.edit(command, require_save=False)
            new = (edited or command).rstrip("\n")
        else:
            new = Prompt.ask("Command", default=command, console=console)
        return "edit", new
    return ("all" if choice == "a" else "run"), ""


def show_summary(console: Console, status: str, submission: str, output: Path) -> None:
    """The last lines of a run: exit status, where the trajectory and submission are, the submission
    (its control characters escaped; the file holds it exactly)."""
    from rich.text import Text

    from swe_sandbox.preflight import submission_path

    console.rule(Text("done", style="bold"), align="left")
    style = "bold green" if status == "Submitted" else "bold red"
    console.print(Text("exit status: ", style="bold") + Text(escape_controls(status), style=style))
    console.print(Text(escape_controls(f"trajectory:  {output}")))
    if status != "Submitted":
        return
    lines = submission.splitlines()
    console.print(Text(escape_controls(f"submission:  {submission_path(output)}  ({len(lines)} lines)")))
    shown = "\n".join(lines[:SHOW_LINES])
    if shown:
        console.print(Text(escape_controls(shown)))
    if len(lines) > SHOW_LINES:
        console.print(Text(f"… ({len(lines) - SHOW_LINES} more lines in the file)"))


def progress_console() -> Console:
    """Where progress goes: stderr (stdout stays for the summary and the submission)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def progress_console_stdout() -> Console:
    """Where the summary goes: stdout."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)
