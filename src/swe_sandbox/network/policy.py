"""The allow-list policy of ``network: allowlist``, its decisions, and the constants both sides share.

Standard library and pydantic only: the backends, the CLI and the proxy process all import it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The unix socket's file name, in the directory the backend binds into the sandbox.
PROXY_SOCKET_NAME = "proxy.sock"
#: Where that directory is bound inside the sandbox (read-only).
SANDBOX_NET_DIR = "/run/swe-sandbox/net"
#: The port of the in-sandbox forwarder (127.0.0.1) that carries connections to the socket.
SANDBOX_PROXY_PORT = 3128
#: Ports a pattern without ``:PORT`` allows.
DEFAULT_PORTS = frozenset({80, 443})
#: Longest host name a decision records, in characters.
MAX_LOGGED_HOST = 255

_LABEL = re.compile(r"^[a-z0-9-]{1,63}$")


def proxy_environment() -> dict[str, str]:
    """The environment a command in an allow-list sandbox gets, so that its HTTP(S) goes to the proxy.

    pip honors ``HTTPS_PROXY``; git and curl honor the lowercase ones; ``NO_PROXY`` is empty so that
    nothing bypasses the proxy (nothing could reach out anyway).

    Returns:
        dict[str, str]: ``HTTP_PROXY``, ``HTTPS_PROXY``, ``http_proxy``, ``https_proxy``, ``NO_PROXY``
        and ``no_proxy``.
    """
    url = f"http://127.0.0.1:{SANDBOX_PROXY_PORT}"
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    env.update(NO_PROXY="", no_proxy="")
    return env


def normalize_host(host: str) -> str:
    """A host name as the policy compares it: lowercased, one trailing dot dropped.

    Args:
        host (str): the name as given.

    Returns:
        str: the normalized name.
    """
    host = host.strip().lower()
    return host[:-1] if host.endswith(".") else host


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` is an address rather than a name (``10.0.0.1``, ``::1``, ``[::1]``, ``127.1``, ``0x7f000001``).

    Args:
        host (str): a normalized host.

    Returns:
        bool: True for anything the resolver would take as an address without DNS.
    """
    if host.startswith("[") or ":" in host:
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.inet_aton(host)  # the libc forms: 127.1, 0x7f000001, 017700000001
        return True
    except (OSError, ValueError):
        pass
    last = host.rsplit(".", 1)[-1]
    return last.isdigit()  # a name ending in a number is an address to many parsers


def check_host_name(host: str) -> str:
    """Validate a (normalized) host name: LDH labels, none empty, no address.

    Args:
        host (str): the name, already normalized.

    Returns:
        str: ``host``.

    Raises:
        ValueError: an IP literal, an empty label, a character outside letters, digits, ``-`` and ``.``.
    """
    if not host or len(host) > 253:
        raise ValueError(f"bad host name {host!r}")
    if is_ip_literal(host):
        raise ValueError(f"{host!r} is an IP address, not a name")
    for label in host.split("."):
        if not _LABEL.match(label) or label.startswith("-") or label.endswith("-"):
            raise ValueError(f"bad host name {host!r} (label {label!r})")
    return host


@dataclass(frozen=True)
class HostPattern:
    """One ``allow`` entry, parsed.

    Attributes:
        name (str): the exact name, or the domain below which any name matches (wildcard), or ``*``.
        wildcard (bool): ``*.name``: any name strictly below ``name``.
        ports (frozenset[int]): the ports allowed (``DEFAULT_PORTS`` when the entry names none).
    """

    name: str
    wildcard: bool
    ports: frozenset[int]

    @classmethod
    def parse(cls, entry: str) -> HostPattern:
        """Parse one entry (``pypi.org``, ``*.pythonhosted.org``, ``github.com:443``, ``*``).

        Raises:
            ValueError: the entry is not one of those forms (the message names it).
        """
        text = entry.strip().lower()
        ports = DEFAULT_PORTS
        if text.count(":") == 1:
            text, _, port_text = text.partition(":")
            if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
                raise ValueError(f"allow entry {entry!r}: port must be 1..65535")
            ports = frozenset({int(port_text)})
        text = normalize_host(text)
        if text == "*":
            return cls("*", True, ports)
        wildcard = text.startswith("*.")
        name = text[2:] if wildcard else text
        try:
            check_host_name(name)
        except ValueError as exc:
            raise ValueError(f"allow entry {entry!r}: {exc}") from None
        return cls(name, wildcard, ports)

    def matches_name(self, host: str) -> bool:
        """Whether a normalized ``host`` is covered by the name part of this pattern."""
        if self.name == "*":
            return True
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name


class NetworkPolicy(BaseModel):
    """What a sandbox with ``network: allowlist`` may reach, through the host's proxy.

    Raw IP addresses are never allowed; a name the proxy resolves (DNS) must resolve to a public
    address (not loopback, private, link-local, multicast or unspecified) unless ``resolve`` names it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first used

    allow: list[str] = Field(
        default_factory=list,
        description=(
            "Host patterns: 'pypi.org' (exactly that name), '*.pythonhosted.org' (any name below it, "
            "not the bare domain), '*' (any name); each optionally ':PORT' (else ports 80 and 443)."
        ),
    )
    """Host patterns: ``pypi.org`` (exactly), ``*.pythonhosted.org`` (any name below it, not the bare
    domain), ``*`` (any name); each optionally with ``:PORT`` (``github.com:443``), else 80 and 443."""

    resolve: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "The proxy's own name -> address entries (like curl --resolve): a name listed here is "
            "connected to that address without DNS, even a loopback or private one."
        ),
    )
    """The proxy's own name -> address entries (like curl's ``--resolve``): such a name is connected to
    that address (v4 or v6) without DNS, and may be loopback or private: the user said so."""

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, value: list[str]) -> list[str]:
        for entry in value:
            HostPattern.parse(entry)
        return [entry.strip().lower() for entry in value]

    @field_validator("resolve")
    @classmethod
    def _check_resolve(cls, value: dict[str, str]) -> dict[str, str]:
        checked: dict[str, str] = {}
        for name, address in value.items():
            try:
                host = check_host_name(normalize_host(name))
            except ValueError as exc:
                raise ValueError(f"resolve entry {name!r}: {exc}") from None
            try:
                checked[host] = str(ipaddress.ip_address(address.strip().strip("[]")))
            except ValueError:
                raise ValueError(f"resolve entry {name!r}: {address!r} is not an IP address") from None
        return checked

    def patterns(self) -> list[HostPattern]:
        """The ``allow`` entries, parsed."""
        return [HostPattern.parse(entry) for entry in self.allow]

    def decide(self, host: str, port: int) -> str | None:
        """Whether a connection to ``host:port`` is allowed; pure, no I/O (resolution comes later).

        Args:
            host (str): the name the client asked for (compared lowercased, trailing dot dropped).
            port (int): the port it asked for.

        Returns:
            str | None: None when allowed, else the refusal reason (one short line).
        """
        name = normalize_host(host)
        if is_ip_literal(name):
            return "raw IP address"
        try:
            check_host_name(name)
        except ValueError:
            return "bad host name"
        by_name = [p for p in self.patterns() if p.matches_name(name)]
        if not by_name:
            return "name not allowed"
        if not any(port in p.ports for p in by_name):
            return f"port {port} not allowed for {name}"
        return None


@dataclass(frozen=True)
class Decision:
    """One decision of the proxy: a connection allowed (logged when it closes) or a request refused.

    Attributes:
        host (str): the name asked for, raw as the client sent it, truncated to 255 characters.
        port (int | None): the port asked for (None when the request named none that parsed).
        method (str): ``CONNECT``, ``GET``, ...
        allowed (bool): whether it went through.
        reason (str | None): why it was refused (None when allowed).
        address (str | None): the address connected to (None when refused).
        bytes_up (int): bytes received from the client on that connection (request heads included).
        bytes_down (int): bytes received from the upstream server and passed on to the client.
        time (float): when it was decided or closed (unix seconds).
    """

    host: str
    port: int | None
    method: str
    allowed: bool
    reason: str | None
    address: str | None
    bytes_up: int
    bytes_down: int
    time: float

    def as_dict(self) -> dict[str, Any]:
        """The decision as the log's JSON object."""
        return asdict(self)
