"""What the pull tests need of the engines: their SDK clients, the image pushed to the test
registry (``swe-sandbox/base`` plus one small layer of its own, a file holding a token, so that a
pull has a layer to fetch that no engine has yet), and which images they hold.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import tarfile
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from swe_sandbox.environments import environment_class
from swe_sandbox.images import DEFAULT_IMAGE

from helpers.registry import Registry

ENGINES = ["docker", "podman"]
#: The file of the pushed image's own layer; it holds the image's token.
MARKER_PATH = "/etc/swe-sandbox-pull-test"
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


@dataclass
class PushedImage:
    """The image in the registry: its names, the token in its own layer, its blobs' digests."""

    name: str
    second: str
    """The same image under another repository name."""
    token: str
    own_layer: str
    """Digest of the layer no engine has before the first pull (the image's last)."""
    blobs: list[str]
    """Config and every layer."""


def require_engine(name: str) -> None:
    """Skip (fail under CI) when engine ``name`` cannot run here, as the backends' tests do."""
    reason = environment_class(name).unavailable_reason()
    if reason is None:
        return
    if "CI" in os.environ:
        pytest.fail(f"backend {name!r} is unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"backend {name!r} is unavailable: {reason}")


def engine_client(name: str) -> Any:
    """The engine's SDK client (the tests' own, to push, inspect and remove images)."""
    return environment_class(name).engine_class().client


def has_image(engine: str, image: str) -> bool:
    return environment_class(engine).engine_class().has_image(image)


def remove_image(engine: str, image: str) -> None:
    """Remove ``image`` from ``engine`` if it is there."""
    if has_image(engine, image):
        engine_client(engine).images.remove(image, force=True)
    assert not has_image(engine, image)


def remove_pushed(engine: str, pushed: PushedImage) -> None:
    """Remove both names of the pushed image, so that its own layer is gone from ``engine``."""
    for image in (pushed.name, pushed.second):
        remove_image(engine, image)


def pull_children(image: str) -> list[str]:
    """Live pull processes (``pull_child``) for ``image`` on this host."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"swe_sandbox.environments.container.pull_child" in argv and image.encode() in argv:
            found.append(pid)
    return found


def image_references(engine: str, name: str) -> list[str]:
    """Every tag or digest reference of ``engine``'s images that mentions the repository of ``name``."""
    repository = name.rpartition(":")[0]
    found = []
    for image in engine_client(engine).images.list(all=True):
        attrs = image.attrs
        found += [ref for ref in (attrs.get("RepoTags") or []) + (attrs.get("RepoDigests") or []) if repository in ref]
    return found


def _build_context(token: str) -> io.BytesIO:
    """A build context: a Dockerfile adding one file with ``token`` to our base image."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, text in (("Dockerfile", f"FROM {DEFAULT_IMAGE}\nCOPY marker {MARKER_PATH}\n"), ("marker", token)):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    data.seek(0)
    return data


def _manifest_blobs(registry: Registry, name: str) -> tuple[str, list[str]]:
    """(the last layer's digest, [config digest, layer digests...]) of ``name``'s manifest."""
    repository, _, tag = name.removeprefix(registry.address + "/").rpartition(":")
    request = urllib.request.Request(f"http://{registry.address}/v2/{repository}/manifests/{tag}",
                                     headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(request, timeout=10) as response:
        manifest = json.load(response)
    layers = [layer["digest"] for layer in manifest["layers"]]
    return layers[-1], [manifest["config"]["digest"], *layers]


def push_test_image(registry: Registry) -> PushedImage:
    """Build our base image plus a layer of its own with Docker, push it under two names, remove it locally."""
    require_engine("docker")
    client = engine_client("docker")
    token = secrets.token_hex(8)
    name, second = (f"{registry.address}/swe-sandbox-test/{repo}:{token}" for repo in ("base", "second"))
    built = list(client.api.build(fileobj=_build_context(token), custom_context=True, tag=name, rm=True, decode=True))
    assert not [e for e in built if "error" in e], built
    client.api.tag(name, second.rpartition(":")[0], tag=token)
    for image in (name, second):
        events = list(client.api.push(image, stream=True, decode=True))
        assert not [e for e in events if "error" in e], events
        client.api.remove_image(image)
    own_layer, blobs = _manifest_blobs(registry, name)
    return PushedImage(name=name, second=second, token=token, own_layer=own_layer, blobs=blobs)
