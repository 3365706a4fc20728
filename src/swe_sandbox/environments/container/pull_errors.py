"""Every failed pull becomes one ``ImagePullError`` here, whose message names the image and the cause.

The engines report a failed pull as text (an HTTP error before the stream starts, or an ``error``
event in it); ``classify`` reads the cause from that text with the phrases Docker (moby) and
Podman (containers/image) use, checked on this host against Debian's ``docker-registry``:

- not found: ``manifest unknown``, ``name unknown`` (registry errors of the distribution spec),
  Docker's ``manifest for ... not found`` and Docker Hub's ``repository does not exist``;
- unauthorized: ``unauthorized``, ``authentication required``, Docker's ``no basic auth
  credentials``;
- unreachable: Go's dial errors (``connection refused``, ``no such host``, ``i/o timeout``, ...),
  Podman's ``pinging container registry``.
"""

from __future__ import annotations

from swe_sandbox.environments.container.image_ref import built_here, is_loopback, parse_image
from swe_sandbox.errors import ImagePullError

#: reason -> phrases (lower case) of the engines' messages that mean it; the first reason that
#: matches wins (Docker Hub's "pull access denied ..., repository does not exist or may require
#: 'docker login'" is a not-found: the registry does not say which).
CAUSES: dict[str, tuple[str, ...]] = {
    "not_found": ("manifest unknown", "name unknown", "not found", "does not exist", "no such image"),
    "unauthorized": ("unauthorized", "authentication required", "no basic auth credentials",
                     "incorrect username or password"),
    "unreachable": ("connection refused", "no such host", "network is unreachable", "no route to host",
                    "i/o timeout", "connection reset", "tls handshake timeout", "server misbehaving",
                    "pinging container registry", "dial tcp", "server gave http response to https"),
}


def classify(text: str) -> str:
    """The ``ImagePullError.reason`` an engine's error text means (``failed`` if none)."""
    lowered = text.lower()
    for reason, phrases in CAUSES.items():
        if any(phrase in lowered for phrase in phrases):
            return reason
    return "failed"


def pull_error(engine: str, image: str, reason: str, detail: str = "", *, timeout: float = 0.0) -> ImagePullError:
    """The error for a failed pull of ``image`` on ``engine`` (``detail``: the engine's words)."""
    registry = parse_image(image).registry
    login = f"{engine} login{' --tls-verify=false' if engine == 'podman' and is_loopback(registry) else ''}"
    cause = {
        "not_found": f"{image} was not found in the registry {registry}",
        "unauthorized": f"the registry {registry} refused to serve {image} (unauthorized): log the engine in "
                        f"(`{login} {registry}`; the pull uses the engine's own credentials)",
        "unreachable": f"the registry {registry} is unreachable, so {image} cannot be pulled",
        "timeout": f"the pull of {image} from {registry} did not finish within environment.pull_timeout "
                   f"= {timeout:g} s, and was stopped",
        "interrupted": f"the pull of {image} from {registry} was interrupted",
        "never": f"{image} is not in {engine}'s images and environment.image_pull is never (pull it with "
                 f"`swe-sandbox image pull --env {engine} {image}`, or set image_pull: missing)",
    }.get(reason, f"cannot pull {image} from {registry}")
    how = built_here(image)
    if how is not None:
        cause = f"{image} is not in {engine}'s images; it is built here, never pulled: {how}"
    message = f"{engine}: {cause}" + (f" ({' '.join(detail.split())[:500]})" if detail else "")
    return ImagePullError(message, image=image, reason=reason)


def from_engine_text(engine: str, image: str, text: str) -> ImagePullError:
    """``pull_error`` for the engine's error ``text``, its cause read by ``classify``."""
    return pull_error(engine, image, classify(text), text)
