"""``RunOptions``: the settings of one batch or evaluation run, from the CLI to the workers.

One model carries them: ``run_batch`` / ``run_eval`` take it (or build it from their keyword
arguments), each unit of work (``swe_sandbox.batch.work``) carries it to the thread or the Ray
worker that runs it.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swe_sandbox.batch.evaluation import DEFAULT_EVAL_TIMEOUT_S, GRADING_POLICIES, STRICT
from swe_sandbox.batch.ray.settings import LOCAL, NOT_INSTALLED

#: Attempts per instance in all, infrastructure failures included (``--max-attempts``).
DEFAULT_MAX_ATTEMPTS = 3


class RunOptions(BaseModel):
    """How a batch (or an evaluation) runs. Frozen; unknown fields are refused.

    Build it with ``swe_sandbox.config.validate(RunOptions, {...}, section="run")`` to get a
    ``ConfigError`` naming the bad field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    workers: int = Field(default=1, ge=1)
    """Units of work at once on this machine; with ``executor="ray"`` and ``ray_address="local"``
    the local Ray's slots (a cluster offers its own)."""
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1)
    """Attempts per instance in all, infrastructure failures included; likewise evaluations without
    a verdict. An instance out of attempts gets an empty ``preds.json`` entry (batch)."""
    redo_existing: bool = False
    """Run every instance again once, done or not (earlier lines stay in ``results.jsonl``)."""
    evaluate: bool = False
    """(batch) Evaluate each patch in a fresh sandbox once its agent is done."""
    eval_timeout: float = Field(default=DEFAULT_EVAL_TIMEOUT_S, gt=0)
    """Seconds for each evaluation's test command (a task's ``eval_timeout`` wins)."""
    cost_limit: float = Field(default=0.0, ge=0)
    """(batch) Total USD for the run, 0: none. Once reached, running agents stop with
    ``LimitsExceeded`` and no new instance starts."""
    grading: str = STRICT
    """The grading policy, ``strict`` or ``swebench`` (``swe_sandbox.batch.evaluation``; a task's
    ``grading`` field wins)."""
    rollouts: int = Field(default=1, ge=1)
    """(batch) Samples per instance (``--rollouts K``): K > 1 runs each instance as a group, its
    sandbox prepared once and the samples forked from its snapshot (``swe_sandbox.batch.groups``);
    each sample has its own trajectory, result line, patch and evaluation. 1: one rollout, as ever."""
    reuse: bool = False
    """(batch, ``rollouts`` > 1) Run a group's samples one after another in its prepared sandbox,
    reset to the snapshot between them (``--reuse``), instead of forking one sandbox per sample."""
    executor: Literal["threads", "ray"] = "threads"
    """``threads`` (this machine) or ``ray``: one Ray task per unit of work (needs ``[ray]``)."""
    ray_address: str = LOCAL
    """With ``ray``: ``auto``, ``host:port`` of a running cluster's head, or ``local`` (a local Ray
    started for the run with ``workers`` slots)."""

    @field_validator("executor")
    @classmethod
    def _ray_is_installed(cls, value: str) -> str:
        """``ray`` needs Ray here: refused when the options are made, before anything runs."""
        if value == "ray" and find_spec("ray") is None:
            raise ValueError(NOT_INSTALLED)
        return value

    @model_validator(mode="after")
    def _reuse_needs_a_group(self) -> RunOptions:
        if self.reuse and self.rollouts == 1:
            raise ValueError("reuse: needs rollouts > 1 (--reuse with --rollouts K)")
        return self

    @field_validator("grading")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in GRADING_POLICIES:
            raise ValueError(f"{value!r} is not one of {', '.join(GRADING_POLICIES)}")
        return value
