"""``swe-sandbox batch``, ``eval`` and ``report``: many tasks, their evaluation, a summary.

Only typer and the standard library are imported at module
level; the batch machinery, rich and the backends load inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from swe_sandbox.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from swe_sandbox.cli.guard import guarded
from swe_sandbox.cli.signals import echo_err

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.options import RunOptions
    from swe_sandbox.batch.tasks import Task

DEFAULT_BACKEND = "bwrap"

BATCH_HELP = f"""\
Run the agent on every task of TASKS (.jsonl or .json, SWE-bench fields), one sandbox each,
-w at once; with --eval, evaluate each patch in a fresh sandbox.

\b
  swe-sandbox batch tasks.jsonl -o runs/exp1 --env docker -m anthropic/claude-sonnet-4-5 -w 8 --eval
  swe-sandbox report runs/exp1

DIR gets preds.json (SWE-bench predictions), <id>/<id>.traj.json (trajectories, saved after every
step), results.jsonl (one line per attempt) and, with --eval, <id>/eval/ and report.json; with
--rollouts K, K samples per instance under <id>/<k>/, forked from one prepared sandbox. Running
the same command again resumes: done instances are skipped; infrastructure failures (a sandbox
that did not start or died, a provider unreachable after retries) run again, --max-attempts in
all. Ctrl-C stops the running instances (saved, sandboxes removed; they run again on resume); a
second Ctrl-C exits at once. --env defaults to {DEFAULT_BACKEND}.

\b
Exit status: 0 every selected instance is done; 1 some are not (infrastructure failures, the
cost limit); 2 usage, config or task-file error (nothing is written to DIR); 3 backend
unavailable; 130 interrupted.
"""

EVAL_HELP = """\
Evaluate the predictions in PREDS (preds.json, or a SWE-bench .json/.jsonl) against --tasks.

Each patch is applied in a fresh sandbox built from the task (image, workspace, setup_command):
git apply, then SWE-bench's fallbacks (--3way, --reject, patch --fuzz=5); then test_patch and
eval_command; the outcomes are read with the task's log_parser. DIR gets <id>/eval/ (patch.diff,
test_output.txt, report.json) and report.json with SWE-bench's keys. A rerun resumes.
Exit status: 0 done; 1 some evaluations failed for infrastructure reasons; 2 bad input.
"""

REPORT_HELP = """\
Summarize a batch or eval directory (running or finished): counts by exit status, resolved
rate, cost, api calls, time and throughput. --json prints the summary as JSON.
"""

Opt = typer.Option
app = typer.Typer()
IMAGE_TEMPLATE_HELP = ("Image of each task without one: a Python format string over the task's fields plus "
                       "instance_id_docker (the id as SWE-bench's image names spell it), e.g. "
                       "'docker.io/swebench/sweb.eval.x86_64.{instance_id_docker}:latest'.")


ROLLOUTS_HELP = ("Samples per instance (RL groups): K > 1 prepares each instance's sandbox once, snapshots it and "
                 "forks the K samples from it; DIR gets <id>/<k>/ per sample, preds.samples.json, and pass@k, avg@k "
                 "and the group rewards in report.json. Seeds: model.model_kwargs.seed + k; {sample} in model "
                 "strings is k.")
REUSE_HELP = ("With --rollouts K: run a group's samples one after another in its prepared sandbox, reset (and "
              "verified) to the snapshot between them, instead of a fork each.")
RAY_HELP = ("Run on Ray, one task per instance on the nodes that offer the swe_sandbox resource: auto, a "
            "cluster's address, or nothing (last, or before another option): a local Ray with -w slots.")
RayOpt = Annotated[str | None, Opt("--ray", metavar="[ADDRESS]", help=RAY_HELP, show_default=False)]
EvalTimeoutOpt = Annotated[float, Opt("--eval-timeout", min=1, metavar="S", help="Seconds for each eval_command.")]
GradingOpt = Annotated[Literal["strict", "swebench"], Opt("--grading",
                               help="Grading policy: strict (default: the patch cannot game the grade) or swebench "
                                    "(SWE-bench's rules exactly, for leaderboard parity; forgeable by the patch).")]
SplitOpt = Annotated[str | None, Opt("--split", metavar="NAME", show_default=False,
                                     help="With TASKS a dataset directory (as the hub's download writes one: "
                                          "data/test-00000-of-00001.parquet): the split to read.")]
WorkspaceOutsideOpt = Annotated[bool, Opt("--allow-workspace-outside", help="Let a task's workspace lie outside the task file's directory.")]
ImageTemplateOpt = Annotated[str | None, Opt("--image-template", metavar="TEMPLATE", help=IMAGE_TEMPLATE_HELP,
                                             show_default=False)]


def bare_ray_flag(argv: list[str]) -> list[str]:
    """``argv`` with a bare ``--ray`` (last, or followed by an option) given its value ``local``:
    ``--ray [ADDRESS]`` takes an optional value, which typer's options cannot."""
    out = list(argv)
    if not out or out[0] not in ("batch", "eval") or "--ray" not in out:
        return out
    from swe_sandbox.batch.ray.settings import LOCAL

    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--ray" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = f"--ray={LOCAL}"
    return out


def select_tasks(tasks: list[Task], filter_re: str | None, slice_spec: str | None, shuffle: bool) -> list[Task]:
    """``selection.select_tasks`` over ``--filter`` / ``--slice`` as given.

    Raises:
        typer.BadParameter: an invalid regular expression or slice.
    """
    from swe_sandbox.batch import selection

    pattern = window = None
    if filter_re:
        try:
            pattern = selection.filter_pattern(filter_re)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--filter'") from None
    if slice_spec:
        try:
            window = selection.parse_slice(slice_spec)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--slice'") from None
    return selection.select_tasks(tasks, pattern, window, shuffle)


@app.command("batch", help=BATCH_HELP)
def batch_command(
    tasks_file: Annotated[Path, typer.Argument(metavar="TASKS", help="Task file (.jsonl, .json or .parquet), or a dataset directory (--split).",
                                               show_default=False)],
    output: Annotated[Path, Opt("-o", "--output", metavar="DIR", help="Output directory (resumed if it exists).",
                                show_default=False)],
    env: Annotated[str | None, Opt("--env", "-e", metavar="NAME|FILE", help=f"Backend preset or YAML file "
                                      f"(default: the config's environment.backend, else {DEFAULT_BACKEND}).",
                                      show_default=False)] = None,
    model: Annotated[str | None, Opt("-m", "--model", metavar="MODEL", help="Model name (model.model_name).",
                                        show_default=False)] = None,
    workers: Annotated[int, Opt("-w", "--workers", min=1, help="Sandboxes at once.")] = 1,
    filter_re: Annotated[str | None, Opt("--filter", metavar="REGEX", help="Only ids matching REGEX (re.match).",
                                            show_default=False)] = None,
    slice_spec: Annotated[str | None, Opt("--slice", metavar="A:B", help="Only tasks A..B-1 (after --filter).",
                                             show_default=False)] = None,
    shuffle: Annotated[bool, Opt("--shuffle", help="Shuffle the tasks (fixed seed) before --filter/--slice.")] = False,
    redo_existing: Annotated[bool, Opt("--redo-existing", help="Run every instance again, once (the same command after an "
                                                        "interruption resumes that redo).")] = False,
    evaluate: Annotated[bool, Opt("--eval", help="Evaluate each patch in a fresh sandbox.")] = False,
    config_file: Annotated[Path | None, Opt("--config", metavar="FILE", help="Run config (default: the shipped "
                                               "config/default.yaml).", show_default=False)] = None,
    overrides: Annotated[list[str] | None, Opt("-c", "--set", metavar="SECTION.KEY=VALUE",
                                                  help="Config override, repeatable (as for run).",
                                                  show_default=False)] = None,
    max_attempts: Annotated[int, Opt("--max-attempts", min=1, help="Attempts per instance in all "
                                                                   "(infrastructure failures are retried).")] = 3,
    cost_limit: Annotated[float, Opt("--cost-limit", min=0, metavar="USD", help="Total cost of this run; then "
                                     "running instances stop (LimitsExceeded) and no new one starts. 0: none.")] = 0.0,
    time_limit: Annotated[float | None, Opt("--instance-time-limit", min=0, metavar="S", help="Wall time per "
                                               "instance, seconds (agent.wall_time_limit_s).", show_default=False)] = None,
    eval_timeout: EvalTimeoutOpt = 1800.0,
    grading: GradingOpt = "strict",
    split: SplitOpt = None,
    image_template: ImageTemplateOpt = None,
    allow_workspace_outside: WorkspaceOutsideOpt = False,
    ray: RayOpt = None,
    rollouts: Annotated[int, Opt("--rollouts", min=1, metavar="K", help=ROLLOUTS_HELP)] = 1,
    reuse: Annotated[bool, Opt("--reuse", help=REUSE_HELP)] = False,
) -> None:
    def body() -> int:
        from swe_sandbox.agent.config import load_run_config
        from swe_sandbox.batch.sandbox import check_task_images
        from swe_sandbox.batch.selection import load_task_file
        from swe_sandbox.preflight import check_model_config, environment_config, require_usable

        tasks = select_tasks(load_task_file(tasks_file, image_template, split, allow_workspace_outside), filter_re, slice_spec, shuffle)
        config = load_run_config(config_file, list(overrides or []))
        if model:
            config["model"]["model_name"] = model
        if time_limit is not None:
            config["agent"]["wall_time_limit_s"] = time_limit
        check_model_config(config["model"])
        _check_agent_config(config["agent"])
        env_data = environment_config(str(env or config["environment"].get("backend") or DEFAULT_BACKEND),
                                      config["environment"])
        require_usable(str(env_data.get("backend")))
        check_task_images(tasks, env_data)
        options = run_options(workers=workers, evaluate=evaluate, max_attempts=max_attempts,
                              redo_existing=redo_existing, cost_limit=cost_limit, eval_timeout=eval_timeout,
                              grading=grading, ray=ray, rollouts=rollouts, reuse=reuse)
        return _run(tasks, output, config, env_data, options)

    raise typer.Exit(guarded(body, on_interrupt=SAVED_ON_INTERRUPT))


def run_options(*, ray: str | None, **settings: Any) -> RunOptions:
    """The run's ``RunOptions`` from the command's options (``--ray``: ``executor`` and ``ray_address``).

    Raises:
        ConfigError: a bad value (names the field).
    """
    from swe_sandbox.batch.options import RunOptions
    from swe_sandbox.config import validate

    where = {"executor": "threads"} if ray is None else {"executor": "ray", "ray_address": ray}
    return validate(RunOptions, {**settings, **where}, section="run")


def _check_agent_config(agent: dict[str, Any]) -> None:
    from swe_sandbox.agent.default import AgentConfig
    from swe_sandbox.config import validate

    validate(AgentConfig, agent, section="agent")


def _run(tasks: list[Task], output: Path, config: dict[str, Any], env_data: dict[str, Any],
         options: RunOptions) -> int:
    from swe_sandbox.batch.batch_run import run_batch
    from swe_sandbox.batch.live import make_progress
    from swe_sandbox.batch.records import sample_label

    run_batch(tasks, output, run_config=config, env_config=env_data, options=options, progress=make_progress())
    _print_summary(output)
    samples = [None] if options.rollouts == 1 else range(options.rollouts)
    return _exit_for(output, [sample_label(t.instance_id, s) for t in tasks for s in samples])


def _exit_for(output: Path, labels: list[str]) -> int:
    """0 when every one of ``labels`` (instance ids, or ``id/sample``) is done according to
    ``results.jsonl``, else 1."""
    from swe_sandbox.batch.records import RESULTS_FILE, ResultsLog, ResumeState

    state = ResumeState(ResultsLog(output / RESULTS_FILE).read())
    return EXIT_OK if all(state.is_done(i) for i in labels) else EXIT_FAILED


def _print_summary(directory: Path) -> None:
    from swe_sandbox.batch.report import render, summarize

    typer.echo(render(summarize(directory), directory))


#: What a batch's or an evaluation's Ctrl-C adds to ``swe-sandbox: interrupted``.
SAVED_ON_INTERRUPT = "; finished instances are saved, the rest run again on resume"


@app.command("eval", help=EVAL_HELP)
def eval_command(
    preds_file: Annotated[Path, typer.Argument(metavar="PREDS", help="Predictions (preds.json, .json or .jsonl).",
                                               show_default=False)],
    tasks_file: Annotated[Path, Opt("--tasks", metavar="TASKS", help="Task file (.jsonl, .json or .parquet), or a dataset directory (--split).", show_default=False)],
    output: Annotated[Path, Opt("-o", "--output", metavar="DIR", help="Output directory.", show_default=False)],
    env: Annotated[str, Opt("--env", "-e", metavar="NAME|FILE", help="Backend preset or YAML file.")] = DEFAULT_BACKEND,
    workers: Annotated[int, Opt("-w", "--workers", min=1, help="Sandboxes at once.")] = 1,
    overrides: Annotated[list[str] | None, Opt("-c", "--set", metavar="environment.KEY=VALUE",
                                                  help="Environment override, repeatable.", show_default=False)] = None,
    redo_existing: Annotated[bool, Opt("--redo-existing", help="Evaluate done instances again.")] = False,
    max_attempts: Annotated[int, Opt("--max-attempts", min=1, help="Attempts per instance in all.")] = 3,
    eval_timeout: EvalTimeoutOpt = 1800.0,
    grading: GradingOpt = "strict",
    split: SplitOpt = None,
    image_template: ImageTemplateOpt = None,
    allow_workspace_outside: WorkspaceOutsideOpt = False,
    ray: RayOpt = None,
) -> None:
    def body() -> int:
        from swe_sandbox.batch.eval_run import match_predictions, run_eval
        from swe_sandbox.batch.predictions import load_predictions
        from swe_sandbox.batch.sandbox import check_task_images
        from swe_sandbox.batch.selection import load_task_file, predicted_tasks
        from swe_sandbox.config import apply_overrides, load_environment_config
        from swe_sandbox.preflight import require_usable

        tasks = load_task_file(tasks_file, image_template, split, allow_workspace_outside)
        preds = load_predictions(preds_file)
        match_predictions(preds, tasks)
        env_data = apply_overrides(load_environment_config(env), list(overrides or []), section="environment")
        require_usable(str(env_data.get("backend")))
        check_task_images(predicted_tasks(tasks, preds), env_data)
        options = run_options(workers=workers, max_attempts=max_attempts, redo_existing=redo_existing,
                              eval_timeout=eval_timeout, grading=grading, ray=ray)
        report = run_eval(preds, tasks, output, env_config=env_data, options=options)
        _print_summary(output)
        return _exit_for(output, report["submitted_ids"])

    raise typer.Exit(guarded(body, on_interrupt=SAVED_ON_INTERRUPT))


@app.command("report", help=REPORT_HELP)
def report_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="A batch or eval output directory.",
                                              show_default=False)],
    as_json: Annotated[bool, Opt("--json", help="Print the summary as JSON.")] = False,
) -> None:
    import json

    from swe_sandbox.batch.report import render, summarize

    try:
        summary = summarize(directory)
    except FileNotFoundError:
        echo_err(f"swe-sandbox: report: {directory} is not a directory")
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(json.dumps(summary, indent=2) if as_json else render(summary, directory))


batch_command.__doc__ = BATCH_HELP
eval_command.__doc__ = EVAL_HELP
report_command.__doc__ = REPORT_HELP
