"""``swe-sandbox check``: is each backend usable here? A self-check of each.

The checks are ``swe_sandbox.testing.selfcheck``; this module parses and renders. Only typer and the
standard library at the top; the backends and rich load inside the command.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from swe_sandbox.cli.exit_codes import EXIT_FAILED, EXIT_OK
from swe_sandbox.cli.guard import run_guarded

CHECK_HELP = """\
Check whether each backend (or only --env NAME) is usable here, and self-test it.

For each backend: can it run on this host (and if not, why), what it isolates, and a quick self
check: start it, run `echo ok`, a 1-second timeout on `sleep 5` (must return within 2 s, timed
out), and the round trip of `true`. A backend that cannot start with the given config (e.g. -c
environment.bwrap_path=/nonexistent) is shown as not usable. Exit status 1 when the named backend,
or without --env any built-in backend, fails; 2 for an unknown backend or a config error. A
backend that needs a target (ssh: a host) is not counted without --env: check it with
--env FILE (a YAML config naming the host) or --env ssh -c environment.host=...
"""

app = typer.Typer()


@app.command("check", help=CHECK_HELP)
def check_command(
    env: Annotated[
        str | None,
        typer.Option("--env", "-e", metavar="NAME",
                     help="Check only this backend (or preset / YAML file); default: every backend."),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("-c", "--set", metavar="KEY=VALUE",
                     help="Config override for the --env backend, repeatable, e.g. "
                          "-c environment.bwrap_path=/usr/bin/bwrap (as for exec). Needs --env."),
    ] = None,
) -> None:
    if overrides and env is None:
        raise typer.BadParameter("needs --env NAME (the backend the overrides are for)", param_hint="'-c'")
    def body() -> int:
        from swe_sandbox.testing.selfcheck import check_backend, check_plan

        targets = check_plan(env)
        rows = [(check_backend(name, spec, list(overrides or []), raise_config_errors=env is not None), required)
                for name, spec, required in targets]
        render_check(rows)
        failed = [row["backend"] for row, required in rows if required and not row["ok"]]
        return EXIT_FAILED if failed else EXIT_OK

    raise typer.Exit(run_guarded(body))


def render_check(rows: list[tuple[dict[str, Any], bool]]) -> None:
    """Print the check's table (rich), the ``local`` warning, and one line per failed backend."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from swe_sandbox.testing.selfcheck import NEEDS_TARGET, not_counted_label

    console = Console(highlight=False)
    table = Table(title="swe-sandbox check", show_lines=True)
    table.add_column("Backend", no_wrap=True)
    table.add_column("Usable here", overflow="fold")
    table.add_column("Isolation", overflow="fold")
    table.add_column("Allow-list", no_wrap=True)
    table.add_column("Self-check", overflow="fold")
    table.add_column("Result", no_wrap=True)
    for row, required in rows:
        name = row["backend"] + ("" if required else f"\n({not_counted_label(row['backend'])})")
        why = row.get("reason") or "; ".join(text for good, text in row["steps"] if not good) or "(no reason given)"
        usable = Text("yes", style="green") if row["usable"] else Text("no: " + why, style="red")
        if row["backend"] == "local":
            isolation = Text("NO ISOLATION: " + row["isolation"].removeprefix("none:").strip(), style="bold red")
        else:
            isolation = Text(row["isolation"])
        checks = Text()
        for i, (good, text) in enumerate(row["steps"]):
            checks.append(("" if i == 0 else "\n") + ("ok   " if good else "FAIL ") + text,
                          style=None if good else "red")
        result = Text("PASS", style="bold green") if row["ok"] else Text("FAIL", style="bold red")
        can, _ = row.get("allowlist") or (False, "")
        allowlist = Text("-") if not row["usable"] else Text("yes", style="green") if can else \
            Text("no", style="yellow")
        table.add_row(name, usable, isolation, allowlist, checks or Text("-"), result)
    console.print(table)
    if any(row["backend"] == "local" for row, _ in rows):
        console.print(Text(
            "WARNING: the 'local' backend has NO ISOLATION: commands run directly on this host, as you, "
            "with your files, credentials and network. Use it only for commands you trust.",
            style="bold red"))
    lacking = [(row["backend"], row["allowlist"][1]) for row, _ in rows
               if row["usable"] and "allowlist" in row and not row["allowlist"][0]]
    for backend, why in lacking:
        console.print(f"{backend}: network: allowlist {why}")
    for row, required in rows:
        if not row["ok"]:
            why = row.get("reason") or "; ".join(text for good, text in row["steps"] if not good)
            label = not_counted_label(row["backend"])
            note = "" if required else (" (not counted: check it with --env FILE naming its target)"
                                        if label == NEEDS_TARGET else f" ({label}: not counted)")
            console.print(f"{row['backend']}: FAIL: {why}{note}")
