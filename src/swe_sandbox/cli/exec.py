"""``swe-sandbox exec``: one command in a fresh sandbox, exit status from its result.

Startup is kept cheap on purpose: this module imports only typer and the standard library at the
top; backends, YAML and rich are imported inside the command, so ``--help`` and usage errors answer
fast.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from swe_sandbox.cli.exit_codes import EXIT_AT_ONCE, EXIT_CODES_HELP, EXIT_TIMEOUT, EXIT_UNFINISHED, EXIT_USAGE
from swe_sandbox.cli.guard import exit_at_once, fail, run_guarded
from swe_sandbox.cli.pull_display import show_pulls_of
from swe_sandbox.errors import ConfigError
from swe_sandbox.terminal import StreamEscaper, for_stream, is_terminal

EXEC_HELP = f"""\
Run COMMAND in a fresh sandbox and exit with its returncode.

COMMAND is every word after the options, joined with spaces and run by `bash -c` inside the
sandbox (put `--` before it so its own options are not read as ours). COMMAND `-` reads the
command from stdin. The sandbox is removed when the command ends; background jobs end with it.

Plain output: the command's output (stdout and stderr merged, in order) on stdout; the result's
exception_info (e.g. "Command timed out after 5 seconds") on stderr. On a terminal, control
characters are shown escaped (ESC as \\x1b; newlines, tabs and CRLF line ends kept) so no escape
sequence of the command reaches the terminal; --raw writes them as they are. Into a pipe or a
file the bytes are always as they are. On a terminal (or with --stream) the output is printed as
it arrives; --no-stream prints it when the command ended.
With --json: one JSON object on stdout, the result dict (output, returncode, exception_info,
extra) plus "submission" (the text after the COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT line, or null);
never streamed.

{EXIT_CODES_HELP}"""

app = typer.Typer()


def exit_status(result: dict[str, Any]) -> int:
    """The process exit status for a result dict (see ``exit_codes``): the returncode when it is
    0..255, 124 on a timeout, else 125."""
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
    """The command: ``words`` joined with spaces, or stdin's bytes when ``words`` is ``["-"]``."""
    if words == ["-"]:
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        # surrogateescape: bytes that are not UTF-8 still reach the sandbox unchanged
        return data.decode("utf-8", "surrogateescape")
    return " ".join(words)



def check_timeout(timeout: float | None) -> None:
    """Reject (one line, exit 2) a bad ``--timeout`` before any sandbox is made."""
    from swe_sandbox.environments.base import check_timeout as check

    try:
        check(timeout)
    except ConfigError as exc:
        fail(EXIT_USAGE, "usage error", f"--{exc}")


@app.command("exec", help=EXEC_HELP, context_settings={"allow_interspersed_args": False})
def exec_command(
    ctx: typer.Context,
    command: Annotated[
        list[str],
        typer.Argument(metavar="COMMAND", help="The command (words joined with spaces); '-': read it from stdin.",
                       show_default=False),
    ],
    env: Annotated[
        str,
        typer.Option("--env", "-e", metavar="NAME|FILE",
                     help="A preset (local, bwrap, docker, podman, ssh) or a YAML environment config file."),
    ],
    timeout: Annotated[
        float | None,
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
    stream: Annotated[
        bool | None,
        typer.Option("--stream/--no-stream", help="Print the output as it arrives (plain mode). "
                                                  "Default: when stdout is a terminal; never with --json.",
                     show_default=False),
    ] = None,
    overrides: Annotated[
        list[str] | None,
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

    streaming = not as_json and (is_terminal(sys.stdout) if stream is None else stream)

    def body() -> int:
        from swe_sandbox import Submitted, get_environment

        environment = get_environment(env, overrides=list(overrides or []))
        action = {"command": text}
        live = streaming and callable(getattr(environment, "stream", None))  # an environment without: at the end
        try:
            with show_pulls_of(environment):  # the image's pull (if it has to be pulled) on stderr
                result = streamed(environment, action, cwd, timeout, raw) if live else \
                    environment.execute(action, cwd=cwd, timeout=timeout)
            submission = None
        except Submitted as exc:
            result, submission = exc.result, exc.submission
        finally:  # one shot: the engine removes the container by itself, nobody waits for it
            environment.close(wait=False)
        if as_json:
            write_stdout(json.dumps({**result, "submission": submission}, ensure_ascii=False) + "\n")
        else:  # on a terminal, no escape sequence of the command reaches it (unless --raw)
            if not live:
                write_stdout(for_stream(result.get("output", ""), sys.stdout, raw))
            if result.get("exception_info"):
                typer.echo(for_stream(result["exception_info"], sys.stderr, raw), err=True)
        return exit_status(result)

    status = run_guarded(body)
    if (ctx.find_root().obj or {}).get(EXIT_AT_ONCE):  # the program itself: the sandbox is closed, end now
        exit_at_once(status)
    raise typer.Exit(status)


def streamed(environment: Any, action: dict[str, Any], cwd: str, timeout: float | None, raw: bool) -> dict[str, Any]:
    """Run ``action`` with ``environment.stream``, writing each output chunk to stdout as it
    arrives (escaped on a terminal unless ``raw``, as ``for_stream``); the result dict.

    Raises:
        Submitted: the command submitted (its output was written already). What ``execute`` raises.
    """
    import contextlib

    escape = StreamEscaper() if not raw and is_terminal(sys.stdout) else None
    try:
        with contextlib.closing(environment.stream(action, cwd, timeout=timeout)) as events:
            for event in events:
                if event.done:
                    return event.result
                write_stdout(escape.feed(event.text) if escape else event.text)
    finally:
        if escape is not None:
            write_stdout(escape.flush())
    raise RuntimeError("the stream ended without a result")  # pragma: no cover - the contract forbids it
