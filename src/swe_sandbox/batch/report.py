"""``swe-sandbox report DIR``: a summary of a batch or eval directory, running or finished.

Read only from the files (``results.jsonl`` line by line, tolerating a line being written;
``report.json`` and ``preds.json``, replaced atomically), so it works while a batch writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swe_sandbox.batch import records as rec
from swe_sandbox.terminal import escape_controls


def summarize(output_dir: str | Path) -> dict[str, Any]:
    """Counts, rates, cost and time of a batch (or eval) directory.

    Returns:
        dict: ``instances`` (with a record), ``samples`` (``--rollouts K``: samples with a record;
        then ``done``, ``not_done``, the counts and rates below are of samples; else None),
        ``done``, ``not_done`` (infrastructure failures so
        far), ``attempts``, ``exit_status`` ({status: count} of each instance's final record),
        ``eval_status`` (likewise, evaluated ones), ``resolved``, ``evaluated``, ``resolved_rate``
        (of evaluated; None when none), ``cost_usd`` (every attempt), ``api_calls``, ``steps``,
        ``agent_time_s`` (sum of attempts' durations), ``wall_time_s`` (first start to last
        finish), ``instances_per_minute`` (done / wall time), ``predictions`` and ``report``
        (``report.json``'s counts, when present).

    Raises:
        FileNotFoundError: ``output_dir`` is not a directory.
    """
    directory = Path(output_dir)
    if not directory.is_dir():
        raise FileNotFoundError(2, "no such directory", str(directory))
    records = rec.ResultsLog(directory / rec.RESULTS_FILE).read()
    final = rec.ResumeState(records).final
    done = [r for r in final.values() if r.done]
    evaluated = [r for r in done if r.eval_status is not None]
    resolved = sum(bool(r.resolved) for r in evaluated)
    grouped = any(r.sample is not None for r in final.values())
    summary: dict[str, Any] = {
        "instances": len({r.instance_id for r in final.values()}), "samples": len(final) if grouped else None,
        "done": len(done), "not_done": len(final) - len(done), "attempts": len(records),
        "exit_status": _count(r.exit_status for r in final.values()),
        "eval_status": _count(r.eval_status for r in evaluated),
        "resolved": resolved, "evaluated": len(evaluated),
        "resolved_rate": round(resolved / len(evaluated), 4) if evaluated else None,
        "cost_usd": round(sum(r.cost for r in records), 6), "api_calls": sum(r.api_calls for r in records),
        "steps": sum(r.steps for r in records), "agent_time_s": round(sum(r.duration_s for r in records), 3),
    }
    summary.update(_timing(records, len(done)))
    preds = rec.read_json(directory / rec.PREDS_FILE)
    summary["predictions"] = len(preds) if isinstance(preds, dict) else None
    report = rec.read_json(directory / rec.REPORT_FILE)
    summary["report"] = None
    if isinstance(report, dict):
        summary["report"] = {k: v for k, v in report.items() if not k.endswith("_ids") and k != "group_rewards"}
    return summary


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _timing(records: list[rec.AttemptRecord], done: int) -> dict[str, Any]:
    starts = [r.started_at for r in records if r.started_at]
    ends = [r.finished_at for r in records if r.finished_at]
    wall = max(ends) - min(starts) if starts and ends else 0.0
    rate = done / (wall / 60) if wall > 0 else None
    return {"wall_time_s": round(wall, 3), "instances_per_minute": round(rate, 3) if rate else None}


def render(summary: dict[str, Any], directory: str | Path) -> str:
    """The summary as a few plain lines, control characters escaped (statuses come from a results
    file, which anything may have written)."""
    samples = f" ({summary['samples']} samples)" if summary.get("samples") else ""
    lines = [f"{directory}: {summary['instances']} instances with results{samples}, {summary['done']} done, "
             f"{summary['not_done']} not done (infrastructure failures), {summary['attempts']} attempts"]
    if summary["exit_status"]:
        lines.append("exit status: " + ", ".join(f"{k} {v}" for k, v in summary["exit_status"].items()))
    if summary["evaluated"]:
        rate = f"{100 * summary['resolved_rate']:.1f}%"
        lines.append(f"resolved: {summary['resolved']}/{summary['evaluated']} ({rate}); eval: "
                     + ", ".join(f"{k} {v}" for k, v in summary["eval_status"].items()))
    speed = f", {summary['instances_per_minute']:.2f} instances/min" if summary["instances_per_minute"] else ""
    lines.append(f"cost: ${summary['cost_usd']:.4f}, api calls: {summary['api_calls']}, steps: {summary['steps']}")
    lines.append(f"time: {summary['wall_time_s']:.1f} s wall, {summary['agent_time_s']:.1f} s in attempts{speed}")
    if summary["report"]:
        counts = summary["report"]
        lines.append("report.json: " + ", ".join(f"{k.removesuffix('_instances')} {v}" for k, v in counts.items()
                                                 if k.endswith("_instances")))
    if summary["report"] and summary["report"].get("rollouts"):
        lines.append(_group_line(summary["report"]))
    return escape_controls("\n".join(lines))


def _group_line(report: dict[str, Any]) -> str:
    """pass@1, pass@K, avg@K and the time split of a ``--rollouts K`` report."""
    k, timing = report["rollouts"], report.get("timing") or {}

    def shown(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}"

    return (f"groups of {k}: pass@1 {shown(report.get('pass@1'))}, pass@{k} {shown(report.get(f'pass@{k}'))}, "
            f"avg@{k} {shown(report.get(f'avg@{k}'))} over {report.get('scored_tasks', 0)} tasks; "
            f"preparing {timing.get('prepare_s', 0):.1f} s, forking {timing.get('fork_s', 0):.1f} s")
