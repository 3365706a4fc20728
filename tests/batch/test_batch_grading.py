"""Our grading equals the ``swebench`` package's on the same logs: per-instance reports
(``get_eval_report``) and the run report (``make_run_report``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_sandbox.batch import grading
from swe_sandbox.batch.evaluation import grade
from swe_sandbox.batch.tasks import Task

swebench_grading = pytest.importorskip("swebench.harness.grading")
from swebench.types import TestSpec as SweSpec  # noqa: E402

F2P = ["t.py::test_fixed", "t.py::test_param[a-", "t.py::test_skip_f2p"]
P2P = ["t.py::test_keep", "t.py::test_skip_p2p", "t.py::test_xfail"]
ALL_PASS = """PASSED t.py::test_fixed
PASSED t.py::test_param[a-b]
PASSED t.py::test_skip_f2p
PASSED t.py::test_keep
SKIPPED t.py::test_skip_p2p
XFAIL t.py::test_xfail - reason
SKIPPED [2] t.py:10: unconditional skip
"""
#: name -> (eval output, exit status, timed out)
CASES = {
    "all_pass": (ALL_PASS, 0, False),
    "f2p_fails": (ALL_PASS.replace("PASSED t.py::test_fixed", "FAILED t.py::test_fixed - assert 1 == 2"), 1, False),
    "f2p_skipped": (ALL_PASS.replace("PASSED t.py::test_skip_f2p", "SKIPPED t.py::test_skip_f2p"), 0, False),
    "p2p_missing": (ALL_PASS.replace("PASSED t.py::test_keep\n", ""), 0, False),
    "p2p_error": (ALL_PASS.replace("PASSED t.py::test_keep", "ERROR t.py::test_keep"), 1, False),
    "param_disagree": (ALL_PASS + "FAILED t.py::test_param[a-c]\n", 1, False),
    "no_tests": ("collected 0 items\n", 0, False),
    "exit_code_lies": (ALL_PASS, 2, False),  # non-zero but nothing failed: the log is not trusted
    "timeout": (ALL_PASS, -1, True),
}


def task(instance_id: str) -> Task:
    return Task(instance_id=instance_id, problem_statement="p", eval_command="pytest -rA",
                FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P)


def swebench_report(instance_id: str, log: Path, patch: str | None) -> dict:
    spec = SweSpec(instance_id=instance_id, image="", eval_script_list=[], repo="r", version="1",
                    FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P, log_parser="parse_log_pytest", eval_type="pass_and_fail")
    pred = {"instance_id": instance_id, "model_name_or_path": "m", "model_patch": patch}
    report = swebench_grading.get_eval_report(spec, pred, str(log), include_tests_status=True)
    report[instance_id].pop("infra_failure_reason", None)
    return report


@pytest.mark.parametrize("case", sorted(CASES))
def test_instance_report_equals_swebench(case, tmp_path):
    output, code, timed_out = CASES[case]
    log = tmp_path / "test_output.txt"
    log.write_text(grading.test_log(output, code, timed_out, before=grading.APPLY_PATCH_PASS))
    ours = grade(task(case), "diff", output, code, timed_out)
    assert ours.report == swebench_report(case, log, "diff")
    assert ours.resolved == (case == "all_pass")


def test_run_report_equals_swebench(tmp_path, monkeypatch):
    from swebench.harness.reporting import make_run_report

    monkeypatch.chdir(tmp_path)
    ids = sorted(CASES) + ["empty", "none", "missing", "patch_failed"]
    preds = {i: {"instance_id": i, "model_name_or_path": "m", "model_patch": "diff"} for i in ids if i != "missing"}
    preds["empty"]["model_patch"], preds["none"]["model_patch"] = "", None
    outcomes = {"patch_failed": "patch_failed"}
    for case, (output, code, timed_out) in CASES.items():
        result = grade(task(case), "diff", output, code, timed_out)
        outcomes[case] = result.status
        if result.status in ("resolved", "unresolved"):  # SWE-bench writes no report for a timeout
            folder = Path("logs/run_evaluation/run/m") / case
            folder.mkdir(parents=True)
            (folder / "report.json").write_text(json.dumps(result.report))
    theirs = json.loads(make_run_report(preds, [{"instance_id": i} for i in ids], "run").read_text())
    ours = grading.run_report(ids, preds, outcomes)
    shared = {k: v for k, v in theirs.items() if k in ours}
    assert {k: ours[k] for k in shared} == shared
    assert len(shared) >= 15 and ours["resolved_ids"] == ["all_pass"]
    assert ours["eval_timeout_ids"] == ["timeout"] and ours["patch_failed_ids"] == ["patch_failed"]
