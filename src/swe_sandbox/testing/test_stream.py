"""Streaming and cancel (DESIGN.md section 10), run against the backend under test: ``env.stream()``
yields a command's output as it is written and ends with the result ``execute`` returns; leaving
the stream early, or ``env.cancel()``, kills the command's whole tree and leaves the sandbox usable.

The first-chunk latency and the chunk spacing are part of the contract here (a 20-minute test run
is watched while it runs), so they are asserted, with margins for a loaded machine.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from swe_sandbox import runner
from swe_sandbox.capabilities import HOST_VISIBLE_PROCESSES
from swe_sandbox.errors import Submitted
from swe_sandbox.testing.kit import has, run, unique_marker, wait_host_gone, wait_sandbox_gone

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: The issue's command: five lines, half a second apart.
TICKS = "for i in 1 2 3 4 5; do echo $i; sleep 0.5; done"
#: A command whose tree has a child in a session of its own and one that cleared its environment.
TREE = "echo start; ( setsid sleep {m} & ); ( setsid env -i sleep {m} & ); sleep {m}"


def collect(env, command, **kwargs):
    """``[(seconds since the call, event), ...]`` of one streamed command."""
    started = time.monotonic()
    return [(time.monotonic() - started, event) for event in env.stream({"command": command}, **kwargs)]


def texts(events):
    return [event.text for _, event in events if not event.done]


def assert_nothing_left(env, marker):
    assert wait_sandbox_gone(env, marker) == [], "left running inside the sandbox"
    if has(env, HOST_VISIBLE_PROCESSES):
        assert wait_host_gone(marker) == [], "left running (seen from the host's /proc)"


@pytest.fixture(scope="module")
def started(env):
    """The module's environment, started (start-up never counts against a latency)."""
    assert run(env, "true")["returncode"] == 0
    return env


def test_chunks_arrive_as_they_are_written(started):
    """The first chunk within 0.3 s of the command's start: what a command costs to start here (a
    round trip to the runner, or the exec fallback's one exec per command) is measured first and
    not counted."""
    began = time.monotonic()
    run(started, "true")
    start_cost = time.monotonic() - began
    events = collect(started, TICKS)
    chunks = [(at, event.text) for at, event in events if event.text]
    assert [text for _, text in chunks] == [f"{i}\n" for i in range(1, 6)], events
    assert chunks[0][0] < 0.3 + start_cost, f"first chunk after {chunks[0][0]:.2f} s (a command starts in {start_cost:.2f} s)"
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(chunks)]
    assert all(0.3 < gap < 0.9 for gap in gaps), f"chunk gaps {gaps}"
    last = events[-1][1]
    assert last.done and last.text == "" and last.result["returncode"] == 0
    assert last.result["output"] == "1\n2\n3\n4\n5\n"


def test_merged_order_is_kept(started):
    command = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done"
    events = collect(started, command)
    expected = "".join(f"out{i}\nerr{i}\n" for i in range(1, 201))
    assert "".join(texts(events)) == expected
    assert events[-1][1].result["output"] == expected


def test_a_character_split_across_writes_arrives_whole(started):
    events = collect(started, r"printf '\342\202'; sleep 0.3; printf '\254 \360\237'; sleep 0.3; printf '\230\200\n'")
    chunks = texts(events)
    assert "".join(chunks) == "\u20ac \U0001f600\n"
    assert not any("\ufffd" in chunk for chunk in chunks), chunks
    assert len([c for c in chunks if c]) >= 2, f"nothing was streamed before the end: {chunks}"


def test_the_cap_applies_to_what_is_streamed(make_env):
    environment = make_env(max_output_bytes=2000)
    command = "head -c 600 /dev/zero | tr '\\0' a; sleep 0.4; head -c 9000 /dev/zero | tr '\\0' b; sleep 0.4; echo end"
    events = collect(environment, command)
    result = events[-1][1].result
    before_end = [event.text for at, event in events[:-1] if at < events[-1][0] - 0.2]
    assert before_end and before_end[0] == "a" * 600, "the head was not streamed as it was written"
    assert sum(len(text) for text in before_end) <= 1000, "more than the kept head was streamed mid-command"
    assert "".join(texts(events)) == result["output"]
    assert result["extra"]["truncated"] is True and result["extra"]["output_bytes"] == 9604
    dropped = result["extra"]["dropped_bytes"]
    assert f"output truncated, {dropped} bytes dropped" in result["output"] and dropped == 9604 - 2000
    assert result["output"].endswith("end\n")


@pytest.mark.parametrize("command", [
    "echo hi; echo there >&2; exit 3",
    "printf 'no newline'",
    r"printf 'bad \377 byte\n'",
    "seq 1 20000",
    "true",
])
def test_the_last_event_is_what_execute_returns(started, command):
    streamed = collect(started, command)[-1][1].result
    executed = run(started, command)
    for result in (streamed, executed):
        result["extra"].pop("duration_s")
    assert streamed == executed


def test_a_timeout_streams_the_partial_output_then_the_timeout_record(started):
    events = collect(started, "echo start; sleep 10", timeout=1)
    assert texts(events)[0] == "start\n" and events[0][0] < 0.5
    result = events[-1][1].result
    assert result["extra"]["timed_out"] is True and result["returncode"] == -1
    assert events[-1][0] < 2.0


def test_a_submission_raises_submitted_after_its_chunks(started):
    seen = []
    with pytest.raises(Submitted) as caught:
        for event in started.stream({"command": f"echo {SENTINEL}; echo answer"}):
            seen.append(event.text)
    assert caught.value.submission == "answer\n"
    assert "".join(seen) == f"{SENTINEL}\nanswer\n"


def _leave_early(environment, marker, how):
    stream = environment.stream({"command": TREE.format(m=marker)})
    started = time.monotonic()
    if how == "break":
        for event in stream:
            assert event.text.startswith("start")
            started = time.monotonic()
            break
        del stream  # the loop's iterator: the generator closes when it goes
    elif how == "close":
        assert next(stream).text.startswith("start")
        started = time.monotonic()
        stream.close()
    else:
        with pytest.raises(RuntimeError):
            for _event in environment.stream({"command": TREE.format(m=marker)}):
                started = time.monotonic()
                raise RuntimeError("the consumer failed")
    return time.monotonic() - started


@pytest.mark.parametrize("how", ["break", "close", "consumer-exception"])
def test_leaving_a_stream_early_kills_the_whole_tree(started, how):
    marker = unique_marker()
    elapsed = _leave_early(started, marker, how)
    assert elapsed < 1.0, f"leaving the stream took {elapsed:.2f} s"
    assert_nothing_left(started, marker)
    assert run(started, "echo alive")["output"] == "alive\n"


def test_cancel_from_another_thread_ends_the_command(started):
    marker = unique_marker()
    timer = threading.Timer(0.5, started.cancel)
    timer.start()
    began = time.monotonic()
    result = run(started, TREE.format(m=marker), timeout=60)
    elapsed = time.monotonic() - began
    timer.join()
    assert elapsed < 1.5, f"cancelled after {elapsed:.2f} s"
    assert result["returncode"] == -1 and result["exception_info"] == runner.CANCELLED_MESSAGE
    assert result["extra"]["cancelled"] is True and result["extra"]["timed_out"] is False
    assert result["output"].startswith("start\n")
    assert_nothing_left(started, marker)
    assert run(started, "echo alive")["output"] == "alive\n"


def test_cancel_with_nothing_running_changes_nothing(started):
    started.cancel()
    assert run(started, "echo alive")["output"] == "alive\n"
