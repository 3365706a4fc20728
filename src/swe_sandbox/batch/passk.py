"""pass@k, avg@k and the group rewards of a ``--rollouts K`` run (``report.json``'s group keys).

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained
on Code", section 2.1): with ``n`` samples of a task of which ``c`` are correct,
``pass@k = 1 - C(n - c, k) / C(n, k)``, the chance that ``k`` of the ``n`` samples drawn without
replacement hold at least one correct one; averaged over tasks. It is computed as the product
``1 - prod_{i = n-c+1}^{n} (1 - k / i)``, which never builds the large binomials.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from swe_sandbox.batch.records import AttemptRecord, sample_label


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task: ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: samples of the task (>= 1).
        c: correct ones among them (0 .. n).
        k: samples drawn (1 .. n).

    Raises:
        ValueError: not ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a correct one
        return 1.0
    missed = 1.0
    for i in range(n - c + 1, n + 1):
        missed *= 1.0 - k / i
    return 1.0 - missed


def group_rewards(instance_ids: Iterable[str], k: int, final: dict[str, AttemptRecord],
                  exhausted: set[str]) -> dict[str, list[float | None]]:
    """``{instance_id: [r0, ..., rK-1]}``: each sample's reward from its final record (the GRPO
    shape); a sample out of attempts is 0.0, one without a verdict yet None.

    Args:
        final: the final record of each label (``records.ResumeState.final``).
        exhausted: labels out of attempts (``instance_id/sample``).
    """
    out: dict[str, list[float | None]] = {}
    for instance_id in instance_ids:
        row: list[float | None] = []
        for sample in range(k):
            label = sample_label(instance_id, sample)
            record = final.get(label)
            reward = record.reward if record is not None and record.done else None
            row.append(0.0 if label in exhausted and reward is None else reward)
        out[instance_id] = row
    return out


def group_report(rewards: dict[str, list[float | None]], k: int,
                 records: Iterable[AttemptRecord]) -> dict[str, Any]:
    """The group keys of ``report.json``.

    Returns:
        dict: ``rollouts`` (K); ``pass@1`` and ``pass@K`` (the unbiased estimator, a sample
        correct when its reward is 1.0) and ``avg@K`` (mean reward), over the ``scored_tasks``
        whose K samples all have a reward (None when there are none); ``group_rewards``
        (``rewards``); ``timing`` (``time_split``).
    """
    scored = {i: row for i, row in rewards.items() if all(r is not None for r in row)}
    report: dict[str, Any] = {"rollouts": k, "scored_tasks": len(scored)}
    for at in sorted({1, k}):
        report[f"pass@{at}"] = _mean([pass_at_k(k, sum(r == 1.0 for r in row), at) for row in scored.values()])
    report[f"avg@{k}"] = _mean([float(r) for row in scored.values() for r in row if r is not None])
    report["group_rewards"] = rewards
    report["timing"] = time_split(records)
    return report


def time_split(records: Iterable[AttemptRecord]) -> dict[str, Any]:
    """Time spent preparing the groups' sandboxes against forking (or resetting) the samples',
    over every attempt: ``prepare_s`` (summed once per preparation), ``fork_s`` (summed over the
    samples), each also per sample (``..._per_sample``: over ``samples`` lines), and ``groups``
    (preparations made)."""
    prepared: dict[str, float] = {}
    forks: list[float] = []
    for record in records:
        if record.group is None:
            continue
        prepared.setdefault(record.group, record.prepare_s or 0.0)
        forks.append(record.fork_s or 0.0)
    prepare, fork, samples = sum(prepared.values()), sum(forks), len(forks)
    return {"groups": len(prepared), "samples": samples, "prepare_s": round(prepare, 3), "fork_s": round(fork, 3),
            "prepare_s_per_sample": round(prepare / samples, 3) if samples else None,
            "fork_s_per_sample": round(fork / samples, 3) if samples else None}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None
