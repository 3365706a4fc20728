"""The runner channel's authentication and the host's checks of every reply (issue: forged results).

A process that reaches the runner's pipes must not be able to answer in its place: every frame
carries an HMAC keyed by a secret only the host and the runner hold, counted per direction.
"""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from swe_sandbox import runner
from swe_sandbox.environments.base import Channel, check_result, spawn_runner
from swe_sandbox.errors import ProtocolError, SandboxDied


class _Pipe(Channel):
    """A channel whose far end is this test: what the host writes is kept, what it reads is scripted."""

    def __init__(self):
        super().__init__(None)
        self.sent = bytearray()
        self.chunks: list[bytes] = []

    def _write(self, data: bytes) -> None:
        self.sent += data

    def _read_some(self, timeout):
        return self.chunks.pop(0) if self.chunks else None

    def diagnose(self) -> str:
        return ""


def _started() -> tuple[_Pipe, runner.FrameAuth]:
    """A channel that has sent its hello, and the runner side's authenticator (key read from the hello)."""
    channel = _Pipe()
    channel.start_runner(max_lifetime=5)
    size, _, rest = bytes(channel.sent).partition(b"\n")
    hello = json.loads(rest[int(size) + 4:])
    assert hello["op"] == "hello" and hello["max_lifetime"] == 5 and len(bytes.fromhex(hello["key"])) == 32
    return channel, runner.FrameAuth(bytes.fromhex(hello["key"]), b"runner", b"host")


def _frame(obj, auth=None) -> bytes:
    out = io.BytesIO()
    runner.write_frame(out, obj, auth)
    return out.getvalue()


RESULT = {"op": "result", "id": 1, "output": "ok\n", "returncode": 0, "exception_info": "",
          "extra": {"timed_out": False, "truncated": False, "output_bytes": 3, "dropped_bytes": 0, "duration_s": 0.01}}


def test_each_start_gets_a_fresh_key_that_never_travels_in_argv_or_env():
    first, second = _started(), _started()
    assert first[1].key != second[1].key
    assert first[1].key.hex().encode() not in runner.BOOTSTRAP.encode()


def test_authentic_frames_pass_in_order():
    channel, far = _started()
    channel.chunks = [_frame({"op": "ready"}, far), _frame(RESULT, far)]
    assert channel.recv(1) == {"op": "ready"}
    assert channel.recv(1) == RESULT


@pytest.mark.parametrize("forge", ["no mac", "other key", "replayed", "reordered"])
def test_a_forged_frame_is_a_protocol_error(forge):
    channel, far = _started()
    other = runner.FrameAuth(os.urandom(32), b"runner", b"host")
    ready = _frame({"op": "ready"}, far)
    forged = {
        "no mac": _frame(RESULT),
        "other key": _frame(RESULT, other),
        "replayed": ready,
        "reordered": None,
    }[forge]
    if forge == "reordered":  # the runner's 2nd frame delivered 1st
        _frame({"op": "ready"}, far)
        forged, ready = _frame(RESULT, far), b""
        channel.chunks = [forged]
    else:
        channel.chunks = [ready, forged]
        assert channel.recv(1) == {"op": "ready"}
    if forge == "no mac":  # the host waits for a MAC: what the runner sends next fails as one
        channel.chunks.append(_frame(RESULT, far))
    with pytest.raises(ProtocolError, match="failed authentication"):
        channel.recv(1)


def test_the_mac_covers_a_raw_output():
    channel, far = _started()
    data = bytearray(_frame({**RESULT, "output": "x" * (runner.RAW_OUTPUT_MIN + 10)}, far))
    data[-runner.MAC_SIZE - 5] ^= 1  # one bit of the raw output, after the JSON
    channel.chunks = [bytes(data)]
    with pytest.raises(ProtocolError, match="failed authentication"):
        channel.recv(1)


def test_only_the_listed_ops_pass_without_a_mac():
    channel, far = _started()
    channel.chunks = [_frame({"op": "nopython"}), _frame({"op": "nopython"}), _frame({"op": "ready"}, far)]
    assert channel.recv(1, unauthenticated=("nopython",)) == {"op": "nopython"}
    with pytest.raises(ProtocolError):
        channel.recv(1)


def test_host_frames_are_signed_for_the_runner():
    channel, far = _started()
    del channel.sent[:]
    channel.send({"op": "exec", "id": 1})
    host = runner.FrameAuth(far.key, b"host", b"runner")  # the runner's receiving side
    stream = io.BytesIO(bytes(channel.sent))
    assert runner.read_frame(stream, runner.FrameAuth(far.key, b"runner", b"host")) == {"op": "exec", "id": 1}
    with pytest.raises(runner.BadFrame):
        runner.read_frame(io.BytesIO(bytes(channel.sent)), host)  # wrong direction: a reflected frame


@pytest.mark.parametrize("field, value", [
    ("output", 5), ("output", None), ("output", "x" * (2048 + 201)),
    ("returncode", True), ("returncode", "0"), ("returncode", 300), ("returncode", -2), ("returncode", 0.0),
    ("exception_info", None), ("exception_info", "x" * 5000), ("extra", []),
    ("extra.timed_out", "no"), ("extra.output_bytes", -1), ("extra.duration_s", True), ("extra.truncated", None),
])
def test_a_result_with_a_bad_field_is_refused(field, value):
    reply = json.loads(json.dumps(RESULT))
    if field.startswith("extra."):
        reply["extra"][field[len("extra."):]] = value
    else:
        reply[field] = value
    with pytest.raises(ProtocolError, match="invalid result"):
        check_result(reply, 2048)


def test_a_good_result_passes_the_checks():
    check_result(RESULT, 2048)
    check_result({**RESULT, "returncode": -1, "exception_info": "Command timed out after 1 seconds"}, 2048)


def test_the_real_runner_stops_serving_on_an_unsigned_request():
    """A frame written on the runner's stdin without the key ends the runner: the host then sees a
    dead sandbox, never a result of that request."""
    channel = spawn_runner([sys.executable, "-c", runner.BOOTSTRAP], {"PATH": os.environ["PATH"]})
    try:
        assert channel.recv(20)["op"] == "ready"
        body = json.dumps({"op": "exec", "id": 1, "command": "echo forged", "timeout": 5}).encode()
        channel.proc.stdin.write(len(body).to_bytes(4, "big") + body + b"\0" * runner.MAC_SIZE)
        channel.proc.stdin.flush()
        with pytest.raises(SandboxDied):
            channel.recv(20)
        assert channel.proc.wait(10) is not None
    finally:
        channel.close(wait=2)
