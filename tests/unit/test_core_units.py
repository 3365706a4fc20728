"""Unit tests of the pieces behind the contract that need no sandbox."""

from __future__ import annotations

import ast
import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from swe_sandbox import ConfigError, get_environment, runner
from swe_sandbox.config import apply_overrides, load_environment_config
from swe_sandbox.environments import environment_class
from swe_sandbox.environments.base import SUBMIT_SENTINEL, Channel, find_submission
from swe_sandbox.errors import ProtocolError, SandboxDied


def test_runner_source_parses_as_python_36():
    """The runner must run on python3 >= 3.6 inside any sandbox."""
    ast.parse(Path(runner.__file__).read_text(), feature_version=(3, 6))


def test_runner_imports_only_stdlib():
    """The runner is stdlib-only: it is sent as source, nothing is installed in the sandbox."""
    tree = ast.parse(Path(runner.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


@pytest.mark.parametrize("data", [b"", b"abc", "h\u00e9llo".encode(), "\u20ac\u20ac".encode()])
def test_output_buffer_keeps_small_output_whole(data):
    buf = runner.OutputBuffer(1024)
    buf.feed(data)
    assert buf.text() == (data.decode(), 0)


def test_output_buffer_keeps_head_and_tail_and_counts_the_rest():
    buf = runner.OutputBuffer(100)
    for i in range(1000):
        buf.feed(b"%04d\n" % i)
    text, dropped = buf.text()
    assert text.startswith("0000\n0001\n")
    assert text.endswith("0998\n0999\n")
    assert dropped == 5000 - 100
    assert f"{dropped} bytes dropped" in text
    assert buf.total == 5000


def test_output_buffer_never_cuts_inside_a_character():
    buf = runner.OutputBuffer(101)  # odd halves land inside the 3-byte euro sign
    for _ in range(500):
        buf.feed("\u20ac".encode())
    text, dropped = buf.text()
    assert "\ufffd" not in text
    head, _, tail = text.partition("\n[swe-sandbox")
    assert set(head) == {"\u20ac"} and set(tail.split("]\n", 1)[1]) == {"\u20ac"}
    assert dropped % 3 == 0


@pytest.mark.parametrize(
    ("data", "cut"),
    [(b"ab", 2), ("a\u00e9".encode(), 3), ("a\u00e9".encode()[:2], 1), ("\u20ac".encode()[:2], 0),
     ("\U0001f600".encode()[:3], 0), ("\U0001f600".encode(), 4), (b"\xff", 1)],
)
def test_decode_prefix_holds_back_only_an_incomplete_last_character(data, cut):
    text, used = runner.decode_prefix(data)
    assert used == cut and text == data[:cut].decode("utf-8", "replace")


@pytest.mark.parametrize(
    ("output", "returncode", "expected"),
    [
        (f"{SUBMIT_SENTINEL}\nthe diff\n", 0, "the diff\n"),
        (f"\n\n  \n{SUBMIT_SENTINEL}\n\tx  \n\n", 0, "\tx  \n\n"),
        (f"{SUBMIT_SENTINEL}", 0, ""),
        (f"{SUBMIT_SENTINEL}\nx", 1, None),
        (f"note\n{SUBMIT_SENTINEL}\nx", 0, None),
        (f"{SUBMIT_SENTINEL} extra\nx", 0, None),
        ("", 0, None),
    ],
)
def test_find_submission(output, returncode, expected):
    assert find_submission(output, returncode) == expected


def test_unknown_field_names_it_and_the_allowed_ones():
    with pytest.raises(ConfigError) as exc:
        get_environment("local", tmeout=5)
    assert "environment.tmeout" in str(exc.value) and "timeout" in str(exc.value)


def test_bad_value_names_the_field():
    with pytest.raises(ConfigError, match=r"environment\.timeout"):
        get_environment("bwrap", overrides=["environment.timeout=soon"])


def test_unknown_preset_and_backend_are_config_errors():
    with pytest.raises(ConfigError, match="presets"):
        get_environment("nosuchpreset")
    with pytest.raises(ConfigError, match="known"):
        get_environment({"backend": "nosuchbackend"})


def test_overrides_nest_and_parse_scalars():
    data = apply_overrides({}, ["environment.timeout=5", "environment.env.A=1", "environment.cwd=/x"], "environment")
    # an environment variable's value is kept as written (it ends as the string "1" either way)
    assert data == {"timeout": 5, "env": {"A": "1"}, "cwd": "/x"}
    env = get_environment("local", overrides=["environment.env.A=1"])
    assert env.config.env == {"A": "1"}
    with pytest.raises(ConfigError):
        apply_overrides({}, ["timeout"], "environment")
    with pytest.raises(ConfigError):
        apply_overrides({}, ["agent.step_limit=3"], "environment")


def test_presets_ship_for_each_builtin_backend(tmp_path):
    for name in ("local", "bwrap"):
        assert load_environment_config(name)["backend"] == name
        assert environment_class(name).__name__.lower().startswith(name)
    path = tmp_path / "mine.yaml"
    path.write_text("environment:\n  backend: local\n  timeout: 7\n")
    assert get_environment(str(path)).config.timeout == 7


def test_import_starts_nothing_and_loads_no_backend():
    code = "import sys, swe_sandbox; print(sorted(m for m in sys.modules if m.startswith('swe_sandbox')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "swe_sandbox.environments.bwrap" not in out and "swe_sandbox.environments.local" not in out


@pytest.mark.parametrize("raw, value", [
    ("20", 20), ("0.5", 0.5), ("-3", -3), ("1e3", 1000.0), ("true", True), ("false", False), ("null", None),
    ('["a", 1]', ["a", 1]), ('{"k": {"n": 2}}', {"k": {"n": 2}}), ('"quoted"', "quoted"),
    # not JSON: the string as written (YAML 1.1 read these as True, 83, 1000, a date, NaN)
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("0123", "0123"), ("1_000", "1_000"), ("2024-01-01", "2024-01-01"),
    ("NaN", "NaN"), ("Infinity", "Infinity"), ("inf", "inf"), ("[a, b]", "[a, b]"), ("", ""), ("a=b", "a=b"),
])
def test_override_values_are_json_else_the_raw_string(raw, value):
    data = apply_overrides({}, [f"agent.x={raw}"])
    assert data == {"agent": {"x": value}} and type(data["agent"]["x"]) is type(value)


@pytest.mark.parametrize("raw", ["yes", "0123", "true", "1e5", "1.50", "null", "[1]", " spaced "])
def test_override_of_an_environment_variable_keeps_the_value_as_written(raw):
    assert apply_overrides({}, [f"environment.env.FOO={raw}"], "environment") == {"env": {"FOO": raw}}
    assert apply_overrides({}, [f"environment.env.FOO={raw}"]) == {"environment": {"env": {"FOO": raw}}}
    assert get_environment("local", overrides=[f"environment.env.FOO={raw}"]).config.env == {"FOO": raw}


# -- the frame protocol: a long output travels raw after its frame -------------------------------


class _ScriptedChannel(Channel):
    """A Channel whose bytes come from a list of chunks (None: nothing arrives in time)."""

    def __init__(self, chunks):
        super().__init__(None)
        self.chunks = list(chunks)

    def _read_some(self, timeout):
        return self.chunks.pop(0) if self.chunks else None

    def diagnose(self):
        return ""


def _frame_bytes(obj) -> bytes:
    out = io.BytesIO()
    runner.write_frame(out, obj)
    return out.getvalue()


def test_long_output_travels_raw_and_comes_back_whole():
    text = "ligne é\n" * (runner.RAW_OUTPUT_MIN // 4) + "\U0001f600"
    data = _frame_bytes({"op": "result", "output": text, "returncode": 0})
    assert b'"output_follows"' in data and b"\\n" not in data, "the output must not be JSON-escaped"
    chunks = [data[i:min(i + 7, 4096)] for i in range(0, 4096, 7)] + [data[4096:]] + [_frame_bytes({"op": "x"})]
    channel = _ScriptedChannel(chunks)
    assert channel.recv(5) == {"op": "result", "output": text, "returncode": 0}
    assert channel.recv(5) == {"op": "x"}


def test_short_output_stays_in_the_json_frame():
    data = _frame_bytes({"op": "result", "output": "a\n"})
    assert b"output_follows" not in data
    assert _ScriptedChannel([data]).recv(5) == {"op": "result", "output": "a\n"}


def test_a_timeout_inside_the_raw_output_loses_nothing():
    data = _frame_bytes({"op": "result", "output": "x" * (runner.RAW_OUTPUT_MIN + 10)})
    channel = _ScriptedChannel([data[:100], None])
    with pytest.raises(SandboxDied, match="stopped answering"):
        channel.recv(0.01)
    channel.chunks = [data[100:]]
    assert channel.recv(5)["output"] == "x" * (runner.RAW_OUTPUT_MIN + 10)


@pytest.mark.parametrize("follows", [-1, "9", Channel.max_frame + 1])
def test_a_bad_raw_output_length_is_a_protocol_error(follows):
    header = json.dumps({"op": "result", "output": None, "output_follows": follows}).encode()
    channel = _ScriptedChannel([struct.pack(">I", len(header)) + header])
    with pytest.raises(ProtocolError, match="frame"):
        channel.recv(5)


def test_a_directory_named_like_a_preset_does_not_hide_it(tmp_path, monkeypatch):
    """`--env ssh` run from a directory that holds an `ssh/` folder (tests/ has one) means the preset."""
    (tmp_path / "ssh").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_environment_config("ssh")["backend"] == "ssh"
