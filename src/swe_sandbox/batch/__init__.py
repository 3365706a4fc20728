"""Batch runs and evaluation (DESIGN.md §7): many tasks, one sandbox each, resumable.

    from swe_sandbox.agent import load_run_config
    from swe_sandbox.batch import load_tasks, rollout, run_batch

    tasks = load_tasks("tasks.jsonl")                    # SWE-bench-style instances
    config = load_run_config(overrides=["model.model_name=anthropic/claude-sonnet-4-5"])
    result = rollout(tasks[0], config, {"backend": "bwrap"})           # one task: a value
    print(result.exit_status, result.cost, result.resolved, result.reward)
    run_batch(tasks, "runs/exp1", run_config=config, env_config="docker", workers=8, evaluate=True)

Importing this package imports nothing else; names load on first use.
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
