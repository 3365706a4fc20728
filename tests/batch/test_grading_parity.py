"""Parity on honest patches: on the bundled suite (real projects, real pytest, bwrap), the strict
policy and ``--grading swebench`` give the same verdicts, and both equal what the ``swebench``
package's own grading computes from our logs (``get_eval_report``)."""

from __future__ import annotations

import json

import pytest
from suite_fixtures import BUILD, SUBSET, suite  # noqa: F401 - fixture

from swe_sandbox.batch import load_tasks, run_eval
from swe_sandbox.config import load_environment_config

from helpers.variants import require_backend

pytestmark = pytest.mark.bwrap
swebench_grading = pytest.importorskip("swebench.harness.grading")
from swebench.types import TestSpec as SweSpec  # noqa: E402


def no_fix(task) -> str:
    """An honest patch that applies and fixes nothing: a comment added to the gold patch's first file."""
    first = next(line for line in task.model_extra["patch"].splitlines() if line.startswith("+++ b/"))[6:]
    return (f"diff --git a/{first} b/{first}\n--- a/{first}\n+++ b/{first}\n@@ -1 +1,2 @@\n"
            f"+# looked at it\n {_first_line(task, first)}\n")


def _first_line(task, path: str) -> str:
    return (BUILD / "workspaces" / task.instance_id / path).read_text().splitlines()[0]


@pytest.fixture(scope="module")
def graded(suite, tmp_path_factory):
    require_backend("bwrap")
    tasks = load_tasks(suite / "tasks-workspace.jsonl")
    preds = [{"instance_id": t.instance_id, "model_name_or_path": "gold", "model_patch": t.model_extra["patch"]}
             for t in tasks]
    wrong = [t.model_copy(update={"instance_id": t.instance_id + "-nofix"}) for t in tasks if t.instance_id in SUBSET]
    preds += [{"instance_id": w.instance_id, "model_name_or_path": "nofix", "model_patch": no_fix(t)}
              for t, w in zip([t for t in tasks if t.instance_id in SUBSET], wrong, strict=True)]
    env = load_environment_config(str(suite / "bwrap.yaml"))
    root = tmp_path_factory.mktemp("parity")
    reports = {policy: run_eval(preds, tasks + wrong, root / policy, env_config=env, workers=2, grading=policy)
               for policy in ("strict", "swebench")}
    return root, tasks + wrong, reports


def test_strict_and_swebench_agree_on_honest_patches(graded):
    _, tasks, reports = graded
    strict, swebench = reports["strict"], reports["swebench"]
    assert strict["resolved_ids"] == swebench["resolved_ids"] == sorted(t.instance_id for t in tasks
                                                                        if not t.instance_id.endswith("-nofix"))
    assert strict["unresolved_ids"] == swebench["unresolved_ids"] == sorted(t.instance_id for t in tasks
                                                                            if t.instance_id.endswith("-nofix"))
    assert strict["error_ids"] == swebench["error_ids"] == []


@pytest.mark.parametrize("policy", ["strict", "swebench"])
def test_the_swebench_package_grades_our_logs_alike(graded, policy):
    root, tasks, _ = graded
    for task in tasks:
        folder = root / policy / task.instance_id / "eval"
        spec = SweSpec(instance_id=task.instance_id, image="", eval_script_list=[], repo="r", version="1",
                       FAIL_TO_PASS=task.FAIL_TO_PASS, PASS_TO_PASS=task.PASS_TO_PASS,
                       log_parser="parse_log_pytest", eval_type="pass_and_fail")
        pred = {"instance_id": task.instance_id, "model_name_or_path": "m",
                "model_patch": (folder / "patch.diff").read_text()}
        theirs = swebench_grading.get_eval_report(spec, pred, str(folder / "test_output.txt"), include_tests_status=True)
        ours = json.loads((folder / "report.json").read_text())
        assert ours[task.instance_id].pop("grading")["policy"] == policy
        theirs[task.instance_id].pop("infra_failure_reason", None)
        assert ours == theirs, task.instance_id
