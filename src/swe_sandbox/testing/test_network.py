"""``network: allowlist`` (DESIGN.md section 11), run against the backend under test as something
trying to get past it: commands reach the allowed names through the host's proxy and nothing else.

A package index serves on the host's 127.0.0.1 (``package_index``); the sandbox's policy allows
``index.test`` (and ``localhost``) on that port only, and tells the proxy that ``index.test`` and
``other.test`` are at 127.0.0.1 (``resolve``). From inside, every other way out must fail: a name not
allowed, a raw IP, another port, a name smuggled after ``@``, a name resolving to loopback, DNS, a
direct connection; each attempt is in the proxy's decision log with the name it asked for.

The module's sandbox is made inside the first test that needs it, so a backend lacking
``NETWORK_ALLOWLIST`` fails those tests, which are then strict xfails (``requires``).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swe_sandbox.capabilities import NETWORK_ALLOWLIST
from swe_sandbox.network.policy import NetworkPolicy
from swe_sandbox.network.proxy_process import gc as gc_proxies
from swe_sandbox.testing.kit import Variant, requires, run, wait_until
from swe_sandbox.testing.package_index import WHEEL, package_index

pytestmark = requires(NETWORK_ALLOWLIST)

#: The in-sandbox client: sends argv[1] (a raw HTTP request, ``\r\n`` escaped as ``\\r\\n``) to the
#: proxy at 127.0.0.1:3128 (what HTTP_PROXY names) and prints the status line and the answer's size;
#: with argv[2], that request is sent through the tunnel a 200 answer opened.
CLIENT = textwrap.dedent('''
    import socket, sys
    def answer(sock):
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
            if sys.argv[2:] and b"\\r\\n\\r\\n" in data and not tunneled:
                break
        return data
    tunneled = False
    sock = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    sock.sendall(sys.argv[1].encode().decode("unicode_escape").encode("latin-1"))
    head = answer(sock)
    print(head.split(b"\\r\\n")[0].decode("latin-1"))
    if sys.argv[2:] and b" 200" in head.split(b"\\r\\n")[0]:
        tunneled = True
        sock.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
        print(answer(sock).decode("latin-1"))
''')

#: Name lookups and direct connections from inside, each printing ``NAME ok`` or ``NAME failed``.
NO_ROUTE = textwrap.dedent('''
    import socket, sys
    port = int(sys.argv[1])
    def attempt(name, what):
        try:
            what()
            print(name, "ok")
        except OSError:
            print(name, "failed")
    attempt("dns-allowed", lambda: socket.getaddrinfo("index.test", port))
    attempt("dns-public", lambda: socket.getaddrinfo("pypi.org", 443))
    attempt("host-loopback", lambda: socket.create_connection(("127.0.0.1", port), timeout=3).close())
    attempt("public-ip", lambda: socket.create_connection(("192.0.2.1", 80), timeout=3).close())
''')


class Net:
    """The index on the host, the policy that allows it by name, and the sandbox (made on first use)."""

    def __init__(self, variant: Variant, port: int):
        self.variant, self.port = variant, port
        self.policy = NetworkPolicy(allow=[f"index.test:{port}", f"localhost:{port}"],
                                    resolve={"index.test": "127.0.0.1", "other.test": "127.0.0.1"})
        self._env: Any = None

    def fields(self) -> dict[str, Any]:
        return {"network": "allowlist", "allow": list(self.policy.allow), "resolve": dict(self.policy.resolve),
                "timeout": 60}

    @property
    def env(self) -> Any:
        if self._env is None:
            self._env = self.variant.make(**self.fields())
            self._env.start()
        return self._env

    def ask(self, request: str, through: str = "") -> str:
        """The proxy's status line for a raw ``request`` sent from inside (and what ``through``, sent
        in the tunnel it opened, got back)."""
        argv = " ".join(shlex.quote(part) for part in (request, through) if part)
        return run(self.env, f"python3 -c {shlex.quote(CLIENT)} {argv}")["output"]

    def refusals_of(self, host: str) -> list[dict[str, Any]]:
        return [d for d in self.env.network_decisions() if not d["allowed"] and host in d["host"]]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


@pytest.fixture(scope="module")
def net(backend_under_test: Variant, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    backend_under_test.require_available()
    with package_index(tmp_path_factory.mktemp("index")) as port:
        made = Net(backend_under_test, port)
        try:
            yield made
        finally:
            made.close()


def test_an_allowed_name_answers_over_plain_http(net: Net) -> None:
    fetch = f"import urllib.request as u; print(u.urlopen('http://index.test:{net.port}/simple/tinypkg/').read().decode())"
    result = run(net.env, f"python3 -c {shlex.quote(fetch)}")
    assert result["returncode"] == 0 and WHEEL in result["output"], result
    assert wait_until(lambda: any(d["allowed"] and d["host"] == "index.test" and d["bytes_down"] > len(WHEEL)
                                  for d in net.env.network_decisions()), within=10), net.env.network_decisions()


def test_an_allowed_name_answers_through_connect(net: Net) -> None:
    output = net.ask(f"CONNECT index.test:{net.port} HTTP/1.1\\r\\nHost: index.test:{net.port}\\r\\n\\r\\n",
                     "GET /simple/tinypkg/ HTTP/1.0\\r\\nHost: index.test\\r\\n\\r\\n")
    assert output.splitlines()[0].split()[1] == "200" and WHEEL in output, output


REFUSED = {
    "a name not allowed": ("CONNECT other.test:{port} HTTP/1.1\\r\\n\\r\\n", "other.test"),
    "a raw IPv4 address": ("CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n", "127.0.0.1"),
    "a raw IPv6 address": ("CONNECT [::1]:{port} HTTP/1.1\\r\\n\\r\\n", "::1"),
    "another port of an allowed name": ("CONNECT index.test:1 HTTP/1.1\\r\\n\\r\\n", "index.test"),
    "a name smuggled after @ (CONNECT)": ("CONNECT index.test@other.test:{port} HTTP/1.1\\r\\n\\r\\n", "other.test"),
    "a name smuggled after @ (URL)": ("GET http://index.test:{port}@other.test:{port}/ HTTP/1.1\\r\\nHost: other.test"
                                      "\\r\\n\\r\\n", "other.test"),
    "an allowed name that resolves to loopback": ("GET http://localhost:{port}/ HTTP/1.1\\r\\nHost: localhost"
                                                   "\\r\\n\\r\\n", "localhost"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_the_proxy_refuses_and_logs(net: Net, case: str) -> None:
    request, host = REFUSED[case]
    before = len(net.refusals_of(host))
    status = net.ask(request.format(port=net.port)).splitlines()[0]
    assert status.split()[1] in ("400", "403"), status
    assert wait_until(lambda: len(net.refusals_of(host)) > before, within=10), net.env.network_decisions()


def test_no_dns_and_no_route_from_inside(net: Net) -> None:
    output = run(net.env, f"python3 -c {shlex.quote(NO_ROUTE)} {net.port}")["output"].split("\n")
    assert [line for line in output if line] == ["dns-allowed failed", "dns-public failed", "host-loopback failed",
                                                 "public-ip failed"], output


def pip_download(net: Net, index: str) -> dict[str, Any]:
    """``pip download tinypkg`` in the sandbox from ``index``, with this host's pip copied in."""
    import pip

    if "pip-lib" not in run(net.env, "ls -a")["output"]:  # the working directory: every backend uploads there
        net.env.upload(Path(pip.__file__).parent, ".pip-lib/pip")
    return run(net.env, f"rm -rf /tmp/dl; PYTHONPATH=$PWD/.pip-lib python3 -m pip download --no-deps --no-cache-dir "
                        f"--disable-pip-version-check --retries 0 --timeout 5 -d /tmp/dl --index-url {index} "
                        f"--trusted-host {index.split('/')[2].split(':')[0]} tinypkg "
                        "2>&1 | tail -3; ls /tmp/dl", timeout=120)


def test_pip_downloads_from_an_index_allowed_by_name(net: Net) -> None:
    result = pip_download(net, f"http://index.test:{net.port}/simple")
    assert WHEEL in result["output"], result


def test_pip_cannot_reach_the_same_index_by_ip(net: Net) -> None:
    result = pip_download(net, f"http://127.0.0.1:{net.port}/simple")
    assert WHEEL not in result["output"], result
    assert wait_until(lambda: net.refusals_of("127.0.0.1"), within=10)


def test_a_phase_without_network_refuses_what_the_last_allowed(net: Net) -> None:
    fetch = f"python3 -c \"import urllib.request as u; u.urlopen('http://index.test:{net.port}/simple/')\""
    net.env.set_network(None)
    try:
        assert run(net.env, fetch)["returncode"] != 0
        assert wait_until(lambda: net.refusals_of("index.test"), within=10)
    finally:
        net.env.set_network(net.policy)
    assert run(net.env, fetch)["returncode"] == 0


DRIVER = textwrap.dedent('''
    import json, sys, time
    import swe_sandbox
    base, fields = json.loads(sys.argv[1])
    env = swe_sandbox.get_environment(base, **fields)
    env.start()
    print(json.dumps(env.info["network"]), flush=True)
    time.sleep(600)
''')


def test_kill_9_of_the_driver_leaves_no_proxy(net: Net) -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(net.variant.environment_args(**net.fields()))],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = driver.stdout.readline() if driver.stdout else ""
        assert line, "the driver did not start its sandbox"
        proxy = json.loads(line)["proxy_pid"]
        assert os.path.exists(f"/proc/{proxy}")
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    assert wait_until(lambda: not alive(proxy), within=15), f"proxy {proxy} outlived its driver"
    assert gc_proxies() == 0  # nothing left to kill; its files go (what ``swe-sandbox gc`` does)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
