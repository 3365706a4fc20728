"""``swe-sandbox check``: is each backend usable here? A self-check of each.

Only typer and the standard library at the top; the backends and rich load inside the command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from swe_sandbox.cli.exit_codes import EXIT_FAILED, EXIT_OK
from swe_sandbox.cli.guard import one_line, run_guarded

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.environments.base import Environment

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

TIMEOUT_CHECK_LIMIT_S = 2.0
ROUND_TRIPS = 20


def _check_backend(name: str, spec: Any, overrides: list[str] | None = None, *,
                   raise_config_errors: bool = False) -> dict[str, Any]:
    """Self-check one backend; a failure is reported in the returned row.

    "Usable" means the backend can run here *with this config*: a sandbox that does not start
    because of ``BackendUnavailable`` (e.g. ``bwrap_path`` names no binary) is not usable.

    Returns:
        dict: ``backend``, ``usable`` (bool), ``isolation``, ``steps`` (``[(good, text)]``), ``ok``
        (bool), and ``reason`` when it is not usable.

    Raises:
        ConfigError: only with ``raise_config_errors`` (the config or ``overrides`` are invalid);
            otherwise a config error is the row's reason.
    """
    from swe_sandbox import get_environment
    from swe_sandbox.environments import environment_class
    from swe_sandbox.errors import ConfigError

    row: dict[str, Any] = {"backend": name, "usable": False, "isolation": "", "steps": [], "ok": False}
    try:
        cls = environment_class(name)
    except Exception as exc:  # a plugin that does not import
        row["reason"] = f"cannot load backend: {type(exc).__name__}: {one_line(str(exc))}"
        return row
    row["isolation"] = getattr(cls, "isolation", "") or "(not stated)"
    try:
        reason = cls.unavailable_reason()
    except Exception as exc:
        reason = f"unavailable_reason() failed: {type(exc).__name__}: {exc}"
    if reason:
        row["reason"] = one_line(reason)
        return row
    try:
        environment = get_environment(spec, overrides=list(overrides or []))
    except ConfigError as exc:
        if raise_config_errors:
            raise
        row["reason"] = "config error: " + one_line(str(exc).removeprefix("invalid config:"))
        return row
    except Exception as exc:
        row["reason"] = f"{type(exc).__name__}: {one_line(str(exc))}"
        return row
    row["isolation"] = getattr(environment, "isolation", "") or row["isolation"]  # per config (ssh + bwrap)
    _self_check(environment, row)
    row["ok"] = bool(row["steps"]) and all(good for good, _ in row["steps"])
    return row


def _self_check(environment: Environment, row: dict[str, Any]) -> None:
    """Start ``environment``, run the checks into ``row["steps"]``, close it; set ``usable`` / ``reason``."""
    import time

    from swe_sandbox.errors import BackendUnavailable

    steps = row["steps"]
    try:
        t0 = time.perf_counter()
        try:
            environment.start()
        except BackendUnavailable as exc:  # not usable with this config (e.g. no such bwrap_path)
            row["reason"] = one_line(str(exc)) or "BackendUnavailable"
            return
        row["usable"] = True
        steps.append((True, f"start {1000 * (time.perf_counter() - t0):.0f} ms"))
        for step in (_echo_step, _timeout_step, _round_trip_step):
            steps.append(step(environment))
    except Exception as exc:
        problem = f"{type(exc).__name__}: {one_line(str(exc))}".rstrip(": ")
        steps.append((False, problem))
        if not row["usable"]:  # it failed to start: that is why it is not usable
            row["reason"] = problem
    finally:
        try:
            environment.close()
        except Exception as exc:
            steps.append((False, f"close failed: {type(exc).__name__}: {one_line(str(exc))}"))


def _echo_step(environment: Environment) -> tuple[bool, str]:
    """``echo ok`` prints ``ok`` and exits 0."""
    r = environment.execute({"command": "echo ok"}, timeout=30)
    good = r["returncode"] == 0 and r["output"] == "ok\n"
    return good, "echo ok" if good else f"echo ok: got {r['output']!r}, returncode {r['returncode']}"


def _timeout_step(environment: Environment) -> tuple[bool, str]:
    """A 1-second timeout on ``sleep 5`` returns, timed out, within ``TIMEOUT_CHECK_LIMIT_S``."""
    import time

    t0 = time.perf_counter()
    r = environment.execute({"command": "sleep 5"}, timeout=1)
    took = time.perf_counter() - t0
    good = bool(r["extra"].get("timed_out")) and r["returncode"] == -1 and took <= TIMEOUT_CHECK_LIMIT_S
    return good, f"1 s timeout on sleep 5: back in {took:.2f} s" + ("" if r["extra"].get("timed_out")
                                                                   else ", NOT timed out")


def _round_trip_step(environment: Environment) -> tuple[bool, str]:
    """``ROUND_TRIPS`` runs of ``true`` (after two warm-up runs) all exit 0; their median time."""
    import statistics
    import time

    times = []
    codes = set()
    for _ in range(ROUND_TRIPS + 2):
        t0 = time.perf_counter()
        codes.add(environment.execute({"command": "true"}, timeout=30)["returncode"])
        times.append(time.perf_counter() - t0)
    median = statistics.median(times[2:])  # first two: warm-up
    return codes == {0}, f"`true` round trip {1000 * median:.1f} ms (median)"


def needs_target(name: str) -> bool:
    """Whether backend ``name`` cannot run without being told where (``Environment.needs_target``)."""
    from swe_sandbox.environments import environment_class

    try:
        return bool(getattr(environment_class(name), "needs_target", False))
    except Exception:  # noqa: BLE001 - a plugin that does not import is reported by _check_backend
        return False


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
    def plan() -> list[tuple[str, Any, bool]]:
        """(backend name, config spec, required to pass) for each backend to check."""
        from swe_sandbox.config import load_environment_config, preset_names
        from swe_sandbox.environments import BACKENDS, backend_names

        presets = set(preset_names())

        def spec_for(name: str) -> Any:
            return name if name in presets else {"backend": name}

        if env is None:  # plugins, and backends that need a target (ssh: a host), are shown, not counted
            return [(name, spec_for(name), name in BACKENDS and not needs_target(name)) for name in backend_names()]
        if env in backend_names():
            return [(env, spec_for(env), True)]
        data = load_environment_config(env)  # a preset or file; ConfigError if neither
        if "backend" not in data:
            from swe_sandbox.errors import ConfigError

            raise ConfigError(f"environment.backend: missing in {env}")
        return [(str(data["backend"]), env, True)]

    def body() -> int:
        targets = plan()
        rows = [(_check_backend(name, spec, list(overrides or []), raise_config_errors=env is not None), required)
                for name, spec, required in targets]
        render_check(rows)
        failed = [row["backend"] for row, required in rows if required and not row["ok"]]
        return EXIT_FAILED if failed else EXIT_OK

    raise typer.Exit(run_guarded(body))


#: Under a backend ``check`` shows but does not count: a built-in that needs a target (ssh: a
#: host), or a third-party backend (registered through the ``swe_sandbox.environments`` entry point).
NEEDS_TARGET = "needs a target"
PLUGIN = "plugin"


def not_counted_label(name: str) -> str:
    """``NEEDS_TARGET`` for a backend that cannot run without being told where, else ``PLUGIN``
    for an entry-point backend (only those are plugins; ssh is built in)."""
    from swe_sandbox.environments import BACKENDS

    return NEEDS_TARGET if name in BACKENDS or needs_target(name) else PLUGIN


def render_check(rows: list[tuple[dict[str, Any], bool]]) -> None:
    """Print the check's table (rich), the ``local`` warning, and one line per failed backend."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    table = Table(title="swe-sandbox check", show_lines=True)
    table.add_column("Backend", no_wrap=True)
    table.add_column("Usable here", overflow="fold")
    table.add_column("Isolation", overflow="fold")
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
        table.add_row(name, usable, isolation, checks or Text("-"), result)
    console.print(table)
    if any(row["backend"] == "local" for row, _ in rows):
        console.print(Text(
            "WARNING: the 'local' backend has NO ISOLATION: commands run directly on this host, as you, "
            "with your files, credentials and network. Use it only for commands you trust.",
            style="bold red"))
    for row, required in rows:
        if not row["ok"]:
            why = row.get("reason") or "; ".join(text for good, text in row["steps"] if not good)
            label = not_counted_label(row["backend"])
            note = "" if required else (" (not counted: check it with --env FILE naming its target)"
                                        if label == NEEDS_TARGET else f" ({label}: not counted)")
            console.print(f"{row['backend']}: FAIL: {why}{note}")
