"""mini-swe-agent's batch runner, ``mini-extra swebench``, on a small local dataset (a directory
holding one JSON file, which Hugging Face ``datasets`` reads offline) with our environment class
and two workers. mini never closes the environments it makes: nothing may be left behind.
"""

from __future__ import annotations

import json
import uuid

import pytest

from swe_sandbox.testing.kit import shareable_workspace

from helpers.mini import (
    IMAGE,
    MINI_CLASSES,
    SENTINEL,
    TEST_LABEL,
    backend_params,
    cli_fields,
    deterministic_outputs,
    environment_fields,
    run_mini,
    wait_no_containers,
)

INSTANCES = [{"instance_id": f"demo__project-{n}", "problem_statement": f"Print the number {n}."} for n in (1, 2, 3)]


@pytest.mark.parametrize("backend", backend_params(["docker", "podman", "bwrap"]))
def test_mini_swebench_batch_with_our_environment(backend, tmp_path):
    environment_fields(backend, tmp_path)  # skips (fails under CI) when the backend cannot run here
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "instances.json").write_text(json.dumps(INSTANCES))
    label, out, tmp = uuid.uuid4().hex, tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    fields = {"cwd": "/workspace"}
    if backend in ("docker", "podman"):
        fields.update(image=IMAGE, labels={TEST_LABEL: label})
    # each sandbox learns its instance only from mini's startup command (rendered with the instance)
    commands = ["cat /tmp/instance", f"echo {SENTINEL}; cat /tmp/instance; uname -n"]
    done = run_mini(["mini-extra", "swebench", "-c", "swebench.yaml", *cli_fields(fields),
                     "-c", "run.env_startup_command=echo {{instance_id}} > /tmp/instance",
                     "--environment-class", MINI_CLASSES[backend], "--model-class", "deterministic",
                     "-m", "deterministic", "-c", f"model.outputs={json.dumps(deterministic_outputs(*commands))}",
                     "--subset", str(dataset), "--split", "train", "-o", str(out), "-w", "2"],
                    tmp_path, env={"TMPDIR": str(shareable_workspace(tmp))} if backend == "bwrap" else {})
    log = (out / "minisweagent.log").read_text() if (out / "minisweagent.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    preds = json.loads((out / "preds.json").read_text())
    assert sorted(preds) == [i["instance_id"] for i in INSTANCES], log[-3000:]
    for instance in INSTANCES:
        iid = instance["instance_id"]
        assert preds[iid] == {"model_name_or_path": "deterministic", "instance_id": iid,
                              "model_patch": f"{iid}\nswe-sandbox\n"}
        traj = json.loads((out / iid / f"{iid}.traj.json").read_text())
        assert traj["info"]["exit_status"] == "Submitted"
        assert traj["info"]["config"]["environment_type"] == MINI_CLASSES[backend]
        assert traj["messages"][-1]["extra"]["submission"] == f"{iid}\nswe-sandbox\n"
    if backend in ("docker", "podman"):
        assert wait_no_containers(backend, label, within=5) == []
    else:  # the bwrap sandboxes' temporary workspaces are gone with them
        assert list(tmp.glob("swe-sandbox-bwrap-*")) == []
