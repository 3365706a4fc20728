"""The allow-list proxy for real: a proxy process on a unix socket, an index on 127.0.0.1, pip through it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netkit import (  # noqa: F401 - fixtures
    WHEEL,
    Forwarder,
    ask,
    index,
    index_policy,
    open_client,
    proxy,
    read_all,
    read_response,
    short_dir,
)

from swe_sandbox.errors import SandboxStartError
from swe_sandbox.network import AllowListProxy, NetworkPolicy, gc
from swe_sandbox.network.plugin import MAX_HEAD, UNANSWERED
from swe_sandbox.network.proxy_process import live_group_members


def status(answer: bytes) -> int:
    """The status code of a raw HTTP answer."""
    return int(answer.split(b" ", 2)[1])


def wait_group_gone(pgid: int, timeout: float = 10) -> list[int]:
    """Poll /proc until group ``pgid`` is empty or ``timeout`` seconds passed; the members left."""
    deadline = time.monotonic() + timeout
    while (left := live_group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_allowed_name_over_plain_http_and_connect(proxy: AllowListProxy, index: int) -> None:
    answer = ask(proxy, f"GET http://index.test:{index}/simple/tinypkg/ HTTP/1.0\r\nHost: index.test:{index}\r\n\r\n".encode())
    assert status(answer) == 200 and WHEEL.encode() in answer
    with open_client(proxy) as client:
        client.sendall(f"CONNECT index.test:{index} HTTP/1.1\r\nHost: index.test:{index}\r\n\r\n".encode())
        head = client.recv(4096)
        assert status(head) == 200
        client.sendall(b"GET /simple/tinypkg/ HTTP/1.1\r\nHost: index.test\r\n\r\n")
        _, body = read_response(client)
        assert WHEEL.encode() in body
    decisions = [d for d in proxy_decisions(proxy, 2) if d["allowed"]]
    assert {(d["method"], d["host"], d["port"], d["address"]) for d in decisions} == {
        ("GET", "index.test", index, "127.0.0.1"), ("CONNECT", "index.test", index, "127.0.0.1")}
    assert all(d["bytes_up"] > 0 and d["bytes_down"] > len(WHEEL) for d in decisions)


def proxy_decisions(proxy: AllowListProxy, count: int, timeout: float = 10) -> list[dict]:
    """The proxy's decisions once there are ``count`` (allowed ones are logged when they close)."""
    deadline = time.monotonic() + timeout
    while len(found := proxy.decisions()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def refused_cases(port: int) -> list[tuple[bytes, str, str]]:
    """(request, host logged, reason) of requests the test policy refuses."""
    return [
        (f"CONNECT nope.test:{port} HTTP/1.1\r\n\r\n".encode(), "nope.test", "name not allowed"),
        (f"GET http://nope.test:{port}/ HTTP/1.1\r\n\r\n".encode(), "nope.test", "name not allowed"),
        (f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode(), "127.0.0.1", "raw IP address"),
        (f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode(), "127.0.0.1", "raw IP address"),
        (f"CONNECT [::1]:{port} HTTP/1.1\r\n\r\n".encode(), f"[::1]:{port}", "raw IP address"),
        (f"CONNECT index.test:{port}:1 HTTP/1.1\r\n\r\n".encode(), "index.test", "bad port"),
        (f"GET http://index.test:{port}#@127.0.0.1:1/ HTTP/1.1\r\n\r\n".encode(), "index.test",
         "target does not parse the same"),
        (b"CONNECT index.test:22 HTTP/1.1\r\n\r\n", "index.test", "port 22 not allowed for index.test"),
        (f"CONNECT index.test@evil.test:{port} HTTP/1.1\r\n\r\n".encode(), f"index.test@evil.test:{port}",
         "user info in target"),
        (f"GET http://index.test@evil.test:{port}/ HTTP/1.1\r\n\r\n".encode(), f"index.test@evil.test:{port}",
         "user info in target"),
        (f"GET http://u:p@index.test:{port}/ HTTP/1.1\r\n\r\n".encode(), f"u:p@index.test:{port}",
         "user info in target"),
        (b"CONNECT localhost:443 HTTP/1.1\r\n\r\n", "localhost", "resolves to a non-public address 127.0.0.1"),
        (b"GET / HTTP/1.1\r\nHost: index.test\r\n\r\n", "/", "not an absolute http:// URL"),
        (f"GET http://index.test:{port}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n".encode(), "index.test",
         "Host header names another host"),
        (f"GET http://index.test:{port}/ HTTP/1.1\r\nHost: index.test:1\r\n\r\n".encode(), "index.test",
         "Host header names another host"),
        (f"GET http://index.test:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\nHost: index.test:{port}\r\n\r\n".encode(),
         "index.test", "more than one Host header"),
    ]


def test_refusals_are_answered_and_logged(proxy: AllowListProxy, index: int) -> None:
    cases = refused_cases(index)
    for request, _, _ in cases:
        answer = ask(proxy, request)
        assert status(answer) in (400, 403), (request, answer)
        assert b"200" not in answer.split(b"\r\n", 1)[0]
    logged = [(d["host"], d["reason"]) for d in proxy_decisions(proxy, len(cases))]
    assert logged == [(host, reason) for _, host, reason in cases]
    assert not any(d["allowed"] or d["address"] for d in proxy.decisions())


def test_a_name_resolving_to_loopback_is_refused_even_under_star(short_dir: Path) -> None:
    (short_dir / "net").mkdir()
    with AllowListProxy(NetworkPolicy(allow=["*"]), short_dir / "net", state_dir=short_dir / "state") as proxy:
        for request in (b"CONNECT localhost:443 HTTP/1.1\r\n\r\n", b"GET http://localhost/ HTTP/1.1\r\n\r\n"):
            assert status(ask(proxy, request)) == 403
        reasons = {d["reason"] for d in proxy_decisions(proxy, 2)}
    assert len(reasons) == 1 and reasons.pop().startswith("resolves to a non-public address ")


def test_an_endless_request_head_is_cut_and_logged(proxy: AllowListProxy, index: int) -> None:
    """A head past ``MAX_HEAD`` ends the connection at once (the red team's 256 MB line held the
    proxy's CPU for minutes), and is logged."""
    with open_client(proxy) as client:
        client.sendall(f"GET http://index.test:{index}/".encode() + b"a" * (MAX_HEAD + 4096))
        assert read_all(client) == b""
    (decision,) = proxy_decisions(proxy, 1)
    assert decision["reason"] == f"request head longer than {MAX_HEAD} bytes" and not decision["allowed"]


def test_a_connection_that_gets_no_answer_is_logged(proxy: AllowListProxy, index: int) -> None:
    """An unfinished head, closed by the client: no decision was made, and the log says so."""
    with open_client(proxy) as client:
        client.sendall(f"GET http://index.test:{index}/ HTTP/1.1\r\nHost: index".encode())
    (decision,) = proxy_decisions(proxy, 1)
    assert (decision["reason"], decision["allowed"]) == (UNANSWERED, False)


def test_keep_alive_request_may_not_switch_host(proxy: AllowListProxy, index: int) -> None:
    with open_client(proxy) as client:
        client.sendall(f"GET http://index.test:{index}/simple/tinypkg/ HTTP/1.1\r\nHost: index.test:{index}\r\n\r\n".encode())
        head, _ = read_response(client)
        assert status(head) == 200
        client.sendall(f"GET http://index.test:{index}/simple/tinypkg/ HTTP/1.1\r\nHost: index.test:{index}\r\n\r\n".encode())
        head, _ = read_response(client)
        assert status(head) == 200
        client.sendall(f"GET http://other.test:{index}/ HTTP/1.1\r\nHost: other.test:{index}\r\n\r\n".encode())
        assert status(read_all(client)) == 403
    decisions = proxy_decisions(proxy, 2)
    assert (decisions[0]["host"], decisions[0]["allowed"]) == ("other.test", False)
    assert decisions[0]["reason"] == "keep-alive request to another host than index.test"
    assert decisions[1]["allowed"] and decisions[1]["host"] == "index.test"


def pip_download(forwarder: Forwarder, index_url: str, dest: Path) -> subprocess.CompletedProcess[str]:
    """``pip download tinypkg`` from ``index_url``, through the forwarder as HTTP(S)_PROXY."""
    proxy_url = f"http://127.0.0.1:{forwarder.port}"
    env = {**os.environ, "HTTP_PROXY": proxy_url, "HTTPS_PROXY": proxy_url, "http_proxy": proxy_url,
           "https_proxy": proxy_url, "NO_PROXY": "", "no_proxy": "", "PIP_CONFIG_FILE": os.devnull}
    host = index_url.split("//", 1)[1].split(":", 1)[0]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
               "--retries", "0", "--timeout", "10", "--trusted-host", host, "--index-url", index_url,
               "-d", str(dest), "tinypkg"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_pip_download_by_name_works_and_by_ip_does_not(proxy: AllowListProxy, index: int, tmp_path: Path) -> None:
    forwarder = Forwarder(proxy.socket_path)
    try:
        by_name = pip_download(forwarder, f"http://index.test:{index}/simple", tmp_path / "by-name")
        assert by_name.returncode == 0, by_name.stdout + by_name.stderr
        assert (tmp_path / "by-name" / WHEEL).is_file()
        by_ip = pip_download(forwarder, f"http://127.0.0.1:{index}/simple", tmp_path / "by-ip")
        assert by_ip.returncode != 0
        assert not (tmp_path / "by-ip").exists() or not list((tmp_path / "by-ip").iterdir())
    finally:
        forwarder.close()
    decisions = proxy.decisions()
    allowed = [d for d in decisions if d["allowed"]]
    assert allowed and all(d["host"] == "index.test" and d["bytes_down"] > 0 for d in allowed)
    assert any(d["host"] == "127.0.0.1" and d["reason"] == "raw IP address" for d in decisions)


def test_set_policy_closes_tunnels_and_applies_the_new_policy(proxy: AllowListProxy, index: int) -> None:
    first_pid = proxy.pid
    with open_client(proxy) as tunnel:
        tunnel.sendall(f"CONNECT index.test:{index} HTTP/1.1\r\n\r\n".encode())
        assert status(tunnel.recv(4096)) == 200
        proxy.set_policy(NetworkPolicy(allow=[f"other.test:{index}"], resolve={"other.test": "127.0.0.1"}))
        assert tunnel.recv(4096) == b""  # the old proxy died with its tunnel
    assert proxy.pid != first_pid and live_group_members(first_pid) == []
    assert status(ask(proxy, f"CONNECT index.test:{index} HTTP/1.1\r\n\r\n".encode())) == 403
    answer = ask(proxy, f"GET http://other.test:{index}/simple/tinypkg/ HTTP/1.0\r\n\r\n".encode())
    assert status(answer) == 200
    decisions = proxy_decisions(proxy, 3)
    assert [(d["host"], d["method"], d["allowed"]) for d in decisions] == [
        ("index.test", "CONNECT", True), ("index.test", "CONNECT", False), ("other.test", "GET", True)]
    assert decisions[0]["bytes_down"] == 0 and decisions[0]["bytes_up"] > 0  # logged by the stopping proxy


def test_stop_leaves_no_process_and_keeps_decisions(index: int, short_dir: Path) -> None:
    (short_dir / "net").mkdir()
    proxy = AllowListProxy(index_policy(index), short_dir / "net", state_dir=short_dir / "state")
    proxy.start()
    pgid = proxy.pgid
    assert pgid is not None and len(live_group_members(pgid)) >= 2  # the server and its acceptor
    assert (proxy.socket_path.stat().st_mode & 0o777) == 0o666
    assert status(ask(proxy, b"CONNECT nope.test:443 HTTP/1.1\r\n\r\n")) == 403
    proxy_decisions(proxy, 1)
    proxy.stop()
    proxy.stop()
    assert live_group_members(pgid) == [] and not proxy.socket_path.exists()
    assert list((short_dir / "state").iterdir()) == []
    assert [d["host"] for d in proxy.decisions()] == ["nope.test"]


def test_a_bad_start_raises_with_the_stderr_tail(short_dir: Path) -> None:
    proxy = AllowListProxy(NetworkPolicy(), short_dir / "missing-dir", state_dir=short_dir / "state")
    with pytest.raises(SandboxStartError, match="network proxy exited"):
        proxy.start(timeout=30)
    proxy.stop()


OWNER = """
import sys, time
from pathlib import Path
from swe_sandbox.network import AllowListProxy, NetworkPolicy
proxy = AllowListProxy(NetworkPolicy(allow=["*"]), Path(sys.argv[1]), state_dir=Path(sys.argv[2]))
proxy.start()
print(proxy.pgid, flush=True)
time.sleep(600)
"""


def test_kill_9_of_the_owner_leaves_no_proxy(short_dir: Path) -> None:
    (short_dir / "net").mkdir()
    state = short_dir / "state"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(short_dir / "net"), str(state)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pgid = int(owner.stdout.readline())
        assert live_group_members(pgid)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert wait_group_gone(pgid) == []
        assert len(list(state.iterdir())) == 1  # the owner could not clean up: gc does
        assert gc(state) == 0
        assert list(state.iterdir()) == []
    finally:
        owner.kill()
        owner.wait()


def test_gc_kills_a_proxy_whose_owner_is_gone(index: int, short_dir: Path) -> None:
    (short_dir / "net").mkdir()
    state = short_dir / "state"
    proxy = AllowListProxy(index_policy(index), short_dir / "net", state_dir=state)
    proxy.start()
    try:
        assert gc(state) == 0  # its owner (this process) lives
        record = next(state.iterdir())
        record.write_text(record.read_text().replace(f'"owner_pid": {os.getpid()}', '"owner_pid": 1'))
        pgid = proxy.pgid
        assert pgid is not None
        assert gc(state) == 1
        assert wait_group_gone(pgid) == []
    finally:
        proxy.stop()


def test_acceptors_die_with_the_server(index: int, short_dir: Path) -> None:
    (short_dir / "net").mkdir()
    proxy = AllowListProxy(index_policy(index), short_dir / "net", state_dir=short_dir / "state")
    proxy.start()
    try:
        assert proxy.pid is not None
        acceptors = [pid for pid in live_group_members(proxy.pid) if pid != proxy.pid]
        assert acceptors
        os.kill(proxy.pid, signal.SIGKILL)  # the server alone: PR_SET_PDEATHSIG takes its children
        assert wait_group_gone(proxy.pid) == []
    finally:
        proxy.stop()
    assert not proxy.socket_path.exists()


def test_a_shared_state_directory_is_refused(short_dir: Path) -> None:
    (short_dir / "net").mkdir()
    (short_dir / "state").mkdir(mode=0o777)
    (short_dir / "state").chmod(0o777)
    proxy = AllowListProxy(NetworkPolicy(), short_dir / "net", state_dir=short_dir / "state")
    with pytest.raises(SandboxStartError, match="not ours alone"):
        proxy.start()
    assert proxy.pid is None
    assert gc(short_dir / "state") == 0
