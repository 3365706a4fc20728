"""The library rules behind ``batch`` / ``eval`` / ``image pull`` / ``run``: task selection, the images a
pull collects, its summary, and the checks made before a run."""

from __future__ import annotations

import json

import pytest

from swe_sandbox.batch.pulls import PullReport, collect_images
from swe_sandbox.batch.selection import filter_pattern, load_task_file, parse_slice, predicted_tasks, select_tasks
from swe_sandbox.batch.tasks import Task, TaskFileError
from swe_sandbox.errors import BackendUnavailable, ConfigError, ImagePullError
from swe_sandbox.preflight import check_model_config, check_output_path, require_usable, submission_path


def tasks(*ids: str) -> list[Task]:
    return [Task(instance_id=i, problem_statement="p", source_line=n) for n, i in enumerate(ids, 1)]


def ids(selected: list[Task]) -> list[str]:
    return [t.instance_id for t in selected]


def test_filter_then_slice_and_nothing_given_is_everything():
    all_tasks = tasks("a-1", "b-1", "a-2", "a-3")
    assert ids(select_tasks(all_tasks)) == ["a-1", "b-1", "a-2", "a-3"]
    assert ids(select_tasks(all_tasks, filter_pattern("a-"))) == ["a-1", "a-2", "a-3"]
    assert ids(select_tasks(all_tasks, filter_pattern("a-"), parse_slice("1:"))) == ["a-2", "a-3"]
    assert ids(select_tasks(all_tasks, None, parse_slice("::2"))) == ["a-1", "a-2"]
    assert ids(select_tasks(all_tasks, filter_pattern("-1"))) == []  # re.match: anchored at the start


def test_shuffle_is_fixed_and_comes_first():
    all_tasks = tasks(*(f"t-{i}" for i in range(20)))
    once, again = select_tasks(all_tasks, shuffle=True), select_tasks(all_tasks, shuffle=True)
    assert ids(once) == ids(again) != ids(all_tasks)
    assert ids(select_tasks(all_tasks, None, parse_slice("0:3"), shuffle=True)) == ids(once)[:3]
    assert ids(all_tasks) == [f"t-{i}" for i in range(20)]  # the input is not changed


@pytest.mark.parametrize("spec, expected", [("0:10", slice(0, 10)), ("5:", slice(5, None)), (":-1", slice(None, -1)),
                                            ("1:9:2", slice(1, 9, 2)), (" 1 : 2 ", slice(1, 2))])
def test_parse_slice(spec, expected):
    assert parse_slice(spec) == expected


@pytest.mark.parametrize("spec", ["3", "a:b", "1:2:3:4", "", "1.5:2", "1:5:0"])
def test_a_bad_slice_says_what_is_expected(spec):
    with pytest.raises(ValueError, match=r"^expected START:STOP, e\.g\. 0:10; got "):
        parse_slice(spec)


def test_a_bad_filter_says_why():
    with pytest.raises(ValueError, match="^not a regular expression: "):
        filter_pattern("(")


def test_predicted_tasks_keep_task_order():
    assert ids(predicted_tasks(tasks("a", "b", "c"), [{"instance_id": "c"}, {"instance_id": "a"}])) == ["a", "c"]


def test_load_task_file_applies_the_image_template(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": "x__y-1", "problem_statement": "p"}) + "\n")
    [task] = load_task_file(path, "reg.example/{instance_id_docker}:v1")
    assert task.image == "reg.example/x_1776_y-1:v1"
    assert load_task_file(path)[0].image is None


def test_collect_images_groups_instances_and_keeps_references(tmp_path):
    path = tmp_path / "tasks.jsonl"
    lines = [{"instance_id": "a", "problem_statement": "p", "image": "img:1"},
             {"instance_id": "b", "problem_statement": "p", "image": "img:1"},
             {"instance_id": "c", "problem_statement": "p", "image": "img:2"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert collect_images([str(path), "other:3"]) == {"img:1": ["a", "b"], "img:2": ["c"], "other:3": []}
    empty = tmp_path / "none.jsonl"
    empty.write_text(json.dumps({"instance_id": "a", "problem_statement": "p"}) + "\n")
    with pytest.raises(TaskFileError, match="no task names an image"):
        collect_images([str(empty)])


def test_pull_report_lines_name_failures_and_their_instances():
    report = PullReport(done=["ok:1"], failed={"bad:1": ImagePullError("no such image", reason="not_found")},
                        instances={"bad:1": [f"i{n}" for n in range(22)]})
    lines = report.lines()
    assert lines[0] == "1 of 2 image(s) ready, 1 failed"
    assert lines[1].startswith("FAILED bad:1 (not_found): ")
    assert lines[2].endswith("i19 and 2 more") and "needed by 22 instance(s)" in lines[2]


def test_preflight_checks(tmp_path):
    assert submission_path(tmp_path / "r.traj.json") == tmp_path / "r.submission.txt"
    assert submission_path(tmp_path / "r.json") == tmp_path / "r.submission.txt"
    with pytest.raises(ConfigError, match="is a directory"):
        check_output_path(tmp_path)
    check_output_path(tmp_path / "new" / "r.traj.json")
    with pytest.raises(ConfigError, match="model.model_name"):
        check_model_config({})
    check_model_config({"model_class": "replay"})
    with pytest.raises(ConfigError):
        require_usable("no-such-backend")
    require_usable("local")


def test_require_usable_hints_at_local(monkeypatch):
    from swe_sandbox.environments import environment_class

    monkeypatch.setattr(environment_class("bwrap"), "unavailable_reason", classmethod(lambda cls, *a: "simulated"))
    with pytest.raises(BackendUnavailable, match=r"^bwrap: simulated \(or run with --env local"):
        require_usable("bwrap")
