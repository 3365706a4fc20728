"""``swe-sandbox image build``: the default sandbox images, built with or without a registry.

- offline (the default; the only way on hosts without a registry): ``images/build-offline.sh``
  debootstraps a Debian rootfs from the host's configured mirror, caches it as a tarball
  (``/var/cache/swe-sandbox``) and imports it into Docker and/or Podman. Needs root, debootstrap
  and busybox-static (``scripts/setup-engines.sh`` installs them). Idempotent: an image already
  built from the current recipe is left alone.
- ``from_registry``: ``docker|podman build -f images/Containerfile`` (pulls debian:bookworm-slim).
  Only ``swe-sandbox/base``; the tiny ``swe-sandbox/nopython`` is always built offline.

Images: ``swe-sandbox/base`` (Debian bookworm minbase, bash, coreutils, procps, git, python3,
ca-certificates, less, man-db, vim-tiny; the runner works) and ``swe-sandbox/nopython`` (busybox
plus bash, no python3; commands go through the exec fallback).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from swe_sandbox.config import data_dir
from swe_sandbox.errors import ImageBuildError

ENGINES = ("docker", "podman")
IMAGES = {"base": "swe-sandbox/base", "nopython": "swe-sandbox/nopython"}
DEFAULT_IMAGE = IMAGES["base"]


def images_dir() -> Path:
    """Folder holding ``Containerfile`` and ``build-offline.sh`` (package data or the checkout)."""
    folder = data_dir("images")
    if not (folder / "build-offline.sh").is_file():
        raise ImageBuildError(f"the image recipes are missing (looked in {folder})")
    return folder


def _check_names(engines: Iterable[str], images: Iterable[str]) -> tuple[list[str], list[str]]:
    engines, images = list(engines), list(images)
    bad = [e for e in engines if e not in ENGINES] + [i for i in images if i not in IMAGES]
    if bad:
        raise ImageBuildError(f"unknown engine or image: {', '.join(bad)} "
                              f"(engines: {', '.join(ENGINES)}; images: {', '.join(IMAGES)})")
    missing = [e for e in engines if shutil.which(e) is None]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} not installed (sudo scripts/setup-engines.sh installs it)")
    return engines, images


def image_present(engine: str, image: str = DEFAULT_IMAGE) -> bool:
    """Whether ``engine`` has ``image`` locally (False when the engine is not installed or down)."""
    if shutil.which(engine) is None:
        return False
    done = subprocess.run([engine, "image", "inspect", image], capture_output=True, stdin=subprocess.DEVNULL)
    return done.returncode == 0


def build_images(engines: Iterable[str] = ENGINES, images: Iterable[str] = tuple(IMAGES), *,
                 from_registry: bool = False, force: bool = False,
                 echo: Callable[[str], None] = print) -> list[str]:
    """Build the sandbox images for the given engines (see the module doc for the two ways).

    Args:
        engines: ``"docker"``, ``"podman"`` or both.
        images: ``"base"``, ``"nopython"`` or both.
        from_registry: build ``base`` from ``images/Containerfile`` (needs a registry).
        force: rebuild even when an image from the current recipe exists (offline: re-debootstrap).
        echo: where progress lines go (the build scripts' own output goes to the terminal).

    Returns:
        The ``engine:image`` names that exist afterwards.

    Raises:
        ImageBuildError: unknown name, engine missing, or a build step failed.
    """
    engines, images = _check_names(engines, images)
    folder = images_dir()
    for engine in engines:
        offline = [i for i in images if not (from_registry and i == "base")]
        if from_registry and "base" in images:
            argv = [engine, "build", *(["--no-cache"] if force else []), "-t", IMAGES["base"],
                    "-f", str(folder / "Containerfile"), str(folder)]
            echo(f"{engine}: building {IMAGES['base']} from {folder / 'Containerfile'}")
            _run(argv, f"{engine} build")
        for image in offline:
            argv = ["bash", str(folder / "build-offline.sh"), "--engine", engine, "--image", image,
                    *(["--force"] if force else [])]
            echo(f"{engine}: building {IMAGES[image]} offline (debootstrap + import)")
            _run(argv, "images/build-offline.sh")
    return [f"{e}:{IMAGES[i]}" for e in engines for i in images if image_present(e, IMAGES[i])]


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ImageBuildError(f"{what}: cannot run {argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise ImageBuildError(f"{what} failed (exit status {done.returncode}); see its output above")
