"""Image references: which registry an image comes from, and whether that registry is on loopback.

The rules are Docker's reference grammar (github.com/distribution/reference, ``ParseNormalizedNamed``):
the first ``/``-separated component names a registry when it holds a ``.`` or a ``:``, or is
``localhost``; otherwise the image is Docker Hub's (``docker.io``). A tag follows the last ``:``
after the last ``/``; a digest follows ``@``; neither means ``latest``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

#: The registry of an image whose name has no registry part (Docker's default).
DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"
#: Name prefixes of the images this project builds itself, and how each is built. Named without a
#: registry they are never pulled: an image of that name in a registry (Docker Hub's, say) is
#: somebody else's.
BUILT_IMAGES = {"swe-sandbox/": "`swe-sandbox image build`",
                "swe-sandbox-suite/": "`python examples/tasks/build.py` (run by scripts/setup.sh)"}

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*"
           r"[a-zA-Z0-9]))*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
#: Docker's reference grammar (github.com/distribution/reference, ``reference.go``):
#: ``[domain/]component[/component]*[:tag][@algorithm:hex]``.
REFERENCE_RE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
                          r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
#: The longest name (registry and repository) the grammar allows.
NAME_MAX = 255


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


def check_reference(image: str) -> str:
    """``image`` when it is a valid reference (see ``REFERENCE_RE``), else ``ValueError`` saying why.

    Raises:
        ValueError: not a reference an engine pulls or runs (upper case in the repository, spaces,
            a leading ``-``, a transport prefix such as ``docker://``, a name over 255 characters...).
    """
    if not REFERENCE_RE.fullmatch(image):
        raise ValueError(f"{image[:300]!r} is not a valid image reference ([registry/]name[:tag][@digest], "
                         "lower-case name)")
    if len(parse_image(image).name) > NAME_MAX:
        raise ValueError(f"image name longer than {NAME_MAX} characters: {image[:80]!r}...")
    return image


def built_here(image: str) -> str | None:
    """How ``image`` is built when it is one this project builds (``BUILT_IMAGES``, no registry
    named: never pulled), else None."""
    ref = parse_image(image)
    if ref.explicit_registry:
        return None
    return next((how for prefix, how in BUILT_IMAGES.items() if ref.repository.startswith(prefix)), None)


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
