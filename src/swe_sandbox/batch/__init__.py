"""Batch runs and evaluation (DESIGN.md §7): many tasks, one sandbox each, resumable.

    from swe_sandbox.agent import load_run_config
    from swe_sandbox.batch import load_tasks, rollout, run_batch

    tasks = load_tasks("tasks.jsonl")                    # SWE-bench-style instances
    config = load_run_config(overrides=["model.model_name=anthropic/claude-sonnet-4-5"])
    result = rollout(tasks[0], config, {"backend": "bwrap"})           # one task: a value
    result = await arollout(tasks[0], config, {"backend": "bwrap"})    # the same in asyncio code
    group = rollout_group(tasks[0], 8, config, {"backend": "docker"})  # K samples from one snapshot
    print(result.exit_status, result.cost, result.resolved, result.reward)
    run_batch(tasks, "runs/exp1", run_config=config, env_config="docker", workers=8, evaluate=True)

Importing this package imports nothing else; names load on first use.

=======================  ======================================================================
module                   what
=======================  ======================================================================
``tasks``                task files and datasets (JSONL, JSON, Parquet, SWE-bench's shapes)
``jsonfiles``            the JSON readers under task and predictions files
``predictions``          predictions files (``preds.json``, JSONL)
``selection``            which tasks a run takes (``--filter``, ``--slice``, ``--shuffle``)
``images``, ``pulls``    the images tasks name, their templates; pulling them ahead of a run
``sandbox``              a task's sandbox: its config, workspace and ``setup_command``
``rollouts``             one rollout: the agent to an exit status, then evaluation (a value)
``arollouts``            ``arollout``: the same awaited, model calls on the caller's loop
                         (``arollout_group``: a group awaited)
``groups``               ``rollout_group``: K rollouts of one task from one prepared sandbox
``passk``                pass@k (Chen et al. 2021), avg@k and the group rewards of a report
``evaluation``           one evaluation: the patch checked, applied, tested and graded
``integrity/``           what keeps the grade the patch's: patch policy, protected paths, the
                         in-sandbox pytest plugin and its verifier
``grading``              SWE-bench's report shape; ``swebench_instances``/``_registry``: its harness
``options``              ``RunOptions``: a run's settings, from the CLI to the workers
``work``                 units of work (rollout, re-evaluation, evaluation) with ``run(context)``
``executors``            where units run: ``Executor``, ``ThreadExecutor`` (``ray/``: on Ray)
``driver``               the one loop: units on an executor, each result committed
``batch_run``            ``run_batch``: the batch's plan (resume, ``preds.json``, reports)
``eval_run``             ``run_eval``: the evaluation run's plan
``records``              the output directory's files: ``results.jsonl``, ``preds.json``, resume
``control``              ``Cancellation`` (Ctrl-C) and ``CostBudget`` (the run's cost limit)
``progress``, ``live``   what a run shows while it goes (``live``: rich's live table)
``report``               the summary of an output directory (``swe-sandbox report``)
``ray/``                 Ray alone: ``settings`` (no Ray import), ``executor``, ``worker``
=======================  ======================================================================
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Task": "swe_sandbox.batch.tasks",
    "TaskFileError": "swe_sandbox.batch.tasks",
    "load_tasks": "swe_sandbox.batch.tasks",
    "load_predictions": "swe_sandbox.batch.predictions",
    "rollout": "swe_sandbox.batch.rollouts",
    "RolloutResult": "swe_sandbox.batch.rollouts",
    "arollout": "swe_sandbox.batch.arollouts",
    "arollout_group": "swe_sandbox.batch.arollouts",
    "rollout_group": "swe_sandbox.batch.groups",
    "GroupResult": "swe_sandbox.batch.groups",
    "pass_at_k": "swe_sandbox.batch.passk",
    "evaluate": "swe_sandbox.batch.evaluation",
    "EvalResult": "swe_sandbox.batch.evaluation",
    "run_batch": "swe_sandbox.batch.batch_run",
    "RunOptions": "swe_sandbox.batch.options",
    "run_eval": "swe_sandbox.batch.eval_run",
    "Cancellation": "swe_sandbox.batch.control",
    "summarize": "swe_sandbox.batch.report",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
