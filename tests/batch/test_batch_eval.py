"""``swe-sandbox eval`` on hand-made predictions, in fresh bwrap sandboxes: resolved, unresolved,
a patch that does not apply, an empty patch, an eval timeout (the task's own); the logs graded as
``swebench`` does."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import sys

import pytest
from batch_fixtures import bwrap_ok, calc_repo, calc_task, fix_patch, wait_for, write_tasks  # noqa: F401 - fixtures

from swe_sandbox.batch import load_predictions, load_tasks, run_eval
from swe_sandbox.batch.records import ResultsLog

from helpers.interrupts import interrupt_when
from helpers.variants import require_backend

pytestmark = pytest.mark.bwrap
WRONG = "def add(a, b):\n    return a * b\n"


def patch_of(fix: str, new_body: str) -> str:
    return fix.replace("+    return a + b", "+" + new_body.splitlines()[1])


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, calc_repo, fix_patch):
    require_backend("bwrap")
    root = tmp_path_factory.mktemp("eval")
    tasks = write_tasks(root / "tasks.jsonl", [
        calc_task("resolved", calc_repo), calc_task("unresolved", calc_repo), calc_task("no_apply", calc_repo),
        calc_task("empty", calc_repo), calc_task("slow", calc_repo, eval_command="sleep 30", eval_timeout=2),
        calc_task("fuzzy", calc_repo), calc_task("reward", calc_repo, FAIL_TO_PASS=[], PASS_TO_PASS=[],
                                                 test_patch="", eval_command="python3 -c 'import calc; assert calc.add(1, 1) == 2'",
                                                 log_parser="exit_status")])
    fuzzy = fix_patch.replace(" def add(a, b):", " def add(x, y):")  # a wrong context line: only patch --fuzz applies it
    preds = {"resolved": fix_patch, "unresolved": patch_of(fix_patch, WRONG), "empty": "", "slow": fix_patch,
             "no_apply": fix_patch.replace("-    return a - b", "-    return a / b"), "fuzzy": fuzzy, "reward": fix_patch}
    preds_file = root / "preds.json"
    preds_file.write_text(json.dumps({k: {"model_name_or_path": "m", "instance_id": k, "model_patch": v}
                                      for k, v in preds.items()}))
    report = run_eval(load_predictions(preds_file), load_tasks(tasks), root / "out", env_config="bwrap",
                      workers=2)  # the task's own eval_timeout (2 s) bounds "slow"
    return root, report


def test_outcomes_are_counted_apart(evaluated):
    root, report = evaluated
    assert report["resolved_ids"] == ["fuzzy", "resolved", "reward"]
    assert report["unresolved_ids"] == ["unresolved"]
    assert report["empty_patch_ids"] == ["empty"]
    assert report["patch_failed_ids"] == ["no_apply"] and report["eval_timeout_ids"] == ["slow"]
    assert report["error_ids"] == ["no_apply", "slow"]
    assert json.loads((root / "out" / "report.json").read_text()) == report
    eval_dir = root / "out" / "resolved" / "eval"
    assert (eval_dir / "patch.diff").read_text().startswith("diff --git a/calc.py")
    assert not (root / "out" / "slow" / "eval" / "report.json").exists()  # SWE-bench: no report = error
    assert "Tests Timed Out" in (root / "out" / "slow" / "eval" / "test_output.txt").read_text()
    assert "Applied Patch (patch --batch --forward --fuzz=5" in (root / "out" / "fuzzy" / "eval" / "test_output.txt").read_text()


def test_logs_grade_the_same_with_swebench(evaluated):
    root, _ = evaluated
    grading = pytest.importorskip("swebench.harness.grading")
    from swebench.types import TestSpec as SweSpec

    for instance_id in ("resolved", "unresolved"):
        folder = root / "out" / instance_id / "eval"
        spec = SweSpec(instance_id=instance_id, image="", eval_script_list=[], repo="r", version="1",
                       FAIL_TO_PASS=["check.py::test_add"], PASS_TO_PASS=["check.py::test_zero"],
                       log_parser="parse_log_pytest", eval_type="pass_and_fail")
        pred = {"instance_id": instance_id, "model_name_or_path": "m", "model_patch": (folder / "patch.diff").read_text()}
        theirs = grading.get_eval_report(spec, pred, str(folder / "test_output.txt"), include_tests_status=True)
        ours = json.loads((folder / "report.json").read_text())
        assert ours[instance_id].pop("grading")["policy"] == "swebench"  # our entry on top of SWE-bench's
        assert ours == theirs


def test_rerun_resumes_and_cli_rejects_bad_predictions(evaluated, tmp_path):
    root, report = evaluated
    lines = (root / "out" / "results.jsonl").read_text().splitlines()
    argv = [sys.executable, "-m", "swe_sandbox", "eval", str(root / "preds.json"), "--tasks", str(root / "tasks.jsonl"),
            "-o", str(root / "out"), "--eval-timeout", "2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert (root / "out" / "results.jsonl").read_text().splitlines() == lines  # nothing evaluated again
    assert "resolved: 3/7" in done.stdout

    bad = tmp_path / "preds.json"
    bad.write_text('{"resolved": {"model_patch": "x"}\n')
    argv[4:7] = [str(bad), "--tasks", str(root / "tasks.jsonl")]
    argv[argv.index("-o") + 1] = str(tmp_path / "new")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and f"{bad} line 2: not valid JSON" in done.stderr, done.stderr
    assert not (tmp_path / "new").exists()


def test_a_changed_prediction_is_graded_again(bwrap_ok, calc_repo, fix_patch, tmp_path):
    """A verdict is tied to the sha256 of the patch it graded: ``eval`` over an old directory with a
    new prediction grades it again (it kept the old verdict before); the same prediction again
    grades nothing; another grading policy grades again."""
    tasks = load_tasks(write_tasks(tmp_path / "tasks.jsonl", [calc_task("t", calc_repo, grading=None)]))

    def evaluate(patch: str, grading: str = "swebench") -> dict:
        preds = [{"instance_id": "t", "model_name_or_path": "m", "model_patch": patch}]
        return run_eval(preds, tasks, tmp_path / "out", env_config="bwrap", grading=grading)

    assert evaluate(patch_of(fix_patch, WRONG))["unresolved_ids"] == ["t"]
    assert evaluate(fix_patch)["resolved_ids"] == ["t"]
    assert evaluate(fix_patch)["resolved_ids"] == ["t"]
    records = ResultsLog(tmp_path / "out" / "results.jsonl").read()
    assert [(r.eval_status, r.grading) for r in records] == [("unresolved", "swebench"), ("resolved", "swebench")]
    assert records[1].patch_sha256 == hashlib.sha256(fix_patch.encode()).hexdigest()
    assert json.loads((tmp_path / "out" / "t" / "eval" / "report.json").read_text())["t"]["grading"][
        "patch_sha256"] == records[1].patch_sha256
    assert evaluate(fix_patch, grading="strict")["unresolved_ids"] == ["t"]  # check.py is not pytest: no proof
    assert len(ResultsLog(tmp_path / "out" / "results.jsonl").read()) == 3
    # back to an earlier patch and policy: graded again, not the older verdict of it taken back (a new
    # user's finding: the report said the old verdict while eval/ kept the newer one)
    assert evaluate(patch_of(fix_patch, WRONG))["unresolved_ids"] == ["t"]
    assert evaluate(fix_patch)["resolved_ids"] == ["t"]
    records = ResultsLog(tmp_path / "out" / "results.jsonl").read()
    assert [r.eval_status for r in records] == ["unresolved", "resolved", "unresolved", "unresolved", "resolved"]
    assert [r.attempt for r in records] == [1, 2, 3, 4, 5]
    report = json.loads((tmp_path / "out" / "t" / "eval" / "report.json").read_text())["t"]
    assert report["resolved"] and report["grading"]["policy"] == "swebench"


def test_ctrl_c_stops_the_evaluations_under_way(bwrap_ok, calc_repo, fix_patch, tmp_path):
    """Ctrl-C while two evaluations run a 120 s ``eval_command``: their sandboxes are closed at once,
    ``eval`` exits 130 within seconds, nothing is recorded (they run again on resume)."""
    marker = f"{120 + secrets.randbelow(10**6) / 10**7:.7f}"  # `sleep <marker>`: found on the host
    tasks = write_tasks(tmp_path / "tasks.jsonl", [calc_task(f"c{n}", calc_repo, eval_command=f"sleep {marker}")
                                                    for n in range(2)])
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({f"c{n}": {"model_name_or_path": "m", "instance_id": f"c{n}", "model_patch": fix_patch}
                                 for n in range(2)}))

    def sleeping() -> list[str]:
        found = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
        return found.stdout.split()

    done = interrupt_when(["eval", str(preds), "--tasks", str(tasks), "-o", str(tmp_path / "out"), "--env", "bwrap",
                           "-w", "2"], lambda: len(sleeping()) == 2)
    assert done.returncode == 130, done.stderr
    assert done.exit_s < 10, done
    assert wait_for(lambda: not sleeping(), 10), sleeping()
    assert ResultsLog(tmp_path / "out" / "results.jsonl").read() == []
