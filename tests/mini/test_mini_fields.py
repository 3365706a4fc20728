"""``swe_sandbox.minisweagent`` without starting a sandbox: how mini's field names map onto ours
(or are refused, with the reason), mini's stock config sections, the ``Submitted`` class, and
that ``import swe_sandbox`` and our command line never import mini-swe-agent. The container
classes start their container when built (as mini's): their fields are read with ``mini_config``.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from helpers.mini import quiet_mini

quiet_mini()
import minisweagent.exceptions  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402

import swe_sandbox  # noqa: E402
from swe_sandbox import minisweagent as ours  # noqa: E402

CLASSES = {"local": ours.LocalEnvironment, "bwrap": ours.BwrapEnvironment, "docker": ours.DockerEnvironment,
           "podman": ours.PodmanEnvironment, "ssh": ours.SshEnvironment}
#: What each class needs besides mini's fields (ssh: a host; nothing connects before first use).
BASE = {"ssh": {"host": "203.0.113.1"}}


def make(backend: str, **fields):
    return CLASSES[backend](**{**BASE.get(backend, {}), **fields})


def config_of(backend: str, **fields):
    """The config ``make(backend, **fields)`` runs with, without building the environment."""
    return CLASSES[backend].mini_config(**{**BASE.get(backend, {}), **fields})


@pytest.mark.parametrize("backend", ["docker", "podman"])
def test_mini_docker_fields_that_mean_something_here_are_mapped(backend):
    cfg = config_of(backend, image="my/image", cwd="/testbed", env={"A": "1"}, forward_env=["HOME"], timeout=7,
                    executable=f"/usr/local/bin/{backend}", container_timeout="90m", run_args=["--rm"],
                    interpreter=["bash", "-c"])
    assert (cfg.image, cfg.cwd, cfg.env, cfg.forward_env, cfg.timeout) == ("my/image", "/testbed", {"A": "1"},
                                                                         ["HOME"], 7)
    assert cfg.cli == cfg.executable == f"/usr/local/bin/{backend}" and cfg.max_lifetime == 5400
    assert config_of(backend, container_timeout="2h").max_lifetime == 7200
    assert config_of(backend, container_timeout=30).max_lifetime == 30
    assert config_of(backend, run_args=[]).create_args == {}
    assert config_of(backend, pull_timeout=900).pull_timeout == 900  # mini's name is ours


def test_mini_bubblewrap_executable_is_bwrap_path():
    config = make("bwrap", executable="/opt/bwrap").config
    assert config.bwrap_path == config.executable == "/opt/bwrap"


REFUSED = [
    ("docker", "interpreter", ["bash", "-lc"], "every command runs in a fresh `bash -c`"),
    ("podman", "interpreter", ["python3", "-c"], "only ['bash', '-c'] is accepted"),
    ("docker", "run_args", ["--rm", "--network", "host"], "set the named fields instead"),
    ("local", "image", "python:3.12", "it runs no container"),
    ("bwrap", "image", "python:3.12", "it runs no container"),
    ("ssh", "image", "python:3.12", "it runs no container"),
    ("local", "executable", "docker", "it runs no container"),
    ("ssh", "container_timeout", "2h", "it runs no container"),
    ("bwrap", "wrapper_args", ["--unshare-user-try"], "the sandbox's bwrap arguments are its isolation policy"),
    ("local", "interpreter", ["bash", "-lc"], "a non-login shell"),
]


@pytest.mark.parametrize(("backend", "field", "value", "why"), REFUSED,
                         ids=[f"{b}-{f}" for b, f, _, _ in REFUSED])
def test_mini_fields_without_a_meaning_here_are_refused_saying_why(backend, field, value, why):
    with pytest.raises(swe_sandbox.ConfigError) as caught:
        config_of(backend, **{field: value})
    message = str(caught.value)
    assert message.startswith(f"environment.{field}: mini-swe-agent's field has no meaning for swe-sandbox's "
                              f"{backend} backend: ")
    assert why in message


@pytest.mark.parametrize("backend", list(CLASSES))
def test_unknown_and_invalid_fields_are_refused_naming_them(backend):
    with pytest.raises(swe_sandbox.ConfigError, match=r"environment\.no_such_field: unknown field \(allowed: "):
        make(backend, no_such_field=1)  # refused before anything starts
    with pytest.raises(swe_sandbox.ConfigError, match=r"environment\.timeout: "):
        make(backend, timeout=-1)


def test_a_bad_container_timeout_names_the_field():
    with pytest.raises(swe_sandbox.ConfigError, match=r"environment\.container_timeout: expected a duration"):
        config_of("docker", container_timeout="soon")


@pytest.mark.parametrize("config_name", ["mini.yaml", "default.yaml", "swebench.yaml"])
@pytest.mark.parametrize("backend", list(CLASSES))
def test_mini_stock_environment_sections_are_accepted(backend, config_name):
    section = dict(get_config_from_spec(config_name)["environment"])
    section.pop("environment_class", None)
    config = config_of(backend, **section)
    assert config.env == {**section["env"]}
    if "cwd" in section:
        assert config.cwd == section["cwd"]


@pytest.mark.parametrize("backend", ["local", "bwrap", "ssh"])  # containers: test_mini_agent, test_mini_cli
def test_serialize_names_our_class(backend):
    data = make(backend).serialize()
    assert data["info"]["config"]["environment_type"] == f"swe_sandbox.minisweagent.{CLASSES[backend].__name__}"
    assert data["info"]["config"]["environment"]["backend"] == backend
    json.dumps(data)


def test_submitted_is_mini_s_and_ours():
    exc = ours.Submitted("the patch\n", {"returncode": 0})
    assert isinstance(exc, minisweagent.exceptions.Submitted)
    assert isinstance(exc, minisweagent.exceptions.InterruptAgentFlow)
    assert isinstance(exc, swe_sandbox.Submitted) and isinstance(exc, swe_sandbox.InterruptAgentFlow)
    assert exc.messages == [{"role": "exit", "content": "the patch\n",
                             "extra": {"exit_status": "Submitted", "submission": "the patch\n"}}]
    again = pickle.loads(pickle.dumps(exc))
    assert (type(again), again.submission, again.result, again.messages) == (
        ours.Submitted, "the patch\n", {"returncode": 0}, exc.messages)


NOT_IMPORTED = """
import atexit, importlib, pkgutil, sys
atexit.register(lambda: print("\\nMINI-IMPORTED:", sorted(m for m in sys.modules if m.startswith("minisweagent"))))
import swe_sandbox
swe_sandbox.get_environment
if sys.argv[1] == "all-modules":
    for info in pkgutil.walk_packages(swe_sandbox.__path__, "swe_sandbox."):
        if info.name not in ("swe_sandbox.__main__", "swe_sandbox.minisweagent", "swe_sandbox.harbor"):
            importlib.import_module(info.name)
else:
    from swe_sandbox.cli import main
    sys.argv = ["swe-sandbox", *sys.argv[1:]]
    main()
"""


@pytest.mark.parametrize("argv", [
    ["all-modules"],
    ["--help"],
    ["exec", "--env", "local", "--", "echo", "hi"],
    ["run", "--env", "local", "-t", "x", "-o", "{tmp}/t.json", "-c", "model.model_class=deterministic",
     "-c", 'model.outputs=["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]'],
], ids=["import-every-module", "cli-help", "cli-exec", "cli-run"])
def test_swe_sandbox_and_its_cli_never_import_mini_swe_agent(argv, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = subprocess.run([sys.executable, "-c", NOT_IMPORTED, *argv], cwd=tmp_path, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert "\nMINI-IMPORTED: []\n" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


CHILDREN = """
import os, threading, swe_sandbox.minisweagent
def parent(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
    except OSError:
        return None
children = [p for p in os.listdir("/proc") if p.isdigit() and parent(p) == str(os.getpid())]
print(threading.active_count(), len(children))
"""


def test_importing_the_module_starts_nothing():
    done = subprocess.run([sys.executable, "-c", CHILDREN], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["1", "0"], done.stdout + done.stderr
