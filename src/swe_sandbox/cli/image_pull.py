"""``swe-sandbox image pull``: get every image a task file names (or the images given) ahead of a run.

Each image is pulled as a sandbox of the environment config would pull it (``image_pull``:
``missing`` skips images already there, ``always`` pulls each again, ``never`` only checks;
``pull_timeout``, the engine's credentials, TLS skipped for loopback registries), ``workers`` at
once, with progress (``swe_sandbox.cli.pull_display``). A failure does not stop the others; the summary
names each failed image, its cause and the instances that need it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_sandbox.errors import BackendUnavailable, ConfigError, ImagePullError

#: Suffixes of task files (anything else given is an image reference).
TASK_FILE_SUFFIXES = (".json", ".jsonl")


@dataclass
class PullReport:
    """What ``pull_images`` did: images pulled (or found), and failures with their instances."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, ImagePullError] = field(default_factory=dict)
    instances: dict[str, list[str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The summary: a count, then each failed image with its cause and instances."""
        total = len(self.done) + len(self.failed)
        out = [f"{len(self.done)} of {total} image(s) ready" + (f", {len(self.failed)} failed" if self.failed else "")]
        for image, error in self.failed.items():
            out.append(f"FAILED {image} ({error.reason}): {error}")
            ids = self.instances.get(image) or []
            if ids:
                shown = ", ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
                out.append(f"  needed by {len(ids)} instance(s): {shown}")
        return out


def collect_images(sources: list[str], image_template: str | None = None) -> dict[str, list[str]]:
    """``{image: [instance_id, ...]}`` from task files (``.json``/``.jsonl``) and image references.

    Raises:
        TaskFileError: a task file that does not load, or names no image at all.
    """
    from swe_sandbox.batch.images import images_of
    from swe_sandbox.batch.tasks import TaskFileError
    from swe_sandbox.cli.batch import load_task_file

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

    Raises:
        ConfigError: the backend is not docker or podman, or the config (an image name) is invalid.
        BackendUnavailable: the engine does not answer.
        KeyboardInterrupt: after the pulls under way were stopped.
    """
    from swe_sandbox.batch.sandbox import IMAGE_BACKENDS
    from swe_sandbox.environments import get_environment
    from swe_sandbox.environments.container.pulling import stop_all

    report = PullReport(instances=images)
    if env_config.get("backend") not in IMAGE_BACKENDS:
        raise ConfigError(f"environment.backend: {env_config.get('backend')!r} has no images (docker or podman)")
    sandboxes = {image: get_environment({**env_config, "image": image}) for image in images}
    for env in list(sandboxes.values())[:1]:  # one engine for all: it must answer
        reason = env.unavailable_reason(env.config.url)
        if reason:
            raise BackendUnavailable(reason)
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swe-sandbox-pull") as pool:
        # each in a copy of the caller's context: its pull listener (the display) goes along
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
