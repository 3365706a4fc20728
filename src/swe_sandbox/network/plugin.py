"""The proxy.py side of ``network: allowlist``: a plugin that enforces a ``NetworkPolicy``, and a handler.

Imported only inside the proxy process (``swe_sandbox.network.serve``), which passes the policy and log
paths in the environment variables ``POLICY_ENV`` and ``LOG_ENV``; both are read once per process.

- ``RecordingHandler`` (proxy.py's ``--work-klass``) keeps the raw request line of each client
  connection (proxy.py's parser keeps only its parse of it), counts the bytes the client sends, and
  logs the requests proxy.py refuses itself before any plugin runs (a request line that does not
  parse, ``GET /``).
- ``AllowListPlugin`` decides on the first request of each connection (the raw target and proxy.py's
  parse of it), resolves the name itself and hands proxy.py the chosen address (no second lookup),
  holds later keep-alive requests to the same host:port, and logs every decision.

A connection still open when the proxy is stopped (``AllowListProxy.stop``, a phase change) is logged
by the acceptor's SIGTERM handler (``serve.on_terminate``), with its bytes so far; one open when the
proxy is SIGKILLed (its owner died) is not logged.

Byte counts: ``bytes_down`` is exact in both modes (every chunk read from the upstream server);
``bytes_up`` is every byte read from the client, so for a CONNECT tunnel it includes the CONNECT
request head, and for plain HTTP the request heads as the client sent them (before proxy.py rewrites them).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.http.exception import HttpRequestRejected
from proxy.http.handler import HttpProtocolHandler
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

from swe_sandbox.network.policy import MAX_LOGGED_HOST, Decision, NetworkPolicy, normalize_host

#: Environment variable naming the policy JSON file (``NetworkPolicy.model_dump_json()``).
POLICY_ENV = "SWE_SANDBOX_NET_POLICY"
#: Environment variable naming the decision log (appended, one JSON object a line).
LOG_ENV = "SWE_SANDBOX_NET_LOG"
#: Longest request head (request line and headers) a connection's first request may have, in bytes:
#: past it the connection is refused and logged (proxy.py re-parses its whole buffer at every read,
#: so an endless head costs the host CPU time growing with its square).
MAX_HEAD = 64 << 10
#: The port a plain request's ``Host`` header without one means.
DEFAULT_HTTP_PORT = 80
#: Why a connection that closed without any decision is logged as refused.
UNANSWERED = "no answer: an unfinished request head, or data sent after it before the answer (pipelining)"


@dataclass
class ClientState:
    """What the handler saw of one client connection.

    Attributes:
        head (bytes): the bytes received until the end of the first request's head (a blank line),
            at most ``MAX_HEAD``.
        bytes_up (int): every byte received from the client.
        decided (bool): a decision was logged for the connection.
    """

    head: bytes = b""
    bytes_up: int = 0
    decided: bool = False

    def head_done(self) -> bool:
        """Whether the first request's head is complete."""
        return b"\r\n\r\n" in self.head

    def host_headers(self) -> int:
        """How many ``Host`` headers the first request's head holds."""
        lines = self.head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
        return sum(1 for line in lines if line.partition(b":")[0].strip().lower() == b"host")

    def request_line(self) -> str:
        """The raw request line, decoded leniently ('' until a whole line came)."""
        line, crlf, _ = self.head.partition(b"\r\n")
        return line.decode("latin-1") if crlf else ""


_CLIENTS: weakref.WeakKeyDictionary[Any, ClientState] = weakref.WeakKeyDictionary()
_OPEN: weakref.WeakSet[AllowListPlugin] = weakref.WeakSet()
_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}


def policy() -> NetworkPolicy:
    """The policy of this process, read once from the file ``$SWE_SANDBOX_NET_POLICY``.

    Raises:
        KeyError: the variable is not set.
        pydantic.ValidationError: the file is not a valid policy.
    """
    with _LOCK:
        if "policy" not in _LOADED:
            _LOADED["policy"] = NetworkPolicy.model_validate_json(Path(os.environ[POLICY_ENV]).read_text())
        loaded: NetworkPolicy = _LOADED["policy"]
        return loaded


def log_decision(decision: Decision) -> None:
    """Append one decision to ``$SWE_SANDBOX_NET_LOG``: one JSON line, one ``write`` (O_APPEND)."""
    with _LOCK:
        if "fd" not in _LOADED:
            _LOADED["fd"] = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(_LOADED["fd"], (json.dumps(decision.as_dict()) + "\n").encode())


def note(state: ClientState, decision: Decision) -> None:
    """Log ``decision`` for the connection of ``state`` (which then counts as decided)."""
    state.decided = True
    log_decision(decision)


def refused(host: str, port: int | None, method: str, reason: str, bytes_up: int = 0) -> Decision:
    """A refusal, as logged."""
    return Decision(host[:MAX_LOGGED_HOST], port, method, False, reason, None, bytes_up, 0, time.time())


@dataclass(frozen=True)
class Target:
    """The target of a request line, split as the client wrote it.

    Attributes:
        method (str): the method.
        host (str): the host part, raw ('' when there is none).
        port (int | None): the port (None when absent or unparsable).
        error (str | None): why the target is refused whatever the policy says.
    """

    method: str
    host: str
    port: int | None
    error: str | None


def parse_request_line(line: str) -> Target:
    """Split a raw request line's target into host and port, refusing what no policy may allow.

    CONNECT takes an authority (``host:port``); any other method an absolute ``http://`` URL.

    Args:
        line (str): the request line, e.g. ``CONNECT pypi.org:443 HTTP/1.1``.

    Returns:
        Target: ``error`` set for a userinfo (``@``), an IP literal, a relative or non-http URL, a bad port.
    """
    parts = line.split(" ")
    if len(parts) != 3:
        return Target(parts[0][:16], line[:MAX_LOGGED_HOST], None, "bad request line")
    method, target, _ = parts
    if method.upper() != "CONNECT":
        scheme, sep, rest = target.partition("://")
        if not sep or scheme.lower() != "http":
            return Target(method, target, None, "not an absolute http:// URL")
        for stop in "/?#":
            rest = rest.split(stop, 1)[0]
        target = rest
    return _split_authority(method, target, None if method.upper() == "CONNECT" else 80)


def _is_ipv6(text: str) -> bool:
    """Whether ``text`` is an IPv6 address written bare (``::1``); ``host:80:81`` is a bad port."""
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def _split_authority(method: str, authority: str, default_port: int | None) -> Target:
    if "@" in authority:
        return Target(method, authority, None, "user info in target")
    if authority.startswith("[") or (authority.count(":") > 1 and _is_ipv6(authority)):
        return Target(method, authority, None, "raw IP address")
    host, sep, port_text = authority.partition(":")
    if not sep:
        if default_port is None:
            return Target(method, host, None, "no port")
        return Target(method, host, default_port, None)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        return Target(method, host, None, "bad port")
    return Target(method, host, int(port_text), None)


def choose_address(rules: NetworkPolicy, host: str, port: int) -> tuple[str | None, str | None]:
    """The address to connect to: the policy's ``resolve`` entry, else the first public one DNS gives.

    Args:
        rules (NetworkPolicy): the policy.
        host (str): the normalized name (already allowed by ``decide``).
        port (int): the port.

    Returns:
        tuple[str | None, str | None]: (address, None), or (None, reason) when none may be used.
    """
    if host in rules.resolve:
        return rules.resolve[host], None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None, f"cannot resolve {host}"
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if ip.is_global and not ip.is_multicast:
            return address, None
    shown = addresses[0] if addresses else "nothing"
    return None, f"resolves to a non-public address {shown}"


def host_header_mismatch(request: HttpParser, host: str) -> bool:
    """Whether a plain request's ``Host`` header names another host or port than ``host`` (the URL's,
    normalized) and the URL's port (a header without a port means ``DEFAULT_HTTP_PORT``).

    A request to an allowed server's address must not ask it, by the header, for another site it serves.
    """
    if request.is_https_tunnel or not request.has_header(b"host"):
        return False
    header = request.header(b"host").decode("latin-1").strip()
    if header.startswith("["):
        return True
    name, colon, port = header.rpartition(":") if ":" in header else (header, "", "")
    if colon and (not port.isdigit() or int(port) != request.port):
        return True
    if not colon and request.port != DEFAULT_HTTP_PORT:
        return True
    return normalize_host(name) != host


def reject(reason: str) -> HttpRequestRejected:
    """The 403 a refused request gets (the reason is its body)."""
    return HttpRequestRejected(
        status_code=403, reason=b"Forbidden", body=f"swe-sandbox network policy: {reason}\n".encode()
    )


class RecordingHandler(HttpProtocolHandler):
    """proxy.py's HTTP handler, keeping each connection's request line and bytes for the plugin."""

    def handle_data(self, data: memoryview) -> bool | None:
        """Record ``data``, then let proxy.py handle it; log a request proxy.py refused without a plugin."""
        if data is None:
            return super().handle_data(data)
        state = _CLIENTS.setdefault(self.work, ClientState())
        state.bytes_up += len(data)
        if not state.head_done():
            state.head = (state.head + bytes(data))[:MAX_HEAD + 1]
            if len(state.head) > MAX_HEAD and not state.head_done():
                target = parse_request_line(state.request_line())
                note(state, refused(target.host, target.port, target.method,
                                    f"request head longer than {MAX_HEAD} bytes", state.bytes_up))
                return True
        teardown = super().handle_data(data)
        if teardown and self.plugin is None and state.request_line():
            target = parse_request_line(state.request_line())
            reason = target.error or "not a proxy request"
            note(state, refused(target.host, target.port, target.method, reason, state.bytes_up))
        return teardown

    def shutdown(self) -> None:
        """Close the connection (an allowed one is logged then); log one that ended without any
        decision (``UNANSWERED``)."""
        try:
            super().shutdown()
        finally:
            state = _CLIENTS.get(self.work)
            if state is not None and not state.decided and state.bytes_up:
                target = parse_request_line(state.request_line())
                note(state, refused(target.host, target.port, target.method, UNANSWERED, state.bytes_up))


class AllowListPlugin(HttpProxyBasePlugin):
    """Enforces the process's ``NetworkPolicy`` on each client connection and logs its decisions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target: tuple[str, int] | None = None
        self.raw_host = ""
        self.method = ""
        self.address: str | None = None
        self.bytes_down = 0

    def _state(self) -> ClientState:
        return _CLIENTS.get(self.client) or ClientState()

    def _refuse(self, host: str, port: int | None, method: str, reason: str) -> HttpRequestRejected:
        state = self._state()
        note(state, refused(host, port, method, reason, state.bytes_up))
        return reject(reason)

    def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
        """Decide on the first request; refuse (403, logged) or remember the address to connect to.

        Raises:
            HttpRequestRejected: the request is refused.
        """
        target = parse_request_line(self._state().request_line())
        parsed = normalize_host((request.host or b"").decode("latin-1"))
        reason = target.error
        if reason is None and target.port is not None and (
            normalize_host(target.host) != parsed or target.port != request.port
        ):
            reason = "target does not parse the same"  # e.g. `http://a.test:80#@10.0.0.1/` read two ways
        if reason is None and self._state().host_headers() > 1:
            reason = "more than one Host header"
        if reason is None and host_header_mismatch(request, parsed):
            reason = "Host header names another host"
        if reason is None and target.port is not None:
            reason = policy().decide(target.host, target.port)
        address: str | None = None
        if reason is None and target.port is not None:
            address, reason = choose_address(policy(), parsed, target.port)
        if reason is not None or target.port is None:
            raise self._refuse(target.host, target.port, target.method, reason or "no port")
        self.target, self.raw_host, self.method, self.address = (parsed, target.port), target.host, target.method, address
        _OPEN.add(self)
        return request

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, Any]:
        """The address chosen in ``before_upstream_connection`` (proxy.py does no lookup of its own).

        Raises:
            HttpRequestRejected: proxy.py asks for another target than the one decided on.
        """
        if self.target != (normalize_host(host), port) or self.address is None:
            raise reject("target changed")
        return self.address, None

    def handle_client_request(self, request: HttpParser) -> HttpParser | None:
        """Hold every later keep-alive request of the connection to the first one's host:port.

        Raises:
            HttpRequestRejected: a request names another host or port (logged).
        """
        if request.is_https_tunnel or self.target is None:
            return request
        host = normalize_host((request.host or b"").decode("latin-1"))
        method = (request.method or b"").decode("latin-1")
        if (host, request.port) != self.target:
            raise self._refuse(host, request.port, method, f"keep-alive request to another host than {self.target[0]}")
        if host_header_mismatch(request, host):
            raise self._refuse(host, request.port, method, "Host header names another host")
        return request

    def handle_upstream_chunk(self, chunk: memoryview) -> memoryview | None:
        """Count the bytes from upstream (exact, tunnels included)."""
        self.bytes_down += len(chunk)
        return chunk

    def on_access_log(self, context: dict[str, Any]) -> dict[str, Any] | None:
        """Log the allowed connection now that it closed; no access log of proxy.py's own."""
        self.log_allowed()
        return None

    def log_allowed(self) -> None:
        """Log this connection's allowed decision with its bytes so far (once; nothing if it was refused)."""
        if self.target is not None and self in _OPEN:
            _OPEN.discard(self)
            note(self._state(), Decision(
                self.raw_host[:MAX_LOGGED_HOST], self.target[1], self.method, True, None, self.address,
                self._state().bytes_up, self.bytes_down, time.time(),
            ))


def log_open_connections() -> None:
    """Log every allowed connection still open in this process (the proxy is being stopped)."""
    for plugin in list(_OPEN):
        plugin.log_allowed()
