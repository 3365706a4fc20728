"""Task and predictions files: what loads, and the errors (file, line, field) of what does not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from batch_fixtures import calc_repo, calc_task, write_tasks  # noqa: F401 - fixture

from swe_sandbox.batch import TaskFileError, load_predictions, load_tasks


def test_jsonl_and_json_load_swebench_fields(tmp_path, calc_repo):
    rows = [calc_task("a", calc_repo, image_name="img:1", repo="x/y", base_commit="abc"),
            {"instance_id": "b", "problem_statement": "p", "workspace": calc_repo.name, "log_parser": "exit_status"}]
    (tmp_path / calc_repo.name).symlink_to(calc_repo)  # resolved: outside the task file's directory
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = load_tasks(tmp_path / "t.jsonl", allow_workspace_outside=True)
    (tmp_path / "t.json").write_text(json.dumps(rows, indent=2))
    from_json = load_tasks(tmp_path / "t.json", allow_workspace_outside=True)
    assert [t.model_dump() for t in from_json] == [t.model_dump() for t in tasks]
    lines = (tmp_path / "t.json").read_text().splitlines()
    second = lines.index("  {", 2) + 1
    assert [t.source_line for t in from_json] == [2, second] and second > 10  # where each object starts
    a, b = tasks
    assert a.image == "img:1" and a.PASS_TO_PASS == ["check.py::test_zero"] and a.model_extra["repo"] == "x/y"
    assert b.workspace == calc_repo.resolve() and not b.has_tests  # relative to the task file
    assert (a.source_line, b.source_line) == (1, 2)


@pytest.mark.parametrize("row, expected", [
    ({"problem_statement": "p"}, "line 2: instance_id: missing (required)"),
    ({"instance_id": "a/b", "problem_statement": "p"}, "line 2: instance_id: 'a/b' is not a safe file name"),
    ({"instance_id": "..", "problem_statement": "p"}, "line 2: instance_id: '..' is not a safe file name"),
    ({"instance_id": "ok"}, "line 2: problem_statement: missing (required)"),
    ({"instance_id": "ok", "problem_statement": "p", "workspace": "nope"}, "line 2: workspace: "),
    ({"instance_id": "ok", "problem_statement": "p", "FAIL_TO_PASS": "[oops"}, "line 2: FAIL_TO_PASS: expected a list"),
    ({"instance_id": "ok", "problem_statement": "p", "log_parser": "junit"}, "line 2: log_parser: unknown 'junit'"),
    ({"instance_id": "first", "problem_statement": "p"}, "line 2: instance_id: 'first' duplicates line 1"),
])
def test_bad_task_names_line_and_field(tmp_path, row, expected):
    path = write_tasks(tmp_path / "t.jsonl", [{"instance_id": "first", "problem_statement": "p"}, row])
    with pytest.raises(TaskFileError) as info:
        load_tasks(path)
    assert f"{path} {expected}" in str(info.value)


def test_not_json_and_empty(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"instance_id": "a", "problem_statement": "p"}\n{"instance_id": \n')
    with pytest.raises(TaskFileError, match="line 2: not valid JSON"):
        load_tasks(path)
    (tmp_path / "t.json").write_text('[\n  {"instance_id": "a", "problem_statement": "p"},\n  {"instance_id": "a/"}\n]')
    with pytest.raises(TaskFileError, match="line 3: instance_id"):
        load_tasks(tmp_path / "t.json")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TaskFileError, match="no tasks"):
        load_tasks(tmp_path / "e.jsonl")


def test_predictions_shapes_and_errors(tmp_path):
    pred = {"instance_id": "a", "model_patch": "diff", "model_name_or_path": "m"}
    (tmp_path / "preds.json").write_text(json.dumps({"a": pred, "b": {"model_patch": None}}))
    assert [p["model_patch"] for p in load_predictions(tmp_path / "preds.json")] == ["diff", None]
    (tmp_path / "p.jsonl").write_text(json.dumps(pred) + "\n")
    assert load_predictions(tmp_path / "p.jsonl") == [pred]
    (tmp_path / "bad.json").write_text('{"a": {"model_patch": "x"},\n oops}')
    with pytest.raises(TaskFileError, match=r"bad.json line 2: not valid JSON"):
        load_predictions(tmp_path / "bad.json")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"model_patch": "x"}) + "\n")
    with pytest.raises(TaskFileError, match="line 1: instance_id: missing"):
        load_predictions(tmp_path / "bad.jsonl")


def test_a_parquet_split_loads_as_its_jsonl_does(tmp_path):
    """A dataset split as the hub stores it (Parquet, string columns as SWE-bench's: the test lists
    as JSON strings) loads to the same tasks as the same rows in JSON Lines; a file that is not
    Parquet is a task-file error naming it."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [{"instance_id": f"o__r-{n}", "problem_statement": "p", "repo": "o/r", "image_name": "img:1",
             "eval_command": "pytest -rA", "FAIL_TO_PASS": json.dumps([f"t.py::test_{n}"]), "PASS_TO_PASS": "[]"}
            for n in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test-00000-of-00001.parquet")
    from_parquet = load_tasks(tmp_path / "test-00000-of-00001.parquet")
    from_jsonl = load_tasks(write_tasks(tmp_path / "t.jsonl", rows))
    assert [t.model_dump() for t in from_parquet] == [t.model_dump() for t in from_jsonl]
    assert [t.source_line for t in from_parquet] == [1, 2, 3] and from_parquet[1].FAIL_TO_PASS == ["t.py::test_1"]
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(TaskFileError, match="cannot read task file .*bad.parquet"):
        load_tasks(tmp_path / "bad.parquet")


def test_a_dataset_directory_gives_the_split_asked_for(tmp_path):
    """A directory as the hub's download writes one (``data/<split>-NNNNN-of-NNNNN.parquet``, shards in
    name order, a hidden cache beside): ``--split`` picks one; none asked, or an unknown one, is an
    error listing the splits."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from swe_sandbox.batch.tasks import load_dataset

    def split_file(name: str, ids: list[str]) -> None:
        rows = [{"instance_id": i, "problem_statement": "p"} for i in ids]
        (tmp_path / "data").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / name)

    split_file("test-00001-of-00002.parquet", ["t3"])
    split_file("test-00000-of-00002.parquet", ["t1", "t2"])
    split_file("dev-00000-of-00001.parquet", ["d1"])
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x.jsonl").write_text("junk\n")
    assert [t.instance_id for t in load_dataset(tmp_path, "test")] == ["t1", "t2", "t3"]
    assert [t.instance_id for t in load_dataset(tmp_path, "dev")] == ["d1"]
    with pytest.raises(TaskFileError, match=r"choose a split with --split \(dev, test\)"):
        load_dataset(tmp_path)
    with pytest.raises(TaskFileError, match=r"no split 'train' \(it has: dev, test\)"):
        load_dataset(tmp_path, "train")
    with pytest.raises(TaskFileError, match="is a task file, not a dataset directory"):
        load_dataset(tmp_path / "data" / "dev-00000-of-00001.parquet", "dev")


@pytest.mark.parametrize("where", ["/etc", "home-ssh", "link", "../outside"])
def test_a_workspace_outside_the_task_files_directory_is_refused(tmp_path, where):
    """``/etc`` or ``~/.ssh`` named by a task file must not be copied into a sandbox (and its
    trajectory): absolute paths, a symlink inside the directory, and ``..`` are resolved first."""
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    (tmp_path / "outside").mkdir()
    secret = tmp_path / "home" / ".ssh"
    secret.mkdir(parents=True)
    (tasks_dir / "link").symlink_to(secret)
    workspace = {"home-ssh": str(secret)}.get(where, where)
    path = write_tasks(tasks_dir / "t.jsonl", [])
    path.write_text(json.dumps({"instance_id": "a", "problem_statement": "p", "workspace": workspace}) + "\n")
    with pytest.raises(TaskFileError, match=r"line 1: workspace: .* is outside the task file's directory .*"
                                             r"--allow-workspace-outside"):
        load_tasks(path)
    (task,) = load_tasks(path, allow_workspace_outside=True)  # the run allows it: resolved, kept
    assert task.workspace == Path(workspace if workspace.startswith("/") else tasks_dir / workspace).resolve()


def test_a_workspace_under_the_task_files_directory_loads(tmp_path):
    (tmp_path / "repos" / "r").mkdir(parents=True)
    (tmp_path / "inner").symlink_to(tmp_path / "repos")  # a link that stays inside is fine
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"instance_id": i, "problem_statement": "p", "workspace": w}) + "\n"
                            for i, w in (("a", "repos/r"), ("b", str(tmp_path / "inner" / "r")))))
    assert [t.workspace for t in load_tasks(path)] == [(tmp_path / "repos" / "r").resolve()] * 2


@pytest.mark.parametrize("instance_id", ["preds.json", "results.jsonl", "report.json", "REPORT.JSON"])
def test_an_instance_id_that_is_one_of_the_runs_own_files_is_refused(tmp_path, instance_id):
    """``DIR/<instance_id>`` is the instance's directory: an id named like ``preds.json`` would
    collide with the run's own files (``records.RUN_FILES``)."""
    from swe_sandbox.batch.records import RUN_FILES

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"instance_id": instance_id, "problem_statement": "p"}) + "\n")
    with pytest.raises(TaskFileError, match=rf"line 1: instance_id: '{re.escape(instance_id)}' is the name of "
                                             "one of the run's own files"):
        load_tasks(path)
    assert instance_id.lower() in RUN_FILES
