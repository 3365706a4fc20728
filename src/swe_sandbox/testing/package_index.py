"""A tiny package index on 127.0.0.1 for the network tests: one wheel (``tinypkg`` 0.1) under a
PEP 503 simple index (``/simple/tinypkg/``), served over HTTP/1.1 keep-alive by a thread.

Used by the kit's allow-list suite (``test_network``) and the proxy's own tests (tests/network).
"""

from __future__ import annotations

import base64
import hashlib
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WHEEL = "tinypkg-0.1-py3-none-any.whl"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(path: Path) -> None:
    """A minimal valid wheel of ``tinypkg`` 0.1 at ``path`` (the wheel format: PEP 427)."""
    files = {
        "tinypkg/__init__.py": b"VALUE = 1\n",
        "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(name, data) for name, data in files.items()] + ["tinypkg-0.1.dist-info/RECORD,,"]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("tinypkg-0.1.dist-info/RECORD", "\n".join(record) + "\n")


class KeepAliveHandler(SimpleHTTPRequestHandler):
    """Static files over HTTP/1.1 (keep-alive), quietly."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def package_index(root: Path) -> Iterator[int]:
    """Serve a simple index holding ``WHEEL`` from ``root`` (an empty directory) on 127.0.0.1;
    yields its port, and stops the server at the end."""
    (root / "files").mkdir()
    write_wheel(root / "files" / WHEEL)
    (root / "simple" / "tinypkg").mkdir(parents=True)
    (root / "simple" / "tinypkg" / "index.html").write_text(f'<a href="../../files/{WHEEL}">{WHEEL}</a>\n')
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(KeepAliveHandler, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
