"""The ``run`` and ``demo`` commands: plain typer-compatible functions.

Register them on a typer app (``swe_sandbox.cli`` does)::

    from swe_sandbox.agent.cli import RUN_HELP, DEMO_HELP, demo, run
    app.command("run", help=RUN_HELP)(run)
    app.command("demo", help=DEMO_HELP)(demo)

Only typer and the standard library are imported at module level; the agent, models, rich and
the backends are imported inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, List, Optional

import typer

from swe_sandbox.signals import EXIT_INTERRUPTED, echo_err, interrupt_exit

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from swe_sandbox.environments.base import Environment

# -- exit codes (the same meanings as ``swe-sandbox exec``'s 2, 3, 4 and 130) -------------------
EXIT_SUBMITTED = 0
EXIT_NOT_SUBMITTED = 1  # limits, time, repeated format errors, a model error, ...
EXIT_CONFIG = 2
EXIT_BACKEND_UNAVAILABLE = 3
EXIT_SANDBOX_FAILED = 4

#: ``run`` uses this backend unless ``--env`` or the config's ``environment.backend`` names another.
DEFAULT_BACKEND = "bwrap"
DEFAULT_RUNS_DIR = "swe-sandbox-runs"
LOCAL_HINT = " (or run with --env local: NO isolation, commands run on this machine as you)"
SANDBOX_FAILURES = {"SandboxError", "SandboxStartError", "SandboxDied", "ProtocolError"}
#: Submissions longer than this many lines are shown cut (the file has all of it).
SHOW_LINES = 60

RUN_HELP = f"""\
Run the agent on a task in a sandbox; the outcome is its submission (e.g. a git diff).

\b
  swe-sandbox run -m anthropic/claude-sonnet-4-5 --workspace ./repo -t "Fix the failing test"
  swe-sandbox run --env local -m openai/gpt-5-mini --task-file issue.md -c agent.step_limit=20

The model works through one tool, bash; every command runs in a fresh `bash -c` in the sandbox
(--env: a preset such as bwrap or local, or a YAML file; default {DEFAULT_BACKEND}, which isolates
commands; `local` has NO isolation and must be asked for). --workspace copies a host directory
into the sandbox's working directory (for local: a fresh temporary copy), so your directory is
never modified. The trajectory (mini-swe-agent's format) is saved after every step to --output;
the submission is saved next to it. Special files in --workspace (FIFOs, sockets, devices) are
skipped with a warning. Ctrl-C, SIGTERM and SIGHUP save the trajectory and remove the sandbox.
API keys and other secrets are masked (***) in the trajectory, the submission and the progress.

\b
Exit status: 0 submitted; 1 ended without a submission (a limit, repeated format errors, a model
error); 2 usage or config error; 3 backend unavailable; 4 sandbox failed; 130 interrupted;
143 SIGTERM, 129 SIGHUP.
"""

DEMO_HELP = """\
Replay a recorded agent run that fixes a real bug, in a sandbox, and verify its fix.

The demo copies the source of Jinja2 and MarkupSafe (installed with swe-sandbox's agent) into a
fresh git repository, injects a bug, and replays a bundled trajectory on the best backend here
(bwrap; else local, with a warning). It prints the submitted diff, then verifies it: the diff
applies to a fresh copy with `git apply` and Jinja2's doctests pass. Exit status 0 when verified.
"""


# -- the agent as the command line drives it ----------------------------------------------------
def make_cli_agent(model: Any, env: Any, console: "Console", *, confirm: bool = False, **config: Any):
    """A ``DefaultAgent`` that shows progress on ``console`` and, with ``confirm``, asks before each command."""
    from swe_sandbox.agent.default import ActionRejected, DefaultAgent

    class CliAgent(DefaultAgent):
        def on_query(self, message: dict[str, Any]) -> None:
            show_query(console, self.n_steps, self.model_cost, message, secrets=self.known_secrets())

        def on_result(self, action: dict[str, Any], result: dict[str, Any]) -> None:
            show_result(console, action, result, secrets=self.known_secrets())

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


def show_query(console: "Console", step: int, cost: float, message: dict[str, Any],
               secrets: Iterable[str] = ()) -> None:
    """One header line per step, and the model's text (cut to a few lines), secrets masked, control
    characters escaped (no escape sequence reaches the terminal: ``swe_sandbox.terminal``)."""
    from rich.text import Text

    from swe_sandbox.redact import redact
    from swe_sandbox.terminal import escape_controls

    console.rule(Text(f"step {step}  ·  ${cost:.4f}", style="bold"), align="left")
    content = redact(message.get("content"), secrets)
    if isinstance(content, str) and content.strip():
        lines = content.strip().splitlines()
        shown = "\n".join(lines[:6]) + (f"\n… ({len(lines) - 6} more lines)" if len(lines) > 6 else "")
        console.print(Text(escape_controls(shown), style="dim"))


def show_result(console: "Console", action: dict[str, Any], result: dict[str, Any],
                secrets: Iterable[str] = ()) -> None:
    """The command (first lines, secrets masked, control characters escaped) and how it ended:
    return code, duration, timeout, rejection."""
    from rich.text import Text

    from swe_sandbox.redact import redact
    from swe_sandbox.terminal import escape_controls

    lines = escape_controls(redact(str(action.get("command", "")), secrets)).splitlines() or [""]
    command = "\n  ".join(lines[:4]) + (f"\n  … ({len(lines) - 4} more lines)" if len(lines) > 4 else "")
    console.print(Text("$ ", style="bold cyan") + Text(command))
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


def ask_approval(console: "Console", command: str) -> tuple[str, str]:
    """Ask whether to run ``command``: ``("run", "")``, ``("all", "")``, ``("reject", reason)`` or ``("edit", new)``.

    The command is shown as it will run (secrets included: the user approves exactly that), its
    control characters escaped (as ``\\x1b``: visible, and inert on the terminal)."""
    from rich.markup import escape
    from rich.prompt import Prompt
    from rich.syntax import Syntax

    from swe_sandbox.terminal import escape_controls, has_controls

    console.print(Syntax(escape_controls(command), "bash", word_wrap=True))
    choice = Prompt.ask(escape("Run it? [y]es / [n]o / [e]dit / [a]ll (stop asking)"), choices=["y", "n", "e", "a"],
                        default="y", console=console, show_choices=False)
    if choice == "n":
        return "reject", Prompt.ask("Reason (told to the model)", default="", console=console)
    if choice == "e":
        if "\n" in command or has_controls(command):  # the prompt would show its default raw
            edited = typer.edit(command, require_save=False)
            new = (edited or command).rstrip("\n")
        else:
            new = Prompt.ask("Command", default=command, console=console)
        return "edit", new
    return ("all" if choice == "a" else "run"), ""


# -- building blocks ----------------------------------------------------------------------------
def read_task(task: str | None, task_file: Path | None) -> str:
    """The task from ``-t`` or ``--task-file`` (exactly one).

    Raises:
        typer.BadParameter: neither or both given, an unreadable file, or an empty task.
    """
    if (task is None) == (task_file is None):
        raise typer.BadParameter("give the task with exactly one of -t/--task and --task-file", param_hint="'--task'")
    if task_file is not None:
        try:
            task = task_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {task_file}: {exc}", param_hint="'--task-file'") from None
    if not task or not task.strip():
        raise typer.BadParameter("the task is empty", param_hint="'--task'")
    return task.strip()


def default_output_path() -> Path:
    """``./swe-sandbox-runs/run-YYYYmmdd-HHMMSS.traj.json`` (a new name each second)."""
    return Path(DEFAULT_RUNS_DIR) / time.strftime("run-%Y%m%d-%H%M%S.traj.json")


def submission_path(trajectory: Path) -> Path:
    """Where the submission is saved: beside the trajectory, ``NAME.submission.txt``."""
    name = trajectory.name
    for suffix in (".traj.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trajectory.with_name(name + ".submission.txt")


def check_output_path(path: Path) -> None:
    """Raise ``ConfigError`` unless the trajectory (and the submission beside it) can be written
    at ``path``: not a directory, its directory exists or can be created, and is writable.
    Checked before anything runs, so a bad ``-o`` costs no model call."""
    from swe_sandbox.errors import ConfigError

    for target in (path, submission_path(path)):
        if target.is_dir():
            raise ConfigError(f"--output: {target} is a directory; give a file name, e.g. "
                              f"{target / 'run.traj.json'}")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--output: cannot create the directory {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--output: the directory {parent} is not writable")


def check_model_config(model: dict[str, Any]) -> None:
    """Raise ``ConfigError`` when a provider model has no name (the usual mistake: no ``-m``)."""
    from swe_sandbox.errors import ConfigError

    if model.get("model_class", "litellm") in ("litellm", "litellm_text") and not model.get("model_name"):
        raise ConfigError("model.model_name: missing; pass -m/--model (e.g. -m anthropic/claude-sonnet-4-5)")


def environment_config(env_spec: str, section: dict[str, Any]) -> dict[str, Any]:
    """The preset or file ``env_spec``, with the run config's ``environment`` fields on top."""
    from swe_sandbox.trajectory import recursive_merge
    from swe_sandbox.config import load_environment_config

    section = {k: v for k, v in section.items() if k != "backend"}
    return recursive_merge(load_environment_config(env_spec), section)


def require_usable(backend: str) -> None:
    """Raise ``BackendUnavailable`` (with a hint) when ``backend`` cannot run here."""
    from swe_sandbox.environments import environment_class
    from swe_sandbox.errors import BackendUnavailable

    reason = environment_class(backend).unavailable_reason()
    if reason:
        hint = "" if backend == "local" else LOCAL_HINT
        raise BackendUnavailable(f"{backend}: {reason}{hint}")


def special_files(root: Path) -> list[Path]:
    """Entries under ``root`` that are neither regular files, directories nor symlinks (FIFOs,
    sockets, devices), relative to ``root``, sorted. Symlinks are not followed."""
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:  # unreadable: the copy reports it
            continue
        for entry in entries:
            try:
                if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                    continue
            except OSError:
                continue
            found.append(Path(entry.path).relative_to(root))
    return sorted(found)


def _ignore_special(directory: str, names: list[str]) -> set[str]:
    """``shutil.copytree`` ignore function: the special files (see ``special_files``) of ``directory``."""
    ignored = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            ignored.add(name)
    return ignored


def upload_workspace(environment: "Environment", workspace: Path, target: str,
                     warn: Callable[[str], None] | None = None) -> None:
    """Copy the directory ``workspace`` to ``target`` in the sandbox, without its special files.

    FIFOs, sockets and devices cannot be copied (and a FIFO would block the copy): when there are
    any, ``warn`` gets one line naming them and the copy goes through a temporary staging
    directory that leaves them out. ``workspace`` itself is never modified.

    Raises:
        ConfigError: the copy failed (an unreadable file...); one line, naming the first problem.
    """
    from swe_sandbox.errors import ConfigError

    special = special_files(workspace)
    staging: Path | None = None
    source = workspace
    try:
        if special:
            names = ", ".join(str(p) for p in special[:3]) + (f", ... ({len(special) - 3} more)"
                                                              if len(special) > 3 else "")
            if warn is not None:
                warn(f"--workspace: skipped {len(special)} special file(s) (FIFO, socket or device), "
                     f"not copied into the sandbox: {names}")
            staging = Path(tempfile.mkdtemp(prefix="swe-sandbox-staging-"))
            source = staging / "workspace"
            shutil.copytree(workspace, source, symlinks=True, ignore=_ignore_special)
        environment.upload(source, target)
    except shutil.Error as exc:  # copytree's list of (src, dst, why)
        problems = exc.args[0] if exc.args and isinstance(exc.args[0], list) else [str(exc)]
        first = problems[0]
        detail = f"{first[0]}: {first[2]}" if isinstance(first, tuple) and len(first) == 3 else str(first)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"--workspace: cannot copy {workspace} into the sandbox: {detail}{more}") from None
    except OSError as exc:
        raise ConfigError(f"--workspace: cannot copy {workspace} into the sandbox: {exc}") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def build_environment(data: dict[str, Any], workspace: Path | None,
                      warn: Callable[[str], None] | None = None) -> tuple["Environment", Path | None]:
    """Create the environment and put a copy of ``workspace`` in its working directory.

    ``local`` gets a fresh temporary copy as its ``cwd`` (returned, to be removed after the run);
    other backends get the copy uploaded to their ``cwd`` or, failing that, their ``mount_point``.
    Special files (FIFOs, sockets, devices) are left out, with a line to ``warn``.

    Raises:
        ConfigError: ``workspace`` is not a directory, the backend has no directory to put it in,
            or the copy failed.
    """
    from swe_sandbox.environments import get_environment
    from swe_sandbox.errors import ConfigError

    if workspace is None:
        return get_environment(data), None
    if not workspace.is_dir():
        raise ConfigError(f"--workspace: {workspace} is not a directory")
    data = dict(data)
    if data.get("backend") != "local" and data.get("workspace"):
        raise ConfigError("environment.workspace and --workspace both given: use one")
    scratch = Path(tempfile.mkdtemp(prefix="swe-sandbox-workspace-")) if data.get("backend") == "local" else None
    if scratch is not None:
        data["cwd"] = str(scratch)
    environment = None
    try:
        environment = get_environment(data)
        target = getattr(environment.config, "cwd", "") or getattr(environment.config, "mount_point", "")
        if not target:
            raise ConfigError(f"--workspace: backend {data.get('backend')!r} has no working directory to copy it "
                              "to; set -c environment.cwd=DIR")
        upload_workspace(environment, workspace, target, warn)
    except BaseException:
        if environment is not None:
            environment.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return environment, scratch


def exit_code(status: str) -> int:
    """The process exit status for an agent exit status."""
    if status == "Submitted":
        return EXIT_SUBMITTED
    if status == "KeyboardInterrupt":
        return EXIT_INTERRUPTED
    if status in ("SIGTERM", "SIGHUP"):  # errors.Terminated
        import signal

        return 128 + int(getattr(signal, status))
    if status == "BackendUnavailable":
        return EXIT_BACKEND_UNAVAILABLE
    if status in SANDBOX_FAILURES:
        return EXIT_SANDBOX_FAILED
    if status == "ConfigError":
        return EXIT_CONFIG
    return EXIT_NOT_SUBMITTED


def run_agent(config: dict[str, Any], task: str, env_spec: str, *, workspace: Path | None, output: Path,
              console: "Console", confirm: bool = False) -> tuple[str, str]:
    """Build model, environment and agent from ``config``, run ``task``, save trajectory and submission.

    Returns:
        tuple[str, str]: ``(exit_status, submission)``; the submission with secrets masked, exactly
        as in the trajectory's ``info.submission`` (and the saved ``.submission.txt``).

    Raises:
        ConfigError, BackendUnavailable: before anything ran (a bad ``output`` path included).
        KeyboardInterrupt: after the trajectory was saved and the sandbox removed (also
            ``errors.Terminated``, for SIGTERM / SIGHUP).
    """
    from rich.text import Text

    from swe_sandbox.agent.default import AgentConfig
    from swe_sandbox.config import validate
    from swe_sandbox.models import get_model
    from swe_sandbox.terminal import escape_controls

    validate(AgentConfig, {**config["agent"], "output_path": output}, section="agent")
    check_output_path(output)
    check_model_config(config["model"])
    data = environment_config(env_spec, config["environment"])
    require_usable(str(data.get("backend")))
    model = get_model(config["model"])

    def warn(text: str) -> None:
        console.print(Text("warning: ", style="yellow") + Text(escape_controls(text)), soft_wrap=True)  # one line

    from swe_sandbox.pull_display import show_pulls

    with show_pulls(console):  # the sandbox's image, when it has to be pulled
        environment, scratch = build_environment(data, workspace, warn)
        try:
            with environment:
                agent = make_cli_agent(model, environment, console, confirm=confirm,
                                       **{**config["agent"], "output_path": output})
                status, submission = agent.run(task)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    from swe_sandbox.redact import redact

    if status == "Submitted":
        from swe_sandbox.trajectory import atomic_write_text

        submission = agent.redacted()["info"]["submission"]  # the same text as the trajectory's
        atomic_write_text(submission_path(output), submission)
    elif agent.messages and agent.messages[-1].get("content"):
        content = redact(str(agent.messages[-1]["content"]), agent.known_secrets())
        console.print(Text(f"{status}: ", style="red") + Text(escape_controls(content)))
    return status, submission


def show_summary(console: "Console", status: str, submission: str, output: Path) -> None:
    """The last lines of a run: exit status, where the trajectory and submission are, the submission
    (its control characters escaped; the file holds it exactly)."""
    from rich.text import Text

    from swe_sandbox.terminal import escape_controls

    console.rule(Text("done", style="bold"), align="left")
    style = "bold green" if status == "Submitted" else "bold red"
    console.print(Text("exit status: ", style="bold") + Text(status, style=style))
    console.print(f"trajectory:  {output}", highlight=False)
    if status != "Submitted":
        return
    lines = submission.splitlines()
    console.print(f"submission:  {submission_path(output)}  ({len(lines)} lines)", highlight=False)
    shown = "\n".join(lines[:SHOW_LINES])
    if shown:
        console.print(Text(escape_controls(shown)))
    if len(lines) > SHOW_LINES:
        console.print(f"… ({len(lines) - SHOW_LINES} more lines in the file)", highlight=False)


def guarded(body) -> int:
    """Run ``body``; turn errors into one ``swe-sandbox: ...`` line on stderr and an exit status."""
    from swe_sandbox.errors import BackendUnavailable, ConfigError, SandboxError, SweSandboxError

    def fail(code: int, kind: str, message: str) -> int:
        from swe_sandbox.redact import redact
        from swe_sandbox.terminal import for_stream

        text = " ".join(line.strip() for line in redact(str(message)).splitlines() if line.strip())
        typer.echo(for_stream(f"swe-sandbox: {kind}: {text}", sys.stderr), err=True)
        return code

    try:
        return body()
    except ConfigError as exc:
        return fail(EXIT_CONFIG, "config error", str(exc).removeprefix("invalid config:"))
    except BackendUnavailable as exc:
        return fail(EXIT_BACKEND_UNAVAILABLE, "backend unavailable", str(exc))
    except SandboxError as exc:
        return fail(EXIT_SANDBOX_FAILED, "sandbox failed", f"{type(exc).__name__}: {exc}")
    except SweSandboxError as exc:
        return fail(EXIT_NOT_SUBMITTED, "error", f"{type(exc).__name__}: {exc}")


def progress_console() -> "Console":
    """Where progress goes: stderr (stdout stays for the summary and the submission)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


# -- the commands -------------------------------------------------------------------------------
def run(
    task: Annotated[Optional[str], typer.Option("-t", "--task", metavar="TEXT", help="The task, as text.",
                                                show_default=False)] = None,
    task_file: Annotated[Optional[Path], typer.Option("--task-file", metavar="FILE",
                                                      help="Read the task from FILE.", show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option("-m", "--model", metavar="MODEL",
                                                 help="Model name, e.g. anthropic/claude-sonnet-4-5 "
                                                      "(sets model.model_name).", show_default=False)] = None,
    env: Annotated[Optional[str], typer.Option("--env", "-e", metavar="NAME|FILE",
                                               help=f"Backend preset (bwrap, local, ...) or YAML file. Default: "
                                                    f"the config's environment.backend, else {DEFAULT_BACKEND}.",
                                               show_default=False)] = None,
    workspace: Annotated[Optional[Path], typer.Option("--workspace", "-w", metavar="DIR",
                                                      help="Host directory copied into the sandbox's working "
                                                           "directory (never modified).", show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", metavar="FILE",
                                                   help=f"Trajectory file. Default: ./{DEFAULT_RUNS_DIR}/"
                                                        "run-DATE-TIME.traj.json.", show_default=False)] = None,
    config_file: Annotated[Optional[Path], typer.Option("--config", metavar="FILE",
                                                        help="Run config (agent/model/environment sections). "
                                                             "Default: the shipped config/default.yaml.",
                                                        show_default=False)] = None,
    overrides: Annotated[Optional[List[str]], typer.Option("-c", "--set", metavar="SECTION.KEY=VALUE",
                                                           help="Config override, repeatable, e.g. -c agent."
                                                                "step_limit=20 -c model.model_kwargs.api_base="
                                                                "http://127.0.0.1:8000/v1 -c environment.timeout=30.",
                                                           show_default=False)] = None,
    confirm: Annotated[bool, typer.Option("--confirm", help="Approve, reject (with a reason) or edit each "
                                                            "command before it runs (needs a terminal).")] = False,
) -> None:
    """Run the agent on a task in a sandbox (see RUN_HELP)."""
    text = read_task(task, task_file)
    if confirm and not stdin_is_tty():
        raise typer.BadParameter("needs an interactive terminal (stdin is not a TTY)", param_hint="'--confirm'")

    def body() -> int:
        from swe_sandbox.agent.config import load_run_config

        config = load_run_config(config_file, list(overrides or []))
        if model:
            config["model"]["model_name"] = model
        env_spec = env or config["environment"].get("backend") or DEFAULT_BACKEND
        path = output or default_output_path()
        console = progress_console()
        try:
            status, submission = run_agent(config, text, str(env_spec), workspace=workspace, output=path,
                                           console=console, confirm=confirm)
        except KeyboardInterrupt as exc:
            code, what = interrupt_exit(exc)
            echo_err(f"swe-sandbox: {what}; trajectory saved to {path}")
            return code
        show_summary(progress_console_stdout(), status, submission, path)
        return exit_code(status)

    raise typer.Exit(guarded(body))






def progress_console_stdout() -> "Console":
    """Where the summary goes: stdout."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def best_backend(console: "Console") -> str:
    """``bwrap`` when usable here, else ``local`` (with a warning on ``console``)."""
    from swe_sandbox.environments import environment_class

    reason = environment_class("bwrap").unavailable_reason()
    if reason is None:
        return "bwrap"
    console.print(f"[yellow]warning:[/yellow] bwrap is not usable here ({reason}); the demo runs on the "
                  "'local' backend, with NO isolation (its commands are the recorded ones, not a model's).")
    return "local"


def demo(
    env: Annotated[Optional[str], typer.Option("--env", "-e", metavar="NAME|FILE",
                                               help="Backend; default: bwrap if usable, else local.",
                                               show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", metavar="FILE",
                                                   help="Trajectory file. Default: a temporary file, removed "
                                                        "unless --keep.", show_default=False)] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo's working directory (repository, "
                                                      "trajectory) and print where it is.")] = False,
) -> None:
    """Replay the bundled Jinja2 fix and verify it (see DEMO_HELP)."""

    def body() -> int:
        from swe_sandbox.agent import demo as demo_task
        from swe_sandbox.agent.config import load_run_config

        console = progress_console()
        out = progress_console_stdout()
        backend = env or best_backend(console)
        require_usable(str(environment_config(backend, {}).get("backend")))  # a bad --env: nothing printed yet
        workdir = Path(tempfile.mkdtemp(prefix="swe-sandbox-demo-"))
        try:
            repo = demo_task.make_repo(workdir / "jinja2")
            before = demo_task.run_check(repo)
            out.print(f"Jinja2 {demo_task.package_version()} copied from the installed package into a fresh git "
                      f"repository, with a bug injected in {demo_task.BUG_FILE}: its doctests "
                      f"{'FAIL' if not before.ok else 'pass (?)'}. Replaying the recorded fix on '{backend}'.",
                      highlight=False, markup=False)
            config = load_run_config(None, [])
            config["model"] = {"model_class": "replay", "trajectory": str(demo_task.TRAJECTORY)}
            path = output or workdir / "demo.traj.json"
            status, submission = run_agent(config, demo_task.task_text(), backend, workspace=repo,
                                           output=path, console=console)
            show_summary(out, status, submission, path)
            if status != "Submitted":
                return EXIT_NOT_SUBMITTED
            verdict = demo_task.verify_submission(submission, workdir / "verify")
            out.print(verdict.output.rstrip(), highlight=False, markup=False)
            out.print("[bold green]verified[/]: the fix applies and the doctests pass" if verdict.ok
                      else "[bold red]NOT verified[/]", highlight=False)
            return EXIT_SUBMITTED if verdict.ok else EXIT_NOT_SUBMITTED
        except KeyboardInterrupt as exc:
            code, what = interrupt_exit(exc)
            echo_err(f"swe-sandbox: {what}")
            return code
        except RuntimeError as exc:  # git failed, or this Jinja2 has no line to inject the bug into
            typer.echo(f"swe-sandbox: demo: {exc}", err=True)
            return EXIT_NOT_SUBMITTED
        finally:
            if keep:
                typer.echo(f"demo files kept in {workdir}", err=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
                if output is None:
                    typer.echo("(the demo's files are removed; --keep or -o FILE keeps them)", err=True)

    raise typer.Exit(guarded(body))


# ``app.command("run")(run)`` shows the full help without help=...
run.__doc__ = RUN_HELP
demo.__doc__ = DEMO_HELP


def main() -> None:  # pragma: no cover - a stand-alone entry point until swe_sandbox.cli registers the commands
    """``python -m swe_sandbox.agent.cli run|demo ...``."""
    app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      context_settings={"help_option_names": ["-h", "--help"]})
    app.command("run")(run)
    app.command("demo")(demo)
    from swe_sandbox.signals import terminate_on_signals

    with terminate_on_signals():  # SIGTERM / SIGHUP clean up as Ctrl-C does
        app(prog_name="swe-sandbox")


if __name__ == "__main__":  # pragma: no cover
    main()
