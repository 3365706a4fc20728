"""mini-swe-agent's own command line (``mini``) runs on our environments, as a new user would run
it: mini's stock ``mini.yaml``, ``--environment-class`` one of ``swe_sandbox.minisweagent``'s
classes and our fields as ``-c environment.KEY=VALUE``, mini's ``deterministic`` model, ``-y
--exit-immediately``. The run must end ``Submitted`` with the sandbox's output as the submission,
and the trajectory mini writes must name our class.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from swe_sandbox.testing.kit import shareable_workspace

from helpers.mini import (
    MINI_CLASSES,
    SENTINEL,
    backend_params,
    cli_fields,
    deterministic_outputs,
    environment_fields,
    run_mini,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def mini_run(tmp_path: Path, config: list[str], *commands: str, env: dict | None = None) -> tuple[dict, str]:
    """``mini -c mini.yaml CONFIG... -y --exit-immediately`` with the deterministic model running
    ``commands`` (``env``: more variables for mini); returns (the trajectory mini saved, mini's output)."""
    out = tmp_path / "mini.traj.json"
    done = run_mini(["mini", "-c", "mini.yaml", *config, "-m", "deterministic",
                     "-c", "model.model_class=deterministic",
                     "-c", f"model.outputs={json.dumps(deterministic_outputs(*commands))}",
                     "-y", "--exit-immediately", "-t", "Write hello into f.txt, then submit it.", "-o", str(out)],
                    tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


@pytest.mark.parametrize("backend", backend_params())
def test_mini_cli_ends_submitted_with_our_environment(backend, tmp_path):
    fields, env = environment_fields(backend, tmp_path), {}
    if backend == "bwrap":  # a temporary workspace of its own, made in TMPDIR: gone when mini exits
        fields.pop("workspace")
        env["TMPDIR"] = str(shareable_workspace(tmp_path / "work"))
    data, output = mini_run(
        tmp_path, ["--environment-class", MINI_CLASSES[backend], *cli_fields(fields)],
        "uname -srvm; printf 'hello from %s\\n' \"$(uname -n)\" > f.txt; (exit 3)",
        f"echo {SENTINEL}; cat f.txt", env=env,
    )
    info = data["info"]
    assert info["exit_status"] == "Submitted", data["messages"][-2:]
    node = info["submission"].removeprefix("hello from ").strip()
    assert info["submission"] == f"hello from {node}\n" and node
    if backend in ("bwrap", "docker", "podman"):  # the sandbox's own hostname, not the host's
        assert node == "swe-sandbox"
    assert info["config"]["environment_type"] == MINI_CLASSES[backend]
    assert data["messages"][-1] == {"role": "exit", "content": info["submission"],
                                    "extra": {"exit_status": "Submitted", "submission": info["submission"]}}
    # mini's stock instance template shows the sandbox's uname: what `uname -srvm` printed inside it
    observation = json.loads(data["messages"][3]["content"])
    assert observation["returncode"] == 3
    uname = observation["output"].strip()
    assert f"<system_information>\n{uname}\n</system_information>" in data["messages"][1]["content"]
    assert "Saved trajectory" in output
    if backend == "bwrap":  # mini never closes its environment: our exit hook did
        assert list((tmp_path / "work").iterdir()) == []


def readme_mini_yaml() -> dict:
    """The ``environment:`` block of the README's section "Use with mini-swe-agent"."""
    section = README.read_text().split("## Use with mini-swe-agent", 1)[1].split("\n## ", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)]
    found = [b for b in blocks if isinstance(b, dict) and "DockerEnvironment" in str(b.get("environment"))]
    assert found, "the README's mini-swe-agent section has no YAML block for DockerEnvironment"
    return found[0]


@pytest.mark.docker
def test_the_readme_lines_pasted_into_mini_config_run_to_submitted_on_docker(tmp_path):
    environment_fields("docker", tmp_path)  # skips (fails under CI) without docker
    config = readme_mini_yaml()
    assert config["environment"]["environment_class"] == MINI_CLASSES["docker"]
    path = tmp_path / "my-mini.yaml"
    path.write_text(yaml.safe_dump(config))
    data, _ = mini_run(tmp_path, ["-c", str(path)], "pwd > where.txt", f"echo {SENTINEL}; cat where.txt")
    assert data["info"]["exit_status"] == "Submitted"
    assert data["info"]["submission"] == config["environment"].get("cwd", "/workspace") + "\n"
    assert data["info"]["config"]["environment_type"] == MINI_CLASSES["docker"]
