"""The ``swe-sandbox`` typer app: one group whose commands load only when they are used.

Each command family lives in its own module of ``swe_sandbox.cli`` (``exec``, ``run``, ``batch``,
``check``, ``engines``) with a typer app of its own. The group below knows only their names
(``COMMANDS``): a command's module is imported, and its typer parameters built, when that command
is run or its help shown. So ``swe-sandbox exec`` neither imports the agent nor converts the
batch's twenty options, and ``--help`` lists the commands without starting any of them.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from swe_sandbox.cli.exit_codes import EXIT_AT_ONCE, EXIT_CODES_HELP

#: Command name -> the module of ``swe_sandbox.cli`` whose ``app`` defines it, in help order.
COMMANDS: dict[str, str] = {
    "exec": "exec",
    "check": "check",
    "run": "run",
    "demo": "run",
    "gc": "engines",
    "batch": "batch",
    "eval": "batch",
    "report": "batch",
    "image": "engines",
}

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


def command_info(name: str) -> tuple[str, Any]:
    """``("command", CommandInfo)`` or ``("group", TyperInfo)``: how ``name``'s family app declares it.

    Raises:
        KeyError: ``name`` is not in ``COMMANDS``.
        LookupError: its module's ``app`` does not define it (a mistake in ``COMMANDS``).
    """
    family = importlib.import_module(f"swe_sandbox.cli.{COMMANDS[name]}").app
    for info in family.registered_commands:
        if info.name == name:
            return "command", info
    for group in family.registered_groups:
        if group.name == name:
            return "group", group
    raise LookupError(f"swe_sandbox.cli.{COMMANDS[name]} defines no command {name!r}")


def load_command(name: str) -> Any:
    """The click command (or group, for ``image``) ``name``, built from its family's typer app.

    Raises:
        KeyError: ``name`` is not in ``COMMANDS``.
        LookupError: its module's ``app`` does not define it.
    """
    kind, info = command_info(name)
    short, markup = app.pretty_exceptions_short, app.rich_markup_mode
    if kind == "command":
        return typer.main.get_command_from_info(info, pretty_exceptions_short=short, rich_markup_mode=markup)
    return typer.main.get_group_from_info(info, pretty_exceptions_short=short, rich_markup_mode=markup,
                                          suggest_commands=app.suggest_commands)


def summary_command(name: str) -> Any:
    """Command ``name`` with its help texts and no parameters: all the group's command list needs
    (the short help), without building the command's options.

    Raises:
        KeyError, LookupError: as ``command_info``.
    """
    kind, info = command_info(name)
    if kind == "command":
        text = inspect.getdoc(info.callback) if info.help is None else inspect.cleandoc(info.help)
    else:
        info = typer.main.solve_typer_info_defaults(info)
        text = info.help
    return TyperCommand(name=name, help=text, short_help=info.short_help, hidden=info.hidden,
                        deprecated=info.deprecated)


class LazyCommands(MutableMapping):
    """``COMMANDS`` as click's ``name -> Command`` mapping, each command built on first access."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = load_command(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the command table is fixed")

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(COMMANDS), **self._built})

    def __len__(self) -> int:
        return len({**dict.fromkeys(COMMANDS), **self._built})


class LazyGroup(TyperGroup):
    """A ``TyperGroup`` whose commands are ``LazyCommands``."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands()

    def list_commands(self, ctx: Any) -> list[str]:
        """The command names in help order (``COMMANDS``), none of them loaded."""
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list, from each command's help alone (``summary_command``)."""
        listing = TyperGroup(name=self.name, commands={name: summary_command(name) for name in self.commands})
        listing.format_commands(ctx, formatter)


app = typer.Typer(
    name="swe-sandbox",
    cls=LazyGroup,
    help=APP_HELP,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no rich import just to print --help
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


@app.callback()
def _group() -> None:
    """The group itself does nothing: every command is in ``COMMANDS``."""


def main() -> None:
    """Entry point of the ``swe-sandbox`` script and ``python -m swe_sandbox``.

    SIGTERM and SIGHUP end a command the way Ctrl-C does (sandbox closed, trajectory saved),
    with exit status 128 + the signal number.
    """
    from swe_sandbox.cli.signals import terminate_on_signals

    args = sys.argv[1:]
    if args[:1] in (["batch"], ["eval"]):  # their --ray takes an optional value
        from swe_sandbox.cli.batch import bare_ray_flag

        args = bare_ray_flag(args)
    with terminate_on_signals():
        app(prog_name="swe-sandbox", args=args, obj={EXIT_AT_ONCE: True})


if __name__ == "__main__":
    main()
