"""The ``swe-sandbox`` command line: ``exec`` (one command in a fresh sandbox) and ``check``.

Startup is kept cheap on purpose: this module imports only typer and the standard library at the
top; backends, YAML and rich are imported inside the command that needs them, so ``--help`` and
usage errors answer fast.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, Callable, List, Optional

import typer

from swe_sandbox.signals import echo_err, interrupt_exit

from swe_sandbox.agent.cli import demo as demo_command
from swe_sandbox.agent.cli import run as run_command
from swe_sandbox.batch.cli import BATCH_HELP, EVAL_HELP, REPORT_HELP, batch_command, eval_command, report_command
from swe_sandbox.engines_cli import GC_HELP, gc_command, image_app

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.environments.base import Environment

# -- exit codes ---------------------------------------------------------------------------------
EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_CONFIG = 2  # also click's exit status for a usage error
EXIT_BACKEND_UNAVAILABLE = 3
EXIT_SANDBOX_FAILED = 4
EXIT_TIMEOUT = 124  # as coreutils timeout(1)
EXIT_UNFINISHED = 125  # returncode outside 0..255 without a timeout (e.g. -1: closed mid-command)
#: ``--timeout`` above this many seconds (about 11.6 days) is taken for a mistake. (The host waits
#: with select/epoll, whose limit is about 2.1e6 s: a larger value would overflow there.)

EXIT_CODES_HELP = """\
Exit status of exec: the command's own returncode (0-255); 124 when the command timed out;
125 when the command did not finish for another reason (its returncode was outside 0..255,
e.g. -1); 2 for a usage or config error (the message names the field); 3 when the backend
cannot run on this host; 4 when the sandbox failed (did not start, died or vanished); 130 on
Ctrl-C, 143 on SIGTERM, 129 on SIGHUP (the sandbox is removed first). A command may exit 2, 3 or
4 by itself: use --json, whose "returncode" is authoritative, to tell them apart.
"""

APP_HELP = f"""\
Run untrusted shell commands in a sandbox (local, bwrap, docker, podman, ssh) and get back
what they did, or let a model fix a task there (run).

\b
  swe-sandbox check                               is each backend usable here?
  swe-sandbox exec --env docker -- 'echo hi'       one command in a fresh sandbox
  swe-sandbox exec --env bwrap --json -- make test   result dict as JSON
  swe-sandbox run --env docker -m MODEL -t TASK    an agent solves TASK in a sandbox
  swe-sandbox gc                                  remove containers left by killed runs

{EXIT_CODES_HELP}"""

EXEC_HELP = f"""\
Run COMMAND in a fresh sandbox and exit with its returncode.

COMMAND is every word after the options, joined with spaces and run by `bash -c` inside the
sandbox (put `--` before it so its own options are not read as ours). COMMAND `-` reads the
command from stdin. The sandbox is removed when the command ends; background jobs end with it.

Plain output: the command's output (stdout and stderr merged, in order) on stdout; the result's
exception_info (e.g. "Command timed out after 5 seconds") on stderr. On a terminal, control
characters are shown escaped (ESC as \\x1b; newlines, tabs and CRLF line ends kept) so no escape
sequence of the command reaches the terminal; --raw writes them as they are. Into a pipe or a
file the bytes are always as they are.
With --json: one JSON object on stdout, the result dict (output, returncode, exception_info,
extra) plus "submission" (the text after the COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT line, or null).

{EXIT_CODES_HELP}"""

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

app = typer.Typer(
    name="swe-sandbox",
    help=APP_HELP,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no rich import just to print --help
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def one_line(message: str) -> str:
    """Fold a (possibly multi-line) error message into one line."""
    parts = [p.strip() for p in str(message).splitlines() if p.strip()]
    if not parts:
        return ""
    out = parts[0]
    for part in parts[1:]:
        out += (" " if out.endswith(":") else "; ") + part
    return out


def fail(code: int, kind: str, message: str) -> None:
    """Print ``swe-sandbox: KIND: MESSAGE`` on stderr (one line; control characters escaped on a
    terminal: a message may quote the sandbox) and exit with ``code``."""
    from swe_sandbox.terminal import for_stream

    text = one_line(message)
    if text.lower().startswith(kind + ":"):
        text = text[len(kind) + 1 :].strip()
    typer.echo(for_stream(f"swe-sandbox: {kind}: {text}", sys.stderr), err=True)
    raise typer.Exit(code)


def exit_status(result: dict[str, Any]) -> int:
    """The process exit status for a result dict (see EXIT_CODES_HELP)."""
    if (result.get("extra") or {}).get("timed_out"):
        return EXIT_TIMEOUT
    code = result.get("returncode")
    if isinstance(code, int) and 0 <= code <= 255:
        return code
    return EXIT_UNFINISHED


def write_stdout(text: str) -> None:
    """Write ``text`` as UTF-8 whatever the locale says (output may hold any Unicode)."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate outside the escape range
        data = text.encode("utf-8", "replace")
    stream = getattr(sys.stdout, "buffer", None)
    sys.stdout.flush()
    if stream is not None:
        stream.write(data)
        stream.flush()
    else:  # pragma: no cover - a text-only stdout
        sys.stdout.write(text)
        sys.stdout.flush()


def read_command(words: list[str]) -> str:
    if words == ["-"]:
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        # surrogateescape: bytes that are not UTF-8 still reach the sandbox unchanged
        return data.decode("utf-8", "surrogateescape")
    return " ".join(words)


def run_guarded(body: Callable[[], int]) -> int:
    """Run ``body``; turn swe-sandbox's errors into one stderr line and exit codes 2, 3 and 4."""
    from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxError, SweSandboxError

    try:
        return body()
    except ConfigError as exc:
        fail(EXIT_CONFIG, "config error", str(exc).removeprefix("invalid config:"))
    except BackendUnavailable as exc:
        fail(EXIT_BACKEND_UNAVAILABLE, "backend unavailable", str(exc))
    except SandboxError as exc:
        fail(EXIT_SANDBOX_FAILED, "sandbox failed", f"{type(exc).__name__}: {exc}")
    except SweSandboxError as exc:
        fail(EXIT_SANDBOX_FAILED, "error", f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt as exc:
        code, what = interrupt_exit(exc)
        echo_err(f"swe-sandbox: {what}")
        raise typer.Exit(code) from None
    raise AssertionError("unreachable")  # pragma: no cover


def check_timeout(timeout: float | None) -> None:
    """Reject (one line, exit 2) a bad ``--timeout`` before any sandbox is made."""
    from swe_sandbox.environments.base import check_timeout as check
    from swe_sandbox.errors import ConfigError

    try:
        check(timeout)
    except ConfigError as exc:
        fail(EXIT_CONFIG, "usage error", f"--{exc}")


@app.command("exec", help=EXEC_HELP, context_settings={"allow_interspersed_args": False})
def exec_command(
    command: Annotated[
        List[str],
        typer.Argument(metavar="COMMAND", help="The command (words joined with spaces); '-': read it from stdin.",
                       show_default=False),
    ],
    env: Annotated[
        str,
        typer.Option("--env", "-e", metavar="NAME|FILE",
                     help="A preset (local, bwrap, docker, podman, ssh) or a YAML environment config file."),
    ],
    timeout: Annotated[
        Optional[float],
        typer.Option("--timeout", "-t", metavar="S",
                     help="Seconds before the command's whole process tree is killed (exit 124); "
                          "finite, at most 1e6. Default: the config's environment.timeout (60 in the presets)."),
    ] = None,
    cwd: Annotated[
        str, typer.Option("--cwd", metavar="DIR", help="Working directory inside the sandbox.")
    ] = "",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result dict plus \"submission\" as one JSON object.")
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="Plain mode on a terminal: write the output's control characters "
                                         "(escape sequences) as they are instead of escaped.")
    ] = False,
    overrides: Annotated[
        Optional[List[str]],
        typer.Option("-c", "--set", metavar="KEY=VALUE",
                     help="Config override, repeatable, e.g. -c environment.timeout=5 "
                          "-c environment.env.FOO=bar (values are read as JSON: numbers, true/false, "
                          "null, [lists], {objects}; anything else is a string; env values always are)."),
    ] = None,
) -> None:
    check_timeout(timeout)
    text = read_command(list(command))
    if not text.strip():
        raise typer.BadParameter("the command is empty", param_hint="COMMAND")

    def body() -> int:
        from swe_sandbox import Submitted, get_environment
        from swe_sandbox.pull_display import show_pulls

        environment = get_environment(env, overrides=list(overrides or []))
        with show_pulls(), environment:  # the image's pull (if it has to be pulled) on stderr
            try:
                result = environment.execute({"command": text}, cwd=cwd, timeout=timeout)
                submission = None
            except Submitted as exc:
                result, submission = exc.result, exc.submission
        if as_json:
            write_stdout(json.dumps({**result, "submission": submission}, ensure_ascii=False) + "\n")
        else:  # on a terminal, no escape sequence of the command reaches it (unless --raw)
            from swe_sandbox.terminal import for_stream

            write_stdout(for_stream(result.get("output", ""), sys.stdout, raw))
            if result.get("exception_info"):
                typer.echo(for_stream(result["exception_info"], sys.stderr, raw), err=True)
        return exit_status(result)

    raise typer.Exit(run_guarded(body))


# -- check ----------------------------------------------------------------------------------------
TIMEOUT_CHECK_LIMIT_S = 2.0
ROUND_TRIPS = 20


def _check_backend(name: str, spec: Any, overrides: list[str] | None = None, *,
                   raise_config_errors: bool = False) -> dict[str, Any]:
    """Self-check one backend; a failure is reported in the returned row.

    "Usable" means the backend can run here *with this config*: a sandbox that does not start
    because of ``BackendUnavailable`` (e.g. ``bwrap_path`` names no binary) is not usable.

    Raises:
        ConfigError: only with ``raise_config_errors`` (the config or ``overrides`` are invalid);
            otherwise a config error is the row's reason.
    """
    import statistics
    import time

    from swe_sandbox import get_environment
    from swe_sandbox.environments import environment_class
    from swe_sandbox.errors import BackendUnavailable, ConfigError

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
        environment: Environment | None = get_environment(spec, overrides=list(overrides or []))
    except ConfigError as exc:
        if raise_config_errors:
            raise
        row["reason"] = "config error: " + one_line(str(exc).removeprefix("invalid config:"))
        return row
    except Exception as exc:
        row["reason"] = f"{type(exc).__name__}: {one_line(str(exc))}"
        return row
    row["isolation"] = getattr(environment, "isolation", "") or row["isolation"]  # per config (ssh + bwrap)
    steps = row["steps"]
    try:
        t0 = time.perf_counter()
        try:
            environment.start()
        except BackendUnavailable as exc:  # not usable with this config (e.g. no such bwrap_path)
            row["reason"] = one_line(str(exc)) or "BackendUnavailable"
            return row
        row["usable"] = True
        steps.append((True, f"start {1000 * (time.perf_counter() - t0):.0f} ms"))

        r = environment.execute({"command": "echo ok"}, timeout=30)
        good = r["returncode"] == 0 and r["output"] == "ok\n"
        steps.append((good, "echo ok" if good else f"echo ok: got {r['output']!r}, returncode {r['returncode']}"))

        t0 = time.perf_counter()
        r = environment.execute({"command": "sleep 5"}, timeout=1)
        took = time.perf_counter() - t0
        good = bool(r["extra"].get("timed_out")) and r["returncode"] == -1 and took <= TIMEOUT_CHECK_LIMIT_S
        steps.append((good, f"1 s timeout on sleep 5: back in {took:.2f} s"
                            + ("" if r["extra"].get("timed_out") else ", NOT timed out")))

        times = []
        codes = set()
        for _ in range(ROUND_TRIPS + 2):
            t0 = time.perf_counter()
            codes.add(environment.execute({"command": "true"}, timeout=30)["returncode"])
            times.append(time.perf_counter() - t0)
        median = statistics.median(times[2:])  # first two: warm-up
        steps.append((codes == {0}, f"`true` round trip {1000 * median:.1f} ms (median)"))
    except Exception as exc:
        problem = f"{type(exc).__name__}: {one_line(str(exc))}".rstrip(": ")
        steps.append((False, problem))
        if not row["usable"]:  # it failed to start: that is why it is not usable
            row["reason"] = problem
    finally:
        if environment is not None:
            try:
                environment.close()
            except Exception as exc:
                steps.append((False, f"close failed: {type(exc).__name__}: {one_line(str(exc))}"))
    row["ok"] = bool(steps) and all(good for good, _ in steps)
    return row


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
        Optional[str],
        typer.Option("--env", "-e", metavar="NAME",
                     help="Check only this backend (or preset / YAML file); default: every backend."),
    ] = None,
    overrides: Annotated[
        Optional[List[str]],
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
        return EXIT_CHECK_FAILED if failed else EXIT_OK

    raise typer.Exit(run_guarded(body))


def render_check(rows: list[tuple[dict[str, Any], bool]]) -> None:
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
        name = row["backend"] + ("" if required else "\n(plugin)")
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
            note = "" if required else (" (not counted: check it with --env FILE naming its target)"
                                        if needs_target(row["backend"]) else " (plugin: not counted)")
            console.print(f"{row['backend']}: FAIL: {why}{note}")


app.command("run")(run_command)
app.command("demo")(demo_command)
app.command("gc", help=GC_HELP)(gc_command)
app.command("batch", help=BATCH_HELP)(batch_command)
app.command("eval", help=EVAL_HELP)(eval_command)
app.command("report", help=REPORT_HELP)(report_command)
app.add_typer(image_app, name="image")


def main() -> None:
    """Entry point of the ``swe-sandbox`` script and ``python -m swe_sandbox``.

    SIGTERM and SIGHUP end a command the way Ctrl-C does (sandbox closed, trajectory saved),
    with exit status 128 + the signal number.
    """
    from swe_sandbox.signals import terminate_on_signals

    from swe_sandbox.batch.cli import bare_ray_flag

    with terminate_on_signals():
        app(prog_name="swe-sandbox", args=bare_ray_flag(sys.argv[1:]))


if __name__ == "__main__":
    main()
