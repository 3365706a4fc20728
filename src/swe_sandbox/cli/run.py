"""``swe-sandbox run`` (an agent solves a task in a sandbox) and ``demo`` (a recorded run replayed).

Only typer and the standard library are imported at module level; the agent, models, rich and
the backends are imported inside the commands, so ``--help`` stays fast. What the commands check
first is in ``swe_sandbox.preflight``, what they show in ``display``.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from swe_sandbox.cli.display import make_cli_agent, progress_console, progress_console_stdout, show_summary, warn
from swe_sandbox.cli.exit_codes import (
    EXIT_FAILED,
    EXIT_OK,
    run_exit,
)
from swe_sandbox.cli.guard import guarded, interrupted
from swe_sandbox.cli.prepare import DEFAULT_RUNS_DIR, default_output_path, read_task
from swe_sandbox.cli.pull_display import show_pulls
from swe_sandbox.files import atomic_write_text
from swe_sandbox.redact import redact
from swe_sandbox.terminal import escape_controls

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from swe_sandbox.errors import Outcome

#: ``run`` uses this backend unless ``--env`` or the config's ``environment.backend`` names another.
DEFAULT_BACKEND = "bwrap"

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

app = typer.Typer()


def run_agent(config: dict[str, Any], task: str, env_spec: str, *, workspace: Path | None, output: Path,
              console: Console, confirm: bool = False,
              stream: bool | None = None) -> tuple[str, str, Outcome | None]:
    """Build model, environment and agent from ``config``, run ``task``, save trajectory and submission.

    ``stream``: show each command's output as it arrives (None: when ``console`` is a terminal).

    Returns:
        tuple[str, str, Outcome | None]: ``(exit_status, submission, outcome)``; the submission
        with secrets masked, exactly as in the trajectory's ``info.submission`` (and the saved
        ``.submission.txt``); the outcome of the ending (``DefaultAgent.outcome``, as in ``info.outcome``).

    Raises:
        ConfigError, BackendUnavailable: before anything ran (a bad ``output`` path included).
        KeyboardInterrupt: after the trajectory was saved and the sandbox removed (also
            ``errors.Terminated``, for SIGTERM / SIGHUP).
    """
    from swe_sandbox.preflight import prepare_run
    from swe_sandbox.workspace import build_environment

    model, data = prepare_run(config, env_spec, output)
    with show_pulls(console):  # the sandbox's image, when it has to be pulled
        environment, scratch = build_environment(data, workspace, functools.partial(warn, console))
        try:
            with environment:
                agent = make_cli_agent(model, environment, console, confirm=confirm, stream=stream,
                                       **{**config["agent"], "output_path": output})
                status, submission = agent.run(task)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    return status, finish_run(agent, status, submission, output, console), agent.outcome


def finish_run(agent: Any, status: str, submission: str, output: Path, console: Console) -> str:
    """Save the submission beside the trajectory (``Submitted``), else show the agent's last message.

    Returns:
        str: the submission as saved (secrets masked, as in the trajectory), else ``submission``.
    """
    from rich.text import Text

    from swe_sandbox.agent.default import ExitStatus
    from swe_sandbox.preflight import submission_path

    if status == ExitStatus.SUBMITTED:
        submission = agent.redacted()["info"]["submission"]  # the same text as the trajectory's
        atomic_write_text(submission_path(output), submission)
    elif agent.messages and agent.messages[-1].get("content"):
        content = redact(str(agent.messages[-1]["content"]), agent.known_secrets())
        console.print(Text(f"{status}: ", style="red") + Text(escape_controls(content)))
    return submission


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


# -- the commands -------------------------------------------------------------------------------
@app.command("run", help=RUN_HELP)
def run(
    task: Annotated[str | None, typer.Option("-t", "--task", metavar="TEXT", help="The task, as text.",
                                                show_default=False)] = None,
    task_file: Annotated[Path | None, typer.Option("--task-file", metavar="FILE",
                                                      help="Read the task from FILE.", show_default=False)] = None,
    model: Annotated[str | None, typer.Option("-m", "--model", metavar="MODEL",
                                                 help="Model name, e.g. anthropic/claude-sonnet-4-5 "
                                                      "(sets model.model_name).", show_default=False)] = None,
    env: Annotated[str | None, typer.Option("--env", "-e", metavar="NAME|FILE",
                                               help=f"Backend preset (bwrap, local, ...) or YAML file. Default: "
                                                    f"the config's environment.backend, else {DEFAULT_BACKEND}.",
                                               show_default=False)] = None,
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", metavar="DIR",
                                                      help="Host directory copied into the sandbox's working "
                                                           "directory (never modified).", show_default=False)] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", metavar="FILE",
                                                   help=f"Trajectory file. Default: ./{DEFAULT_RUNS_DIR}/"
                                                        "run-DATE-TIME.traj.json.", show_default=False)] = None,
    config_file: Annotated[Path | None, typer.Option("--config", metavar="FILE",
                                                        help="Run config (agent/model/environment sections). "
                                                             "Default: the shipped config/default.yaml.",
                                                        show_default=False)] = None,
    overrides: Annotated[list[str] | None, typer.Option("-c", "--set", metavar="SECTION.KEY=VALUE",
                                                           help="Config override, repeatable, e.g. -c agent."
                                                                "step_limit=20 -c model.model_kwargs.api_base="
                                                                "http://127.0.0.1:8000/v1 -c environment.timeout=30.",
                                                           show_default=False)] = None,
    confirm: Annotated[bool, typer.Option("--confirm", help="Approve, reject (with a reason) or edit each "
                                                            "command before it runs (needs a terminal).")] = False,
    stream: Annotated[bool | None, typer.Option("--stream/--no-stream",
                                                help="Show each command's output as it arrives (control characters "
                                                     "escaped). Default: when stderr (the progress) is a terminal.",
                                                show_default=False)] = None,
) -> None:
    """Run the agent on a task in a sandbox (see RUN_HELP)."""
    text = read_task(task, task_file)
    if confirm and not stdin_is_tty():
        raise typer.BadParameter("needs an interactive terminal (stdin is not a TTY)", param_hint="'--confirm'")

    def body() -> int:
        from swe_sandbox.agent.config import load_run_config
        from swe_sandbox.agent.default import ExitStatus

        config = load_run_config(config_file, list(overrides or []))
        if model:
            config["model"]["model_name"] = model
        env_spec = env or config["environment"].get("backend") or DEFAULT_BACKEND
        path = output or default_output_path()
        console = progress_console()
        try:
            status, submission, outcome = run_agent(config, text, str(env_spec), workspace=workspace,
                                                    output=path, console=console, confirm=confirm, stream=stream)
        except KeyboardInterrupt as exc:
            return interrupted(exc, f"; trajectory saved to {path}")
        show_summary(progress_console_stdout(), status, submission, path)
        return run_exit(status == ExitStatus.SUBMITTED, outcome)

    raise typer.Exit(guarded(body))


def best_backend(console: Console) -> str:
    """``bwrap`` when usable here, else ``local`` (with a warning on ``console``)."""
    from swe_sandbox.environments import environment_class

    reason = environment_class("bwrap").unavailable_reason()
    if reason is None:
        return "bwrap"
    console.print(f"[yellow]warning:[/yellow] bwrap is not usable here ({reason}); the demo runs on the "
                  "'local' backend, with NO isolation (its commands are the recorded ones, not a model's).")
    return "local"


def replay_demo(backend: str, workdir: Path, output: Path | None, console: Console) -> int:
    """The demo in ``workdir``: the buggy repository, the replayed run on ``backend``, the verdict.

    Returns:
        int: ``EXIT_OK`` when the submitted fix applies and the doctests pass, else ``EXIT_FAILED``.

    Raises:
        RuntimeError: git failed, or this Jinja2 has no line to inject the bug into.
    """
    from swe_sandbox.agent import demo as demo_task
    from swe_sandbox.agent.config import load_run_config
    from swe_sandbox.agent.default import ExitStatus

    out = progress_console_stdout()
    repo = demo_task.make_repo(workdir / "jinja2")
    before = demo_task.run_check(repo)
    out.print(f"Jinja2 {demo_task.package_version()} copied from the installed package into a fresh git "
              f"repository, with a bug injected in {demo_task.BUG_FILE}: its doctests "
              f"{'FAIL' if not before.ok else 'pass (?)'}. Replaying the recorded fix on '{backend}'.",
              highlight=False, markup=False)
    config = load_run_config(None, [])
    config["model"] = {"model_class": "replay", "trajectory": str(demo_task.TRAJECTORY)}
    path = output or workdir / "demo.traj.json"
    status, submission, _ = run_agent(config, demo_task.task_text(), backend, workspace=repo, output=path,
                                      console=console)
    show_summary(out, status, submission, path)
    if status != ExitStatus.SUBMITTED:
        return EXIT_FAILED
    verdict = demo_task.verify_submission(submission, workdir / "verify")
    out.print(verdict.output.rstrip(), highlight=False, markup=False)
    out.print("[bold green]verified[/]: the fix applies and the doctests pass" if verdict.ok
              else "[bold red]NOT verified[/]", highlight=False)
    return EXIT_OK if verdict.ok else EXIT_FAILED


@app.command("demo", help=DEMO_HELP)
def demo(
    env: Annotated[str | None, typer.Option("--env", "-e", metavar="NAME|FILE",
                                               help="Backend; default: bwrap if usable, else local.",
                                               show_default=False)] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", metavar="FILE",
                                                   help="Trajectory file. Default: a temporary file, removed "
                                                        "unless --keep.", show_default=False)] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo's working directory (repository, "
                                                      "trajectory) and print where it is.")] = False,
) -> None:
    """Replay the bundled Jinja2 fix and verify it (see DEMO_HELP)."""

    def body() -> int:
        from swe_sandbox.preflight import environment_config, require_usable

        console = progress_console()
        backend = env or best_backend(console)
        require_usable(str(environment_config(backend, {}).get("backend")))  # a bad --env: nothing printed yet
        workdir = Path(tempfile.mkdtemp(prefix="swe-sandbox-demo-"))
        try:
            return replay_demo(backend, workdir, output, console)
        except KeyboardInterrupt as exc:  # said before the clean-up below says what it kept
            return interrupted(exc)
        except RuntimeError as exc:  # git failed, or this Jinja2 has no line to inject the bug into
            typer.echo(f"swe-sandbox: demo: {exc}", err=True)
            return EXIT_FAILED
        finally:
            if keep:
                typer.echo(f"demo files kept in {workdir}", err=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
                if output is None:
                    typer.echo("(the demo's files are removed; --keep or -o FILE keeps them)", err=True)

    raise typer.Exit(guarded(body))


# Registered on another typer app without ``help=``, a command shows its docstring: the full help.
run.__doc__ = RUN_HELP
demo.__doc__ = DEMO_HELP
