"""Images on demand against a real registry on loopback, on docker and podman (no mocks).

- ``missing`` pulls an absent image and the sandbox runs in it; a present one costs no request;
  ``always`` asks the registry again; ``never`` refuses an absent image, creating nothing;
- four sandboxes that need the same absent image at once: its layers are fetched once;
- a stopped registry, a registry that answers 401, one that never answers: the error names the
  registry (or the timeout) and arrives within ``pull_timeout``; nothing is left behind.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pull_fixtures import engine  # noqa: F401 - fixture

import swe_sandbox
from swe_sandbox.errors import ImagePullError

from helpers.engine_images import MARKER_PATH, has_image, image_references, pull_children, remove_pushed
from helpers.registry import AGENTS, Registry, write_htpasswd

#: Seconds a failure may take beyond what the test allows the pull (child start, engine answers).
SLACK_S = 5.0


def run_in(engine: str, image: str, command: str = f"cat {MARKER_PATH}", **config: Any) -> dict[str, Any]:
    with swe_sandbox.get_environment(engine, image=image, **config) as env:
        return env.execute({"command": command}, timeout=30)


def no_container_named(engine: str, run_id: str) -> bool:
    return not swe_sandbox.get_environment(engine).engine.inspect(f"swe-sandbox-{run_id}")



def test_missing_pulls_always_pulls_again_never_refuses(engine, registry, pushed):
    remove_pushed(engine, pushed)
    mark = registry.mark()
    assert run_in(engine, pushed.name)["output"] == pushed.token  # image_pull: missing (the default)
    fetched = registry.fetches(engine, mark)
    assert fetched[pushed.own_layer] == 1, fetched
    assert has_image(engine, pushed.name)

    mark = registry.mark()
    assert run_in(engine, pushed.name)["output"] == pushed.token
    assert registry.requests(mark) == []  # present: the registry is not asked

    assert run_in(engine, pushed.name, image_pull="always")["output"] == pushed.token
    asked = [r for r in registry.requests(mark) if "/manifests/" in r["path"]]
    assert asked, "image_pull: always did not ask the registry"
    assert registry.fetches(engine, mark)[pushed.own_layer] == 0  # the layer is there: not fetched again

    remove_pushed(engine, pushed)
    env = swe_sandbox.get_environment(engine, image=pushed.name, image_pull="never")
    mark = registry.mark()
    with pytest.raises(ImagePullError) as info:
        env.start()
    assert info.value.reason == "never" and pushed.name in str(info.value)
    assert "image_pull is never" in str(info.value)
    assert registry.requests(mark) == [] and env.container_id is None and no_container_named(engine, env.run_id)
    env.close()


def test_four_sandboxes_share_one_pull(engine, registry, pushed):
    remove_pushed(engine, pushed)
    mark = registry.mark()
    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        outputs = list(pool.map(lambda _: run_in(engine, pushed.name)["output"], range(4)))
    assert outputs == [pushed.token] * 4
    fetched = registry.fetches(engine, mark)
    assert fetched[pushed.own_layer] == 1, fetched
    assert all(fetched[blob] <= 1 for blob in pushed.blobs), fetched
    # one pull, not four that the engine deduplicated: the tag's manifest was asked for once
    tag_path = "/manifests/" + pushed.name.rpartition(":")[2]
    asked = [r for r in registry.requests(mark) if r["path"].endswith(tag_path) and r["agent"].startswith(AGENTS[engine])]
    assert len(asked) == 1, asked


def assert_failed_cleanly(engine: str, image: str, env: Any) -> None:
    assert env.container_id is None and no_container_named(engine, env.run_id)
    assert image_references(engine, image) == []
    assert pull_children(image) == []


def fail_to_start(engine: str, image: str, within: float, **config: Any) -> ImagePullError:
    """Start a sandbox of ``image`` that must fail to pull, in less than ``within`` seconds."""
    env = swe_sandbox.get_environment(engine, image=image, **config)
    started = time.monotonic()
    with pytest.raises(ImagePullError) as info:
        env.start()
    took = time.monotonic() - started
    assert took < within, f"the error took {took:.1f} s"
    assert_failed_cleanly(engine, image, env)
    env.close()
    return info.value


def test_a_stopped_registry_is_named_unreachable(engine, tmp_path):
    stopped = Registry(tmp_path).start()
    stopped.stop()
    image = f"{stopped.address}/swe-sandbox-test/gone:1"
    error = fail_to_start(engine, image, within=20, pull_timeout=20)
    assert error.reason == "unreachable", error
    assert f"the registry {stopped.address} is unreachable" in str(error)


@pytest.fixture(scope="module")
def locked_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry with basic auth (an htpasswd user the engines do not know)."""
    root = tmp_path_factory.mktemp("locked")
    server = Registry(root, htpasswd=write_htpasswd(root / "htpasswd", "someone", "s3cret")).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_registry_answering_401_is_named_unauthorized(engine, locked_registry):
    image = f"{locked_registry.address}/swe-sandbox-test/locked:1"
    error = fail_to_start(engine, image, within=30, pull_timeout=30)
    assert error.reason == "unauthorized", error
    assert "unauthorized" in str(error) and locked_registry.address in str(error)


def test_a_pull_that_outlives_pull_timeout_is_stopped(engine, silent_registry):
    image = f"{silent_registry}/swe-sandbox-test/silent:1"
    started = time.monotonic()
    error = fail_to_start(engine, image, within=3 + SLACK_S, pull_timeout=3)
    assert time.monotonic() - started >= 3
    assert error.reason == "timeout", error
    assert "pull_timeout = 3 s" in str(error) and image in str(error)
