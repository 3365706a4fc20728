"""A command's options beyond the contract's defaults, run against the backend under test: bytes on
its stdin, stderr kept apart from stdout, variables for one command, another user of the sandbox.
What a backend cannot do it declares (``swe_sandbox.capabilities``): the option is then refused with
a ``ConfigError`` naming it, and the test needing it is a strict xfail."""

from __future__ import annotations

import pytest

from swe_sandbox.capabilities import COMMAND_STDIN, RUN_AS_USER, SEPARATE_STDERR
from swe_sandbox.errors import ConfigError
from swe_sandbox.testing.kit import has, requires


@requires(COMMAND_STDIN)
@pytest.mark.parametrize("data", [b"", b"hello\nworld\n", b"\xc3\x28\x00\xff bytes", "$HOME `id` 'q' \"d\" \\\n"])
def test_stdin_reaches_the_command_verbatim(env, data):
    raw = data.encode() if isinstance(data, str) else data
    result = env.execute({"command": "od -An -v -tx1 | tr -d ' \\n'"}, stdin=data)
    assert result["returncode"] == 0 and result["output"] == raw.hex()


@requires(COMMAND_STDIN)
def test_a_large_stdin_arrives_whole(env):
    result = env.execute({"command": "wc -c"}, stdin=b"a" * (20 << 20))
    assert result["output"].strip() == str(20 << 20)


def test_stdin_is_still_empty_without_the_option(env):
    assert env.execute({"command": "cat; echo end"})["output"] == "end\n"


@requires(SEPARATE_STDERR)
def test_stderr_can_be_kept_apart(env):
    result = env.execute({"command": "echo out; echo err >&2; printf more"}, separate_stderr=True)
    assert result["output"] == "out\nmore" and result["stderr"] == "err\n"
    assert result["extra"]["stderr_bytes"] == 4 and result["extra"]["stderr_dropped_bytes"] == 0


@requires(SEPARATE_STDERR)
def test_separate_streams_are_streamed_apart(env):
    events = list(env.stream({"command": "echo o; echo e >&2; sleep 0.2; echo e2 >&2"}, separate_stderr=True))
    joined = {name: "".join(e.text for e in events if e.stream == name) for name in ("output", "stderr")}
    assert joined == {"output": "o\n", "stderr": "e\ne2\n"}
    assert events[-1].result["stderr"] == "e\ne2\n"


@requires(SEPARATE_STDERR)
def test_each_separate_stream_has_its_own_cap(make_env):
    environment = make_env(max_output_bytes=4096)
    result = environment.execute({"command": "head -c 9000 /dev/zero | tr '\\0' e >&2; echo fine"},
                                 separate_stderr=True)
    assert result["output"] == "fine\n" and result["extra"]["stderr_bytes"] == 9000
    assert result["extra"]["stderr_dropped_bytes"] == 9000 - 4096
    assert "bytes dropped" in result["stderr"]


def test_env_applies_to_one_command_only(env):
    assert env.execute({"command": "echo \"$ONE_OFF\""}, env={"ONE_OFF": "a b"})["output"] == "a b\n"
    assert env.execute({"command": "echo \"[$ONE_OFF]\""})["output"] == "[]\n"


@pytest.mark.parametrize("variables", [{"IFS": "x"}, {"PATH": "/nonexistent"}, {"LC_ALL": "no_such.UTF-8"},
                                       {"TMPDIR": "/nonexistent"}], ids=["IFS", "PATH", "LC_ALL", "TMPDIR"])
def test_env_that_breaks_shells_is_the_commands_alone(env, variables):
    """A variable that would break a shell (``IFS``, ``PATH``) changes that command's result at most,
    never the sandbox: the next command runs as before (a red team's: the exec fallback once
    exported them in its own wrapper, whose failure closed the sandbox)."""
    result = env.execute({"command": "echo ran"}, env=variables)
    assert result["returncode"] == 127 or (result["returncode"], result["output"][-4:]) == (0, "ran\n"), result
    assert env.execute({"command": "echo alive"})["output"] == "alive\n"


@requires(RUN_AS_USER)
def test_a_command_can_run_as_another_user(env):
    result = env.execute({"command": "id -un; echo $HOME"}, user="nobody")
    assert result["returncode"] == 0 and result["output"].splitlines()[0] == "nobody", result
    assert env.execute({"command": "id -u"}, user="0")["output"] == "0\n"


@requires(RUN_AS_USER)
def test_an_unknown_user_is_a_failed_result_naming_it(env):
    result = env.execute({"command": "true"}, user="no-such-user-here")
    assert result["returncode"] != 0 and "no-such-user-here" in result["output"]
    assert result["extra"]["user_error"] == "unknown"


@pytest.mark.parametrize(("capability", "options"), [
    (COMMAND_STDIN, {"stdin": "x"}), (SEPARATE_STDERR, {"separate_stderr": True}), (RUN_AS_USER, {"user": "nobody"}),
])
def test_an_option_is_taken_exactly_where_the_backend_declares_it(env, capability, options):
    """Declared: the option runs. Lacking: it is refused before anything runs, naming it."""
    if has(env, capability):
        assert env.execute({"command": "true"}, **options)["returncode"] == 0
    else:
        with pytest.raises(ConfigError, match=next(iter(options))):
            env.execute({"command": "true"}, **options)


@pytest.mark.parametrize("options", [{"stdin": 3}, {"env": {"A": 1}}, {"user": True}])
def test_a_bad_option_value_is_refused(env, options):
    with pytest.raises(ConfigError, match=next(iter(options))):
        env.execute({"command": "true"}, **options)
