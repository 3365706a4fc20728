"""Image references: which registry an image comes from, and whether that registry is on loopback.

The rules are Docker's reference grammar (github.com/distribution/reference, ``ParseNormalizedNamed``):
the first ``/``-separated component names a registry when it holds a ``.`` or a ``:``, or is
``localhost``; otherwise the image is Docker Hub's (``docker.io``). A tag follows the last ``:``
after the last ``/``; a digest follows ``@``; neither means ``latest``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

#: The registry of an image whose name has no registry part (Docker's default).
DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class ImageRef:
    """An image reference split into its parts."""

    registry: str
    """``host[:port]``; ``docker.io`` when the name has none (see the module doc)."""
    repository: str
    """The name without registry, tag or digest (e.g. ``library/python`` stays ``python``)."""
    tag: str
    """The tag (``latest`` when neither tag nor digest is given); empty with a digest."""
    digest: str
    """``sha256:...`` or empty."""
    explicit_registry: bool
    """Whether the name itself names the registry."""

    @property
    def name(self) -> str:
        """``[registry/]repository`` as written (no tag or digest)."""
        return f"{self.registry}/{self.repository}" if self.explicit_registry else self.repository

    @property
    def qualified(self) -> str:
        """The full reference with its tag (or digest): what a pull asks for."""
        return f"{self.name}@{self.digest}" if self.digest else f"{self.name}:{self.tag}"


def parse_image(image: str) -> ImageRef:
    """Split ``image`` (``[registry/]repository[:tag][@digest]``) into an ``ImageRef``."""
    rest, _, digest = image.partition("@")
    first, slash, remainder = rest.partition("/")
    explicit = bool(slash) and ("." in first or ":" in first or first == "localhost")
    registry, path = (first, remainder) if explicit else (DEFAULT_REGISTRY, rest)
    repository, tag = path, ""
    if ":" in path.rsplit("/", 1)[-1]:
        repository, _, tag = path.rpartition(":")
    return ImageRef(registry=registry, repository=repository, tag=tag or ("" if digest else DEFAULT_TAG),
                    digest=digest, explicit_registry=explicit)


def registry_host(registry: str) -> str:
    """``host`` of ``host[:port]`` (IPv6 brackets removed)."""
    if registry.startswith("["):
        return registry[1:registry.find("]")]
    return registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry


def is_loopback(registry: str) -> bool:
    """Whether ``registry`` (``host[:port]``) is this machine: ``localhost``, 127.0.0.0/8 or ``::1``."""
    host = registry_host(registry)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
