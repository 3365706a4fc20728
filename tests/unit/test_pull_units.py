"""The pieces of image pulls that need no engine: references, TLS choice, error causes (from the
engines' own messages, recorded on this host against docker-registry 2.8, Docker 20.10, Podman 4.3),
progress from event streams, image templates, and the displays (batch line, command line)."""

from __future__ import annotations

import io
import pickle

import pytest

import swe_sandbox
from swe_sandbox.batch.images import apply_image_template, images_of, instance_id_docker, pull_reporter
from swe_sandbox.batch.progress import Tally
from swe_sandbox.batch.tasks import Task, TaskFileError
from swe_sandbox.environments.container.image_ref import is_loopback, parse_image
from swe_sandbox.environments.container.pull_errors import classify, from_engine_text, pull_error
from swe_sandbox.environments.container.pull_progress import PullProgress
from swe_sandbox.errors import ImagePullError, SandboxStartError


@pytest.mark.parametrize("image, registry, repository, tag, digest", [
    ("python:3.12", "docker.io", "python", "3.12", ""),
    ("swebench/sweb.eval.x86_64.django_1776_django-11099", "docker.io", "swebench/sweb.eval.x86_64.django_1776_django-11099",
     "latest", ""),
    ("127.0.0.1:5000/some/image", "127.0.0.1:5000", "some/image", "latest", ""),
    ("localhost/x@sha256:" + "a" * 64, "localhost", "x", "", "sha256:" + "a" * 64),
    ("[::1]:5000/x:1", "[::1]:5000", "x", "1", ""),
    ("registry.example.com/ns/img:tag", "registry.example.com", "ns/img", "tag", ""),
])
def test_parse_image(image, registry, repository, tag, digest):
    ref = parse_image(image)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.qualified == image if (tag != "latest" or digest) else ref.qualified == f"{image}:latest"


@pytest.mark.parametrize("registry, loopback", [
    ("127.0.0.1:5000", True), ("127.8.9.10", True), ("localhost:5000", True), ("[::1]:5000", True),
    ("docker.io", False), ("10.0.0.1:5000", False), ("registry.example.com:443", False),
])
def test_is_loopback(registry, loopback):
    assert is_loopback(registry) is loopback


@pytest.mark.parametrize("image, configured, insecure", [
    ("127.0.0.1:5000/x:1", [], True),
    ("localhost:5000/x", [], True),
    ("registry.example.com/x:1", [], False),
    ("registry.example.com/x:1", ["registry.example.com"], True),
    ("python:3.12", ["registry.example.com"], False),
])
def test_podman_skips_tls_only_for_loopback_or_configured_registries(image, configured, insecure):
    env = swe_sandbox.get_environment("podman", image=image, insecure_registries=configured)
    request = env.pull_request()
    assert request.insecure is insecure and request.image == image and request.timeout == 1800


#: (engine's text, reason): messages the engines gave on this host.
ENGINE_TEXTS = [
    ('manifest for 127.0.0.1:5055/t/nothere:1 not found: manifest unknown: manifest unknown', "not_found"),
    ("initializing source docker://127.0.0.1:5055/t/nothere:1: reading manifest 1 in 127.0.0.1:5055/t/nothere: "
     "manifest unknown: manifest unknown", "not_found"),
    ('Get "http://127.0.0.1:5056/v2/": dial tcp 127.0.0.1:5056: connect: connection refused', "unreachable"),
    ('initializing source docker://127.0.0.1:5056/t/x:1: pinging container registry 127.0.0.1:5056: Get '
     '"http://127.0.0.1:5056/v2/": dial tcp 127.0.0.1:5056: connect: connection refused', "unreachable"),
    ('Head "http://127.0.0.1:40123/v2/swe-sandbox-test/locked/manifests/1": no basic auth credentials', "unauthorized"),
    ("initializing source docker://127.0.0.1:40123/swe-sandbox-test/locked:1: reading manifest 1 in "
     "127.0.0.1:40123/swe-sandbox-test/locked: unauthorized: authentication required", "unauthorized"),
    ('short-name "x:latest" did not resolve to an alias and no unqualified-search registries are defined', "failed"),
]


@pytest.mark.parametrize("text, reason", ENGINE_TEXTS)
def test_engine_messages_are_classified(text, reason):
    assert classify(text) == reason
    error = from_engine_text("docker", "127.0.0.1:5055/t/x:1", text)
    assert error.reason == reason and "127.0.0.1:5055/t/x:1" in str(error) and text[:100] in str(error)


def test_pull_errors_name_the_image_and_survive_pickling():
    error = pull_error("podman", "127.0.0.1:5000/a:1", "timeout", timeout=3)
    assert isinstance(error, SandboxStartError)
    assert str(error) == ("podman: the pull of 127.0.0.1:5000/a:1 from 127.0.0.1:5000 did not finish within "
                          "environment.pull_timeout = 3 s, and was stopped")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.image, copy.reason) == (ImagePullError, str(error), error.image, "timeout")
    assert "swe-sandbox image build" in str(pull_error("docker", "swe-sandbox/nope", "never"))


DOCKER_EVENTS = [  # recorded from the docker SDK's pull of a two-layer image, one layer already there
    {"status": "Pulling from t/base", "id": "1"},
    {"status": "Already exists", "progressDetail": {}, "id": "78fe83a75bef"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "28bcb255d7a0"},
    {"status": "Downloading", "progressDetail": {"current": 100, "total": 1630}, "id": "28bcb255d7a0"},
    {"status": "Download complete", "progressDetail": {}, "id": "28bcb255d7a0"},
    {"status": "Extracting", "progressDetail": {"current": 163, "total": 163}, "id": "28bcb255d7a0"},
    {"status": "Pull complete", "progressDetail": {}, "id": "28bcb255d7a0"},
    {"status": "Digest: sha256:0e3bdf406e19acb6f407cc53823d16a4a9d75b6906b0b368e021e09f45e345b0"},
]
PODMAN_EVENTS = [  # recorded from podman-py's pull (libpod, Podman 4.3)
    {"stream": "Trying to pull 127.0.0.1:5055/t/base:1...\n"},
    {"stream": "Getting image source signatures\n"},
    {"stream": "Copying blob sha256:28bcb255d7a0d053044204b3fdaec78ce898977cbf55a688db4a9517ae943db1\n"},
    {"stream": "Copying blob sha256:78fe83a75bef7873a76209bccbf983da2ebbae78f59a992087581b3d73c5f1b0\n"},
    {"stream": "Copying config sha256:c29b069399b6aa3c364d8c3258f2b04b7f3950f2bc5a7516f0847d8fb02522ce\n"},
    {"images": ["c29b069399b6"], "id": "c29b069399b6"},
]


def test_progress_from_docker_events():
    progress = PullProgress("127.0.0.1:5055/t/base:1", engine="docker")
    for event in DOCKER_EVENTS[:4]:
        progress.apply(event)
    assert (progress.layers_done, len(progress.layers), progress.bytes_done, progress.bytes_total) == (1, 2, 100, 1630)
    assert progress.summary() == "1/2 layers, 100 B/1.6 kB"
    for event in DOCKER_EVENTS[4:]:
        progress.apply(event)
    assert progress.summary() == "2/2 layers, 1.6 kB/1.6 kB" and progress.status.startswith("Digest:")
    progress.apply({"errorDetail": {"message": "unexpected EOF"}, "error": "unexpected EOF"})
    assert progress.error == "unexpected EOF"


def test_progress_from_podman_lines():
    progress = PullProgress("127.0.0.1:5055/t/base:1", engine="podman")
    for event in PODMAN_EVENTS[:4]:
        progress.apply(event)
    assert progress.summary() == "0/2 layers"
    for event in PODMAN_EVENTS[4:]:
        progress.apply(event)
    assert progress.summary() == "2/2 layers" and progress.bytes_total == 0


def test_swebench_image_template():
    assert instance_id_docker("django__django-11099") == "django_1776_django-11099"
    assert instance_id_docker("Pallets__Jinja-3") == "pallets_1776_jinja-3"
    tasks = [Task(instance_id="django__django-11099", problem_statement="-", repo="django/django", source_line=1),
             Task(instance_id="own", problem_statement="-", image="mine:1", source_line=2)]
    apply_image_template(tasks, "docker.io/swebench/sweb.eval.x86_64.{instance_id_docker}:latest")
    assert [t.image for t in tasks] == ["docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest", "mine:1"]
    assert images_of(tasks) == {tasks[0].image: ["django__django-11099"], "mine:1": ["own"]}
    with pytest.raises(TaskFileError, match=r"task 'x' \(line 7\): --image-template: no field 'version'"):
        apply_image_template([Task(instance_id="x", problem_statement="-", source_line=7)], "img:{version}")


def test_a_pull_shows_on_the_instance_line_of_a_batch():
    from swe_sandbox.batch.live import LiveProgress

    tally = Tally()
    listener = pull_reporter("inst-1", tally.update)
    progress = PullProgress("127.0.0.1:5055/t/base:1", engine="docker")
    for event in DOCKER_EVENTS[:4]:
        progress.apply(event)
    listener(progress)
    info = tally.running["inst-1"]
    assert info["phase"] == "pulling"
    row = LiveProgress._row("inst-1", info)
    assert row[1].plain.startswith("pulling") and row[4].plain == "127.0.0.1:5055/t/base:1  1/2 layers, 100 B/1.6 kB"
    progress.finished = True
    listener(progress)
    assert tally.running["inst-1"]["phase"] == "starting" and tally.running["inst-1"]["detail"] == ""


def test_the_command_line_display_writes_lines_off_a_terminal():
    from rich.console import Console

    from swe_sandbox.cli.pull_display import PullDisplay

    out = io.StringIO()
    display = PullDisplay(Console(file=out, force_terminal=False, width=200))
    progress = PullProgress("127.0.0.1:5055/t/base:1", engine="podman")
    display(progress)
    for event in PODMAN_EVENTS:
        progress.apply(event)
        display(progress)
    progress.finished = True
    display(progress)
    lines = out.getvalue().splitlines()
    assert lines[0] == "podman: pulling 127.0.0.1:5055/t/base:1"
    assert lines[1].startswith("podman: pulled 127.0.0.1:5055/t/base:1 (2/2 layers) in ") and len(lines) == 2
