"""The host side of ``network: allowlist``: a policy, and the proxy process that enforces it.

A sandbox with ``network: allowlist`` has its own network namespace with loopback only; its one way
out is a unix socket (``PROXY_SOCKET_NAME`` in a directory the backend binds read-only at
``SANDBOX_NET_DIR``) on which a proxy process on the host listens: proxy.py (``proxy.py`` on PyPI,
BSD, no dependencies) with our plugin (``swe_sandbox.network.plugin``). tinyproxy was considered and
left: it cannot listen on a unix socket, cannot be given name -> address entries of its own, and logs
no byte counts.

- ``policy``: ``NetworkPolicy``, ``Decision``, the shared constants (stdlib + pydantic only).
- ``proxy_process``: ``AllowListProxy`` (start, phase change, stop, decisions) and ``gc`` (stdlib only).
- ``plugin`` and ``serve``: run inside the proxy process only (they import ``proxy``).

Importing this package imports neither proxy.py nor anything with side effects.
"""

from swe_sandbox.network.policy import (
    PROXY_SOCKET_NAME,
    SANDBOX_NET_DIR,
    SANDBOX_PROXY_PORT,
    Decision,
    NetworkPolicy,
    proxy_environment,
)
from swe_sandbox.network.proxy_process import AllowListProxy, gc

__all__ = [
    "PROXY_SOCKET_NAME",
    "SANDBOX_NET_DIR",
    "SANDBOX_PROXY_PORT",
    "AllowListProxy",
    "Decision",
    "NetworkPolicy",
    "gc",
    "proxy_environment",
]
