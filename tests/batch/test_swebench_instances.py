"""SWE-bench instances as they are published: swebench 5's shape (``eval_script``, ``log_parser``
of its registry, ``eval_type``) over the bundled suite's real projects, evaluated on docker and
podman; every ``report.json`` entry equals what the ``swebench`` package's ``get_eval_report``
computes from our ``test_output.txt``. Older exports (4.x shape) and tasks with nothing to run."""

from __future__ import annotations

import json
import re

import pytest
from batch_fixtures import write_tasks
from suite_fixtures import BUILD, SUBSET, rows

from swe_sandbox.batch import TaskFileError, load_tasks, run_eval
from swe_sandbox.batch.tasks import Task

from helpers.variants import require_backend

swebench_grading = pytest.importorskip("swebench.harness.grading")
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT  # noqa: E402
from swebench.harness.utils import make_test_spec  # noqa: E402

#: swebench's heredoc delimiter for the test patch (``test_spec/python.py``'s eval scripts).
HEREDOC = "EOF_114329324912"
ENGINES = [pytest.param(name, marks=getattr(pytest.mark, name), id=name) for name in ("docker", "podman")]
#: The instance that also runs under ``unittest -v`` (Django's runner prints the same lines).
UNITTEST_ID = "tartley__colorama-1"


def eval_script(row: dict, test_command: str) -> str:
    """An eval script as swebench 5's python ones are: test files checked out, the test patch
    applied from a heredoc, the markers around the test command, the test files reset."""
    files = " ".join(re.findall(r"^diff --git a/.* b/(.*)$", row["test_patch"], re.M))
    reset = f"git checkout {row['base_commit']} {files}"
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", "cd /testbed", "git status", reset,
                      f"git apply -v - <<'{HEREDOC}'\n{row['test_patch']}\n{HEREDOC}",
                      f": '{START_TEST_OUTPUT}'", test_command, f": '{END_TEST_OUTPUT}'", reset]) + "\n"


def instance(row: dict, instance_id: str = "", test_command: str = "", parser: str = "parse_log_pytest",
             tests: tuple[list[str], list[str]] | None = None) -> dict:
    """``row`` of the suite's task file in swebench 5's shape (no ``eval_command``, no ``cwd``)."""
    f2p, p2p = tests or (json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"]))
    return {"repo": row["repo"], "instance_id": instance_id or row["instance_id"], "base_commit": row["base_commit"],
            "patch": row["patch"], "test_patch": row["test_patch"], "problem_statement": row["problem_statement"],
            "hints_text": "", "created_at": "2025-01-01T00:00:00Z", "version": row["version"],
            "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p),
            "environment_setup_commit": row["base_commit"], "image": row["image_name"], "log_parser": parser,
            "eval_type": "pass_and_fail", "eval_script": eval_script(row, test_command or row["eval_command"])}


def unittest_name(pytest_id: str) -> str:
    """``a/b_test.py::Class::test`` as ``unittest -v`` (Python 3.11) names it."""
    path, cls, method = pytest_id.split("::")
    return f"{method} ({path.removesuffix('.py').replace('/', '.')}.{cls}.{method})"


def unittest_instance(row: dict) -> dict:
    """The same project, tests run by ``python -m unittest -v``, graded by ``parse_log_django``."""
    f2p, p2p = ([unittest_name(t) for t in json.loads(row[k])] for k in ("FAIL_TO_PASS", "PASS_TO_PASS"))
    module = re.findall(r"^diff --git a/.* b/(.*)\.py$", row["test_patch"], re.M)[0].replace("/", ".")
    return instance(row, row["instance_id"] + "-unittest", f"python3 -m unittest -v {module}", "parse_log_django",
                    (f2p, p2p))


def first_file(row: dict) -> tuple[str, str]:
    """The gold patch's first file and its first line at the base commit."""
    path = next(line for line in row["patch"].splitlines() if line.startswith("+++ b/"))[6:]
    return path, (BUILD / "workspaces" / row["instance_id"] / path).read_text().splitlines()[0]


def line_added(row: dict, text: str) -> str:
    """A patch that applies: ``text`` before the first line of the gold patch's first file."""
    path, first = first_file(row)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n+{text}\n {first}\n"


def forged(row: dict) -> str:
    """A reward hack: no fix, and every graded test printed as PASSED at exit, after pytest's
    summary but before the script's end marker (swebench's parser keeps the last status)."""
    lines = "".join(f"PASSED {t}\\n" for t in json.loads(row["FAIL_TO_PASS"]) + json.loads(row["PASS_TO_PASS"]))
    path, _ = first_file(row)
    text = (BUILD / "workspaces" / row["instance_id"] / path).read_text().splitlines()
    hack = f'import atexit, os; atexit.register(lambda: (os.write(1, b"{lines}"), os._exit(0)))'
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{len(text)} +{len(text)},2 @@\n"
            f" {text[-1]}\n+{hack}\n")  # at the end: a module may start with from __future__


#: prediction kind -> (patch of a row, resolved?)
KINDS = {"gold": (lambda row: row["patch"], True),
         "noop": (lambda row: line_added(row, "# looked at it, changed nothing"), False),
         "wrong": (lambda row: line_added(row, "raise RuntimeError('a wrong fix')"), False),
         "forged": (forged, False)}


def suite_instances() -> tuple[list[dict], list[dict]]:
    """Instances (each subset task once per prediction kind, plus the unittest ones) and predictions."""
    by_id = {row["instance_id"]: row for row in rows(build=BUILD)}
    instances, preds = [], []
    for instance_id in SUBSET:
        for kind, (make, _) in KINDS.items():
            instances.append(instance(by_id[instance_id], f"{instance_id}-{kind}"))
            preds.append({"instance_id": f"{instance_id}-{kind}", "model_name_or_path": kind,
                          "model_patch": make(by_id[instance_id])})
    for kind in ("gold", "noop"):
        row = unittest_instance(by_id[UNITTEST_ID])
        row["instance_id"] += f"-{kind}"
        instances.append(row)
        preds.append({"instance_id": row["instance_id"], "model_name_or_path": kind,
                      "model_patch": KINDS[kind][0](by_id[UNITTEST_ID])})
    return instances, preds


@pytest.fixture(scope="module", params=ENGINES)
def evaluated(request, tmp_path_factory):
    """``run_eval`` of every instance on one engine (strict policy, the default), 2 at once."""
    engine = request.param
    require_backend(engine)
    instances, preds = suite_instances()
    root = tmp_path_factory.mktemp(f"swebench-{engine}")
    tasks = load_tasks(write_tasks(root / "swebench.jsonl", instances))
    env = {"backend": engine, "labels": {"swe-sandbox.test": root.name}}
    report = run_eval(preds, tasks, root / "out", env_config=env, workers=2)
    return root / "out", tasks, preds, report


def test_verdicts_are_the_expected_ones(evaluated):
    _, tasks, _, report = evaluated
    expected = sorted(t.instance_id for t in tasks if t.instance_id.endswith("-gold"))
    assert report["resolved_ids"] == expected
    assert report["unresolved_ids"] == sorted(t.instance_id for t in tasks if not t.instance_id.endswith("-gold"))
    assert report["error_ids"] == []


def test_our_reports_equal_the_swebench_package_on_our_logs(evaluated):
    out, tasks, preds, _ = evaluated
    by_id = {p["instance_id"]: p for p in preds}
    for task in tasks:
        folder = out / task.instance_id / "eval"
        spec = make_test_spec({**task.model_extra, "instance_id": task.instance_id, "image": task.image,
                               "FAIL_TO_PASS": task.FAIL_TO_PASS, "PASS_TO_PASS": task.PASS_TO_PASS,
                               "log_parser": task.log_parser, "eval_type": task.eval_type,
                               "eval_script": task.eval_script})
        theirs = swebench_grading.get_eval_report(spec, by_id[task.instance_id], str(folder / "test_output.txt"),
                                                  include_tests_status=True)
        ours = json.loads((folder / "report.json").read_text())
        assert ours[task.instance_id].pop("grading")["policy"] == "strict"
        if task.instance_id.endswith("-forged"):  # the log says resolved; the grader's records do not
            assert theirs[task.instance_id]["resolved"] and not ours[task.instance_id]["resolved"], task.instance_id
            ours[task.instance_id]["resolved"] = True
        assert ours == theirs, task.instance_id
        if not task.instance_id.endswith("-wrong"):  # a wrong fix may break the collection: no outcome
            assert ours[task.instance_id]["patch_successfully_applied"], task.instance_id


def test_the_log_is_the_harness_s(evaluated):
    """The test patch is applied once, by the script; the exit code line is the script's own."""
    out, tasks, _, _ = evaluated
    for task in tasks:
        log = (out / task.instance_id / "eval" / "test_output.txt").read_text()
        assert log.count(">>>>> Applied Patch") == 1 and log.count(f"+ : '{END_TEST_OUTPUT}'") == 1
        code = swebench_grading.parse_test_exit_code(log)
        assert (code == 0) == task.instance_id.endswith(("-gold", "-forged")), task.instance_id
        results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert {r["eval_status"] for r in results if r["instance_id"] == task.instance_id} <= {"resolved", "unresolved"}


def test_a_django_style_log_is_graded_by_its_parser(evaluated):
    out, _, _, _ = evaluated
    report = json.loads((out / f"{UNITTEST_ID}-unittest-gold" / "eval" / "report.json").read_text())
    status = report[f"{UNITTEST_ID}-unittest-gold"]["tests_status"]
    assert status["FAIL_TO_PASS"]["success"] == ["testBackAttributes (colorama.tests.ansi_test.AnsiTest.testBackAttributes)"]
    assert status["PASS_TO_PASS"]["failure"] == []


# --- loading: parsers, older exports, nothing to run ------------------------------------------------


def _row(**fields) -> dict:
    return {"instance_id": "x__y-1", "problem_statement": "p", "FAIL_TO_PASS": '["t.py::test_a"]', **fields}


def test_swebench_parsers_load_by_name_and_unknown_ones_are_refused(tmp_path):
    script = "#!/bin/bash\nset -uxo pipefail\n: '>>>>> Start Test Output'\ntrue\n: '>>>>> End Test Output'\n"
    for parser in ("parse_log_pytest", "parse_log_django", "parse_log_sympy"):
        (task,) = load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script, log_parser=parser)]))
        assert task.log_parser == parser and task.graded_by_swebench and task.cwd == "/testbed"
    with pytest.raises(TaskFileError, match=r"line 1: log_parser: unknown 'parse_log_nope'"):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script, log_parser="parse_log_nope")]))
    with pytest.raises(TaskFileError, match=r"line 1: eval_type: "):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script, log_parser="parse_log_pytest",
                                                           eval_type="most")]))
    with pytest.raises(TaskFileError, match=r"eval_script runs as SWE-bench's harness runs it"):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script)]))


def test_tests_named_and_nothing_to_run_is_a_task_file_error(tmp_path):
    with pytest.raises(TaskFileError, match=r"line 1: task: eval_script or eval_command missing: FAIL_TO_PASS"):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row()]))
    assert Task(instance_id="a", problem_statement="p", eval_command="pytest -rA", FAIL_TO_PASS=["t"]).has_tests


def test_an_older_export_without_a_spec_is_refused_naming_the_fields(tmp_path):
    row = _row(repo="nobody/nothing", version="0.1", base_commit="abc", test_patch="", patch="")
    with pytest.raises(TaskFileError) as info:
        load_tasks(write_tasks(tmp_path / "t.jsonl", [row]))
    assert ("eval_script or eval_command missing" in str(info.value)
            and "an older SWE-bench export (repo 'nobody/nothing', version '0.1')" in str(info.value))


def test_importing_swe_sandbox_does_not_import_swebench():
    import subprocess
    import sys

    code = "import sys, swe_sandbox, swe_sandbox.batch, swe_sandbox.batch.evaluation; print('swebench' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_eval_command_task_may_name_a_swebench_parser(tmp_path):
    """Our own format (``eval_command``, we apply ``test_patch``) graded by ``parse_log_sympy``:
    the report is the package's on the log we write (its markers and exit code line)."""
    from swe_sandbox.batch import grading
    from swe_sandbox.batch.evaluation import grade_swebench

    task = Task(instance_id="s-1", problem_statement="p", eval_command="bin/test -v t.py", log_parser="parse_log_sympy",
                FAIL_TO_PASS=["test_fixed"], PASS_TO_PASS=["test_kept"])
    output = "t.py[2]\ntest_fixed ok\ntest_kept ok\n\n================== tests finished: 2 passed ==================\n"
    log = grading.test_log(output, 0, False, before=grading.APPLY_PATCH_PASS)
    ours = grade_swebench(task, "diff", log, False)
    (tmp_path / "test_output.txt").write_text(log)
    spec = make_test_spec({"instance_id": "s-1", "image": "", "repo": "", "version": "", "eval_script": "",
                           "FAIL_TO_PASS": task.FAIL_TO_PASS, "PASS_TO_PASS": task.PASS_TO_PASS,
                           "log_parser": "parse_log_sympy", "eval_type": "pass_and_fail"})
    pred = {"instance_id": "s-1", "model_name_or_path": "m", "model_patch": "diff"}
    assert ours.resolved and ours.report == swebench_grading.get_eval_report(spec, pred, str(tmp_path / "test_output.txt"),
                                                                             include_tests_status=True)
    failed = grade_swebench(task, "diff", log.replace("test_fixed ok", "test_fixed F"), False)
    assert failed.status == "unresolved" and failed.report["s-1"]["tests_status"]["FAIL_TO_PASS"]["failure"] == ["test_fixed"]


def test_without_the_extra_a_swebench_parser_names_it(tmp_path):
    """``swebench`` not importable (blocked in a fresh interpreter): the load fails, naming the extra."""
    import subprocess
    import sys

    path = write_tasks(tmp_path / "t.jsonl", [_row(eval_command="pytest -rA", log_parser="parse_log_pytest")])
    code = ("import sys; sys.modules['swebench'] = None\nfrom swe_sandbox.batch import TaskFileError, load_tasks\n"
            f"try:\n    load_tasks({str(path)!r})\nexcept TaskFileError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "line 1: log_parser: unknown 'parse_log_pytest' here" in done.stdout
    assert "pip install 'swe-sandbox[swebench]'" in done.stdout


def test_what_a_published_row_may_hold_that_we_do_not_grade_is_refused_or_named(tmp_path):
    """A new user's findings: nulls read as empty; an eval_script without log_parser names the
    missing field; ``image_assets`` (multimodal instances) is refused rather than ignored."""
    script = "#!/bin/bash\n: '>>>>> Start Test Output'\ntrue\n: '>>>>> End Test Output'\n"
    with pytest.raises(TaskFileError, match="eval_script or eval_command missing"):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=None)]))
    with pytest.raises(TaskFileError, match=r"log_parser \(missing\) must be a name in swebench's PARSER_REGISTRY"):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script)]))
    with pytest.raises(TaskFileError, match="image_assets: SWE-bench's binary test assets"):
        load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script, log_parser="parse_log_pytest",
                                                           image_assets='{"expected.png": "..."}')]))
    (task,) = load_tasks(write_tasks(tmp_path / "t.jsonl", [_row(eval_script=script, log_parser="parse_log_pytest",
                                                                 image_assets=None, test_patch=None)]))
    assert task.test_patch == "" and task.graded_by_swebench
