"""The runner protocol's streaming and cancel frames (DESIGN.md §10), against the real runner and
against scripted replies: chunks are authenticated and checked like results, a cancel reaches a
command queued or running, and a stream whose chunks are not its result's prefix is refused."""

from __future__ import annotations

import os
import sys
import time

import pytest

from swe_sandbox import runner
from swe_sandbox.environments.base import Channel, Environment, check_chunk, spawn_runner, streamed_rest
from swe_sandbox.errors import ProtocolError

EXEC = {"op": "exec", "cwd": "", "env": {}, "timeout": 10, "max_output_bytes": 1 << 20}


@pytest.fixture
def channel():
    chan = spawn_runner([sys.executable, *runner.ISOLATED, "-c", runner.BOOTSTRAP], {"PATH": os.environ["PATH"]})
    assert chan.ready(20)["op"] == "ready"
    yield chan
    chan.close(wait=2)


def test_a_streamed_request_gets_authenticated_chunks_then_its_result(channel: Channel):
    frames = list(channel.frames({**EXEC, "id": 1, "stream": True, "command": "echo a; sleep 0.2; echo b"}, 10))
    assert [f["op"] for f in frames] == ["chunk", "chunk", "result"]
    assert [f["output"] for f in frames[:2]] == ["a\n", "b\n"] and frames[-1]["output"] == "a\nb\n"


def test_a_request_not_streamed_gets_its_result_only(channel: Channel):
    frames = list(channel.frames({**EXEC, "id": 1, "command": "echo a; sleep 0.2; echo b"}, 10))
    assert [f["op"] for f in frames] == ["result"]


def test_a_flood_is_sent_as_few_chunks(channel: Channel):
    command = "for i in $(seq 1 3000); do echo line $i; done; sleep 0.3"
    started = time.monotonic()
    frames = list(channel.frames({**EXEC, "id": 1, "stream": True, "command": command}, 10))
    chunks = [f for f in frames if f["op"] == "chunk"]
    size = len(frames[-1]["output"])
    limit = size / runner.CHUNK_BYTES + (time.monotonic() - started) / runner.STREAM_INTERVAL_S + 2
    assert 1 <= len(chunks) <= limit, f"{len(chunks)} chunk frames for {size} bytes"
    assert all(len(f["output"].encode()) <= runner.CHUNK_BYTES for f in chunks)
    assert "".join(f["output"] for f in chunks) == frames[-1]["output"]


def test_a_cancel_sent_before_the_command_starts_cancels_it(channel: Channel):
    channel.cancel(1)
    reply = channel.request({**EXEC, "id": 1, "command": "echo never"}, 10)
    assert reply["exception_info"] == runner.CANCELLED_MESSAGE and reply["output"] == ""
    assert channel.request({**EXEC, "id": 2, "command": "echo next"}, 10)["output"] == "next\n"


def test_a_cancel_of_an_older_request_leaves_the_running_one_alone(channel: Channel):
    assert channel.request({**EXEC, "id": 1, "command": "true"}, 10)["returncode"] == 0
    channel.cancel(1)
    assert channel.request({**EXEC, "id": 2, "command": "sleep 0.3; echo ran"}, 10)["output"] == "ran\n"


@pytest.mark.parametrize("frame", [
    {"op": "chunk", "id": 2, "output": "x"},
    {"op": "chunk", "id": 1, "output": 3},
    {"op": "chunk", "id": 1, "output": "x" * 3000},
])
def test_a_bad_chunk_is_refused(frame):
    with pytest.raises(ProtocolError):
        check_chunk(frame, {"id": 1, "max_output_bytes": 1024})


def test_chunks_that_are_not_the_results_prefix_are_refused():
    assert streamed_rest("abc\ndef", "abc\n") == "def"
    assert streamed_rest("abc", "") == "abc"
    assert streamed_rest("abc", "abd") is None


def test_a_stream_tap_holds_back_a_split_character():
    buf = runner.OutputBuffer(1 << 10)
    tap = runner.StreamTap(buf)
    buf.feed("\u20ac".encode()[:2])
    assert tap.take(time.monotonic()) == ""
    buf.feed("\u20ac".encode()[2:] + b"!")
    assert tap.take(time.monotonic() + 1) == "\u20ac!"
    assert tap.due() is None


def test_environment_stream_is_a_generator_that_starts_nothing_until_iterated():
    class Never(Environment):
        def _open_channel(self):
            raise AssertionError("started")

    from swe_sandbox.config import EnvironmentConfig

    stream = Never(EnvironmentConfig(backend="x")).stream({"command": "true"})
    stream.close()


def test_a_host_that_stops_reading_a_stream_never_holds_up_the_timeout(channel: Channel):
    command = "head -c 30000000 /dev/zero | tr '\\0' x; sleep 30"
    frames = channel.frames({**EXEC, "id": 1, "stream": True, "command": command, "timeout": 1}, 30)
    first = next(frames)  # the request went out; now read nothing for a while
    time.sleep(3)  # fixed: the host is stalled on purpose; nothing to poll
    result = [first, *frames][-1]
    assert result["extra"]["timed_out"] is True, result["extra"]
    assert result["extra"]["duration_s"] < 2.0, "the runner waited for the host before its timeout"
    assert result["extra"]["output_bytes"] == 30000000


def test_a_requests_stdin_travels_raw_under_the_mac(channel: Channel):
    payload = bytes(range(256)) * 4
    reply = channel.request({**EXEC, "id": 1, "command": "od -An -v -tx1 | tr -d ' \\n'", "input": payload}, 10)
    assert reply["output"] == payload.hex()


class _Capture(Channel):
    """A channel whose frames are kept, not sent: the runner side is ``runner.read_frame``."""

    def __init__(self):
        super().__init__(None)
        self.sent = bytearray()

    def _write(self, data: bytes) -> None:
        self.sent += data


def test_the_mac_covers_a_requests_stdin():
    import io
    import json

    host = _Capture()
    host.start_runner()
    size, _, rest = bytes(host.sent).partition(b"\n")
    key = bytes.fromhex(json.loads(rest[int(size) + 4:])["key"])
    host.sent.clear()
    host.send({**EXEC, "id": 1, "command": "cat", "input": b"good input"})
    frame = bytes(host.sent)
    assert runner.read_frame(io.BytesIO(frame), runner.FrameAuth(key, b"runner", b"host"))["input"] == b"good input"
    with pytest.raises(runner.BadFrame):
        runner.read_frame(io.BytesIO(frame.replace(b"good", b"evil")), runner.FrameAuth(key, b"runner", b"host"))


def test_only_the_commands_own_token_is_an_argv_field_of_its_wrapper():
    """The exec fallback's cancel finds a command's wrapper by an argv field equal to its token: an
    earlier command's token, spared by a later wrapper, must never be such a field."""
    from swe_sandbox.environments.fallback import fallback_argv

    argv = fallback_argv("/", 5, "tok-now", {}, spared=["tok-before"])
    assert "tok-now" in argv and "tok-before" not in argv and argv[-1] == " tok-before"
