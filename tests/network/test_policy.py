"""NetworkPolicy: validation of its entries, and ``decide`` (pure) on a table of cases."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swe_sandbox.network import NetworkPolicy, proxy_environment
from swe_sandbox.network.plugin import parse_request_line

POLICY = NetworkPolicy(
    allow=["pypi.org", "*.pythonhosted.org", "github.com:443", "Index.Test.:8080"],
    resolve={"index.test": "127.0.0.1"},
)


@pytest.mark.parametrize("entry", [
    "10.0.0.1", "::1", "[::1]", "[::1]:443", "127.1", "0x7f000001", "a..b", ".a", "a b", "ex_ample.com",
    "a.*.com", "*a.com", "**.com", "pypi.org:0", "pypi.org:65536", "pypi.org:http", "", "-a.com", "a-.com",
])
def test_bad_allow_entries_name_the_entry_and_the_field(entry: str) -> None:
    with pytest.raises(ValidationError) as caught:
        NetworkPolicy(allow=["pypi.org", entry])
    assert "allow" in str(caught.value)
    assert repr(entry.strip().lower()) in str(caught.value) or entry == ""


@pytest.mark.parametrize("resolve", [{"1.2.3.4": "1.2.3.4"}, {"a..b": "1.2.3.4"}, {"a.test": "nope"},
                                     {"a.test": "1.2.3.4.5"}])
def test_bad_resolve_entries(resolve: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="resolve"):
        NetworkPolicy(resolve=resolve)


def test_valid_entries_are_normalized_and_frozen() -> None:
    policy = NetworkPolicy(allow=["PyPI.org.", "*", "*:8443"], resolve={"Index.Test.": "::1", "v4.test": "[::1]"})
    assert policy.allow == ["pypi.org.", "*", "*:8443"]
    assert policy.resolve == {"index.test": "::1", "v4.test": "::1"}
    with pytest.raises(ValidationError):
        policy.allow = []  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        NetworkPolicy(allowed=["x"])  # type: ignore[call-arg]


@pytest.mark.parametrize(("host", "port", "reason"), [
    ("pypi.org", 443, None),
    ("PYPI.ORG.", 80, None),
    ("pypi.org", 22, "port 22 not allowed for pypi.org"),
    ("www.pypi.org", 443, "name not allowed"),
    ("files.pythonhosted.org", 443, None),
    ("a.b.pythonhosted.org", 80, None),
    ("pythonhosted.org", 443, "name not allowed"),
    ("evilpythonhosted.org", 443, "name not allowed"),
    ("github.com", 443, None),
    ("github.com", 80, "port 80 not allowed for github.com"),
    ("index.test", 8080, None),
    ("index.test", 443, "port 443 not allowed for index.test"),
    ("140.82.112.3", 443, "raw IP address"),
    ("[::1]", 443, "raw IP address"),
    ("::1", 443, "raw IP address"),
    ("127.1", 443, "raw IP address"),
    ("0x7f000001", 443, "raw IP address"),
    ("pypi.org@evil.com", 443, "bad host name"),
    ("pypi..org", 443, "bad host name"),
    ("", 443, "bad host name"),
    ("exa_mple.org", 443, "bad host name"),
])
def test_decide(host: str, port: int, reason: str | None) -> None:
    assert POLICY.decide(host, port) == reason


def test_star_allows_any_name_but_no_address() -> None:
    policy = NetworkPolicy(allow=["*"])
    assert policy.decide("anything.example", 443) is None
    assert policy.decide("anything.example", 22) == "port 22 not allowed for anything.example"
    assert policy.decide("8.8.8.8", 443) == "raw IP address"
    assert NetworkPolicy().decide("pypi.org", 443) == "name not allowed"


@pytest.mark.parametrize(("line", "host", "port", "error"), [
    ("CONNECT pypi.org:443 HTTP/1.1", "pypi.org", 443, None),
    ("CONNECT pypi.org HTTP/1.1", "pypi.org", None, "no port"),
    ("CONNECT a.test@evil.test:443 HTTP/1.1", "a.test@evil.test:443", None, "user info in target"),
    ("CONNECT [::1]:443 HTTP/1.1", "[::1]:443", None, "raw IP address"),
    ("CONNECT ::1 HTTP/1.1", "::1", None, "raw IP address"),
    ("CONNECT pypi.org:443:444 HTTP/1.1", "pypi.org", None, "bad port"),
    ("GET http://pypi.org/simple/ HTTP/1.1", "pypi.org", 80, None),
    ("GET http://pypi.org:8080?x HTTP/1.1", "pypi.org", 8080, None),
    ("GET http://u:p@pypi.org/ HTTP/1.1", "u:p@pypi.org", None, "user info in target"),
    ("GET / HTTP/1.1", "/", None, "not an absolute http:// URL"),
    ("GET https://pypi.org/ HTTP/1.1", "https://pypi.org/", None, "not an absolute http:// URL"),
    ("GET http://pypi.org:99999/ HTTP/1.1", "pypi.org", None, "bad port"),
    ("GARBAGE", "GARBAGE", None, "bad request line"),
])
def test_raw_targets(line: str, host: str, port: int | None, error: str | None) -> None:
    target = parse_request_line(line)
    assert (target.host, target.port, target.error) == (host, port, error)


def test_proxy_environment_points_at_the_forwarder() -> None:
    env = proxy_environment()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


def test_importing_the_package_imports_no_proxy_py() -> None:
    import subprocess
    import sys

    code = "import sys, swe_sandbox.network; assert 'proxy' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
