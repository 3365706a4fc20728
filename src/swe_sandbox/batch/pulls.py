"""Images pulled ahead of a run (``swe-sandbox image pull``): which, and pulling them at once.

Each image is pulled as a sandbox of the environment config would pull it (``image_pull``:
``missing`` skips images already there, ``always`` pulls each again, ``never`` only checks;
``pull_timeout``, the engine's credentials, TLS skipped for loopback registries), ``workers`` at
once; the caller shows the progress (a pull listener, ``pulling.report_pulls``). A failure does not
stop the others; the report names each failed image, its cause and the instances that need it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_sandbox.batch.images import images_of
from swe_sandbox.batch.sandbox import IMAGE_BACKENDS
from swe_sandbox.batch.selection import load_task_file
from swe_sandbox.environments import get_environment
from swe_sandbox.environments.container.pulling import stop_all
from swe_sandbox.errors import BackendUnavailable, ConfigError, ImagePullError, TaskFileError

#: Suffixes of task files (anything else given is an image reference).
TASK_FILE_SUFFIXES = (".json", ".jsonl")
#: Failed images' instances named in the summary; the rest are counted.
SHOWN_INSTANCES = 20


@dataclass
class PullReport:
    """What ``pull_images`` did: images pulled (or found), and failures with their instances.

    Attributes:
        done: images pulled or already there, in the order they finished.
        failed: image -> why its pull failed.
        instances: image -> the instance ids that need it (``collect_images``).
    """

    done: list[str] = field(default_factory=list)
    failed: dict[str, ImagePullError] = field(default_factory=dict)
    instances: dict[str, list[str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The summary: a count, then each failed image with its cause and instances.

        Returns:
            list[str]: one line each, without newlines.
        """
        total = len(self.done) + len(self.failed)
        out = [f"{len(self.done)} of {total} image(s) ready" + (f", {len(self.failed)} failed" if self.failed else "")]
        for image, error in self.failed.items():
            out.append(f"FAILED {image} ({error.reason}): {error}")
            ids = self.instances.get(image) or []
            if ids:
                more = len(ids) - SHOWN_INSTANCES
                shown = ", ".join(ids[:SHOWN_INSTANCES]) + (f" and {more} more" if more > 0 else "")
                out.append(f"  needed by {len(ids)} instance(s): {shown}")
        return out


def collect_images(sources: list[str], image_template: str | None = None) -> dict[str, list[str]]:
    """The images of task files (``.json``/``.jsonl``) and image references, with their instances.

    Args:
        sources: task files and image references, in any mix.
        image_template: names the image of each task without one (``apply_image_template``).

    Returns:
        dict[str, list[str]]: image -> instance ids needing it (empty for an image given by name),
        in the order found.

    Raises:
        TaskFileError: a task file that does not load, or names no image at all.
    """
    found: dict[str, list[str]] = {}
    for source in sources:
        if not source.endswith(TASK_FILE_SUFFIXES):
            found.setdefault(source, [])
            continue
        images = images_of(load_task_file(Path(source), image_template))
        if not images:
            raise TaskFileError(f"{source}: no task names an image (give --image-template)")
        for image, ids in images.items():
            found.setdefault(image, []).extend(ids)
    return found


def pull_images(images: dict[str, list[str]], env_config: dict[str, Any], workers: int = 4) -> PullReport:
    """Pull ``images`` (from ``collect_images``) on ``env_config``'s engine, ``workers`` at once.

    Each pull runs in a copy of the caller's context, so the caller's pull listener sees it.

    Args:
        images: image -> instance ids needing it.
        env_config: a docker or podman environment config (its ``image`` is set per image).
        workers: pulls at once. Default 4.

    Returns:
        PullReport: what was pulled, and what failed with why.

    Raises:
        ConfigError: the backend is not docker or podman, or the config (an image name) is invalid.
        BackendUnavailable: the engine does not answer.
        KeyboardInterrupt: after the pulls under way were stopped.
    """
    report = PullReport(instances=images)
    if env_config.get("backend") not in IMAGE_BACKENDS:
        raise ConfigError(f"environment.backend: {env_config.get('backend')!r} has no images (docker or podman)")
    sandboxes = {image: get_environment({**env_config, "image": image}) for image in images}
    for env in list(sandboxes.values())[:1]:  # one engine for all: it must answer
        reason = env.unavailable_reason(env.config.url)
        if reason:
            raise BackendUnavailable(reason)
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swe-sandbox-pull") as pool:
        futures = {pool.submit(contextvars.copy_context().run, env.pull_image): image
                   for image, env in sandboxes.items()}
        try:
            for future in cf.as_completed(futures):
                try:
                    future.result()
                    report.done.append(futures[future])
                except ImagePullError as exc:
                    report.failed[futures[future]] = exc
        except KeyboardInterrupt:
            stop_all()  # the pulls end now (their engines cancel them); the pool's threads with them
            raise
    return report
