"""A batch whose instances share one image that is only in the registry: named by --image-template,
pulled once when the first instances reach it, the pull shown on the instances' lines."""

from __future__ import annotations

import json
import threading
from typing import Any

from pull_fixtures import engine  # noqa: F401 - fixture

from swe_sandbox.agent.config import load_run_config
from swe_sandbox.batch import load_tasks, run_batch
from swe_sandbox.batch.images import apply_image_template
from swe_sandbox.batch.progress import BatchProgress
from swe_sandbox.batch.records import ResultsLog

from helpers.engine_images import MARKER_PATH, remove_pushed

SUBMIT = f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat {MARKER_PATH}"


class Recorder(BatchProgress):
    """Keeps every ``update`` a rollout sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.updates: list[tuple[str, dict[str, Any]]] = []

    def update(self, instance_id: str, **fields: Any) -> None:
        with self.lock:
            self.updates.append((instance_id, fields))


def test_a_batch_pulls_its_instances_image_once(engine, registry, pushed, tmp_path):
    remove_pushed(engine, pushed)
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps({"instance_id": f"proj__proj-{n}", "problem_statement": "-",
                                             "repo": "base"}) + "\n" for n in range(3)))
    tasks = load_tasks(task_file)
    apply_image_template(tasks, f"{registry.address}/swe-sandbox-test/{{repo}}:{pushed.token}")
    config = load_run_config()
    config["model"] = {"model_class": "deterministic", "outputs": [SUBMIT]}
    progress, mark = Recorder(), registry.mark()
    out = run_batch(tasks, tmp_path / "out", run_config=config, env_config={"backend": engine}, workers=3,
                    progress=progress)
    records = ResultsLog(out / "results.jsonl").read()
    assert sorted((r.instance_id, r.exit_status) for r in records) == [(f"proj__proj-{n}", "Submitted") for n in range(3)]
    preds = json.loads((out / "preds.json").read_text())
    assert {p["model_patch"] for p in preds.values()} == {pushed.token}
    assert registry.fetches(engine, mark)[pushed.own_layer] == 1
    pulling = [fields for _, fields in progress.updates if fields.get("phase") == "pulling"]
    assert pulling and all(fields["detail"].startswith(pushed.name + "  ") for fields in pulling), progress.updates
    assert "layers" in pulling[-1]["detail"]
