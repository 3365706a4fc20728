"""Fixtures and helpers of the allow-list proxy tests: a package index on 127.0.0.1, proxies, a unix-socket client.

Nothing here needs a backend: the proxy runs as a plain host process, the servers on 127.0.0.1 only.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from swe_sandbox.network import AllowListProxy, NetworkPolicy
from swe_sandbox.testing.package_index import WHEEL, package_index  # noqa: F401 - WHEEL for the tests


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A simple package index (``/simple/tinypkg/``) on 127.0.0.1; yields its port."""
    with package_index(tmp_path_factory.mktemp("index")) as port:
        yield port


def index_policy(port: int) -> NetworkPolicy:
    """``index.test`` and ``other.test`` (both on the index) allowed on ``port``, and ``localhost``."""
    return NetworkPolicy(
        allow=[f"index.test:{port}", f"other.test:{port}", "localhost"],
        resolve={"index.test": "127.0.0.1", "other.test": "127.0.0.1"},
    )


@pytest.fixture()
def short_dir() -> Iterator[Path]:
    """A directory with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="net-", dir="/tmp"))
    path.chmod(0o711)  # run by root, the proxy is nobody: it must reach the socket's directory below
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def proxy(index: int, short_dir: Path) -> Iterator[AllowListProxy]:
    """A running proxy with ``index_policy(index)``; its state recorded in a private state dir."""
    (short_dir / "net").mkdir()
    with AllowListProxy(index_policy(index), short_dir / "net", state_dir=short_dir / "state") as running:
        yield running



def open_client(proxy: AllowListProxy, timeout: float = 10) -> socket.socket:
    """A connection to the proxy's unix socket."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    client.connect(str(proxy.socket_path))
    return client


def read_all(client: socket.socket) -> bytes:
    """Everything until the peer closes."""
    chunks = []
    while chunk := client.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def ask(proxy: AllowListProxy, request: bytes) -> bytes:
    """Send one raw request on a new connection; the whole answer (until the proxy closes)."""
    with open_client(proxy) as client:
        client.sendall(request)
        return read_all(client)


def read_response(client: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP response with a Content-Length: (head, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        chunk = client.recv(65536)
        assert chunk
        body += chunk
    return head, body


class Forwarder:
    """127.0.0.1:PORT -> the proxy's unix socket, as the in-sandbox forwarder would (threads)."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(self.socket_path))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()
