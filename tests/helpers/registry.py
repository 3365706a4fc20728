"""A real container registry on loopback for the pull tests: Debian's ``docker-registry`` (the CNCF
Distribution registry, 2.8), started with a YAML config of our own and stopped by its pid.

Its access log (one Apache combined-format line per request, on its stdout) is how the tests see
what the engines fetched: ``Registry.fetches`` counts the ``GET .../blobs/<digest>`` answered 200 by
user agent (Docker's starts with ``docker/``, Podman's with ``containers/``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

BINARY = "docker-registry"
#: One access-log line: method, path, status, user agent.
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+" (?P<status>\d{3}) .* "(?P<agent>[^"]*)"$')
BLOB_PATH = re.compile(r"^/v2/.+/blobs/(sha256:[0-9a-f]{64})$")
AGENTS = {"docker": "docker/", "podman": "containers/"}
READY_WITHIN_S = 15.0


def require_registry() -> str:
    """The registry binary's path; skips the test without it, fails under CI (``.ci/run`` installs it)."""
    path = shutil.which(BINARY)
    if path:
        return path
    message = f"{BINARY} is not installed (Debian package docker-registry; scripts/setup-engines.sh installs it)"
    if "CI" in os.environ:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_htpasswd(path: Path, user: str, password: str) -> Path:
    """An htpasswd file with one bcrypt entry (the only hash the registry accepts)."""
    import bcrypt

    path.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()}\n")
    return path


class Registry:
    """One registry process on ``127.0.0.1:port``, storing under ``root``; ``htpasswd``: basic auth."""

    def __init__(self, root: Path, htpasswd: Path | None = None):
        self.root, self.htpasswd = root, htpasswd
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log = root / "access.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _config(self) -> Path:
        auth = (f"auth:\n  htpasswd:\n    realm: swe-sandbox-test\n    path: {self.htpasswd}\n"
                if self.htpasswd else "")
        path = self.root / "config.yml"
        path.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
                        f"{self.root / 'data'}\n  delete:\n    enabled: true\nhttp:\n  addr: {self.address}\n{auth}")
        return path

    def start(self) -> Registry:
        """Start on a free port and wait until ``/v2/`` answers (a port taken meanwhile: another one)."""
        binary = require_registry()
        for _ in range(3):
            self.port = free_port()
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen([binary, "serve", str(self._config())], stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_ready():
                return self
            self.stop()
        raise RuntimeError(f"the registry did not start; its log: {self.log.read_text()[-2000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2).close()
                return True
            except urllib.error.HTTPError as exc:
                return exc.code == 401  # up, and asking for credentials
            except OSError:
                time.sleep(0.05)
        return False

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def mark(self) -> int:
        """Where the access log ends now (``fetches(since=...)`` counts what comes after)."""
        return self.log.stat().st_size if self.log.exists() else 0

    def requests(self, since: int = 0) -> list[dict[str, str]]:
        """The access-log entries after ``since``: ``{"method", "path", "status", "agent"}``."""
        with open(self.log, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        return [m.groupdict() for line in text.splitlines() if (m := ACCESS_LINE.search(line))]

    def fetches(self, engine: str, since: int = 0) -> Counter[str]:
        """``{digest: times}`` of blobs served (GET, 200) to ``engine`` after ``since``."""
        found: Counter[str] = Counter()
        for entry in self.requests(since):
            blob = BLOB_PATH.match(entry["path"])
            if blob and entry["method"] == "GET" and entry["status"] == "200" and entry["agent"].startswith(AGENTS[engine]):
                found[blob.group(1)] += 1
        return found
