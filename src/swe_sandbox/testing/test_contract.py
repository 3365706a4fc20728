"""The execute contract (DESIGN.md section 1), one test per rule, run against the backend under test.

Every test takes the ``env`` fixture (directly or through ``make_env``), which derives from
``backend_under_test`` (``swe_sandbox.testing.fixtures``). Tests that kill, break, close or
reconfigure an environment use a fresh one from ``make_env``; the others share one environment per
module and backend.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import resource
import signal
import socket
import time

import pytest

import swe_sandbox
from swe_sandbox.capabilities import HOST_VISIBLE_PROCESSES, LONG_LIVED_RUNNER
from swe_sandbox.testing.kit import (
    has,
    host_pid_gone,
    host_processes_with,
    host_server_pid,
    kill_server_when_running,
    requires,
    run,
    sandbox_processes_with,
    unique_marker,
    wait_host_gone,
    wait_sandbox_gone,
    wait_until,
)

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
EXTRA_KEYS = {"timed_out", "truncated", "output_bytes", "dropped_bytes", "duration_s"}


def timed(env, command, **kwargs):
    """Run ``command`` and return ``(result, seconds measured on the host)``."""
    started = time.monotonic()
    result = run(env, command, **kwargs)
    return result, time.monotonic() - started


def started_env(make_env, **overrides):
    """A fresh environment, already started (so start-up time never counts against a timeout)."""
    environment = make_env(**overrides)
    assert run(environment, "true")["returncode"] == 0
    return environment


def assert_timed_out(result, elapsed, timeout):
    """The timeout rule: -1, timed_out, a sentence naming the timeout, back within timeout + 1 s."""
    assert result["returncode"] == -1, result
    assert result["extra"]["timed_out"] is True, result
    assert re.search(rf"timed out after {timeout:g}(\.0+)? seconds?", result["exception_info"], re.I), result
    assert elapsed <= timeout + 1.0, f"returned after {elapsed:.2f} s for a {timeout} s timeout"
    assert timeout <= result["extra"]["duration_s"] <= timeout + 1.0, result["extra"]


def assert_nothing_left(env, marker):
    """No process whose command line holds ``marker`` is alive, seen from the sandbox and the host."""
    assert wait_sandbox_gone(env, marker) == [], "left running inside the sandbox"
    if has(env, HOST_VISIBLE_PROCESSES):
        assert wait_host_gone(marker) == [], "left running (seen from the host's /proc)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- result shape ------------------------------------------------------------------------------


def test_result_shape_of_a_normal_run(env):
    """A normal run: str output, int returncode, exception_info "", every extra key with its type."""
    result = run(env, "echo hello")
    assert set(result) >= {"output", "returncode", "exception_info", "extra"}
    assert result["output"] == "hello\n"
    assert type(result["returncode"]) is int and result["returncode"] == 0
    assert result["exception_info"] == ""
    extra = result["extra"]
    assert set(extra) >= EXTRA_KEYS
    assert extra["timed_out"] is False and extra["truncated"] is False
    assert type(extra["output_bytes"]) is int and type(extra["dropped_bytes"]) is int
    assert isinstance(extra["duration_s"], float)


def test_action_other_keys_ignored(env):
    """``action`` is {"command": str}; other keys are ignored."""
    result = env.execute({"command": "echo ok", "thought": "ignored", "id": 3})
    assert result["output"] == "ok\n" and result["returncode"] == 0


def test_output_bytes_counts_bytes_and_duration_is_sane(env):
    """extra.output_bytes counts produced bytes (not characters); duration_s measures the run."""
    result, elapsed = timed(env, "printf 'abc\\xe2\\x82\\xac'; sleep 0.3")
    assert result["output"] == "abc€"
    extra = result["extra"]
    assert extra["output_bytes"] == 6 and extra["dropped_bytes"] == 0 and extra["truncated"] is False
    assert 0.3 <= extra["duration_s"] <= elapsed + 0.05
    empty = run(env, "true")
    assert empty["output"] == "" and empty["extra"]["output_bytes"] == 0
    assert 0 <= empty["extra"]["duration_s"] < 2


@pytest.mark.parametrize("code", [0, 1, 2, 42, 127, 255])
def test_exit_status(env, code):
    """returncode is the shell's exit status (`exit N` gives N)."""
    result = run(env, f"echo before; exit {code}")
    assert result["returncode"] == code
    assert result["output"] == "before\n"
    assert result["extra"]["timed_out"] is False
    assert result["exception_info"] == "", "a command that ran to its end is a normal run"


def test_failing_commands_are_results_not_exceptions(env):
    """A failing command is a result: `false` gives 1, an unknown command 127 with bash's message."""
    assert run(env, "false")["returncode"] == 1
    result = run(env, "no-such-command-swe-sandbox")
    assert result["returncode"] == 127
    assert "no-such-command-swe-sandbox" in result["output"] and "not found" in result["output"]


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("kill -9 $$", 137),
        ("kill -TERM $$", 143),
        ("kill -HUP $$", 129),
        ("python3 -c 'import os; os.kill(os.getpid(), 9)'; echo not-reached-if-last", None),
        ("python3 -c 'import os; os.kill(os.getpid(), 11)'", 139),
        ("exec python3 -c 'import os; os.kill(os.getpid(), 15)'", 143),
        ("exec sleep 30 & kill -9 $!; wait $!", 137),
    ],
    ids=["kill-9-shell", "kill-TERM-shell", "kill-HUP-shell", "child-killed-then-echo", "last-child-SEGV",
         "exec-child-TERM", "wait-on-killed-job"],
)
def test_death_by_signal_is_128_plus_n(env, command, code):
    """A command killed by signal N reports 128+N (never a negative number)."""
    result = run(env, command, timeout=10)
    if code is None:  # the shell survives its child and goes on
        assert result["returncode"] == 0 and "not-reached-if-last" in result["output"]
    else:
        assert result["returncode"] == code, result
    assert result["extra"]["timed_out"] is False


def test_syntax_error_is_bash_status_2(env):
    """A syntax error behaves as in `bash -c`: commands before it ran, status 2, bash's message."""
    result = run(env, "echo before\nif then\necho never")
    assert result["returncode"] == 2
    assert result["output"].startswith("before\n") and "never" not in result["output"]
    assert "syntax error" in result["output"]
    assert run(env, "echo 'unterminated")["returncode"] == 2


def test_exec_and_exit_trap(env):
    """`exec` replacing the shell and an EXIT trap behave as in `bash -c`."""
    trapped = run(env, "trap 'echo bye' EXIT; echo hi; exit 3")
    assert trapped["output"] == "hi\nbye\n" and trapped["returncode"] == 3
    replaced = run(env, "echo first; exec python3 -c 'print(2); raise SystemExit(5)'")
    assert replaced["output"] == "first\n2\n" and replaced["returncode"] == 5
    closed = run(env, "exec >&- 2>&-; sleep 0.1; exit 4")
    assert closed["output"] == "" and closed["returncode"] == 4 and closed["extra"]["timed_out"] is False


# -- fresh bash -c per command -----------------------------------------------------------------


def test_cd_export_and_shell_state_do_not_persist(env):
    """Each command is a fresh `bash -c`: cd, export, variables, functions, aliases, set -e don't carry over."""
    home = run(env, "pwd")["output"]
    setup = run(env, "cd /tmp && export SWE_PERSIST=1; SWE_VAR=2; f() { echo fn; }; alias ll=ls; set -e; pwd")
    assert setup["output"] == "/tmp\n"
    result = run(env, 'pwd; echo "[${SWE_PERSIST-}][${SWE_VAR-}]"; type f >/dev/null 2>&1 || echo no-f; '
                      'alias ll >/dev/null 2>&1 || echo no-alias; false; echo still-running')
    assert result["output"] == home + "[][]\nno-f\nno-alias\nstill-running\n"


def test_cwd_argument_selects_directory(env):
    """The `cwd` argument selects the working directory."""
    assert run(env, "pwd", cwd="/tmp")["output"] == "/tmp\n"
    assert run(env, "pwd", cwd="/")["output"] == "/\n"


def test_cwd_with_spaces_and_unicode(env):
    """`cwd` works for a directory whose name has spaces and non-ASCII characters."""
    made = run(env, "d=$(mktemp -d)/'a b ü 😀' && mkdir -p \"$d\" && printf %s \"$d\"")
    path = made["output"]
    assert made["returncode"] == 0 and path.endswith("a b ü 😀")
    try:
        assert run(env, "pwd", cwd=path)["output"] == path + "\n"
    finally:
        run(env, f"rm -rf \"$(dirname '{path}')\"")


def test_config_cwd_is_the_default(make_env):
    """The config field `cwd` is used when execute gets none; execute's `cwd` overrides it."""
    environment = make_env(cwd="/tmp")
    assert run(environment, "pwd")["output"] == "/tmp\n"
    assert run(environment, "pwd", cwd="/")["output"] == "/\n"


def test_missing_cwd_gives_nonzero_and_clear_message(env):
    """A missing `cwd` gives returncode != 0 and a message naming the directory (no exception)."""
    missing = "/nonexistent-swe-sandbox-dir/sub"
    result = run(env, "echo should-not-run", cwd=missing)
    assert result["returncode"] != 0
    assert "should-not-run" not in result["output"]
    assert missing in result["output"]
    assert re.search(r"does not exist|no such file or directory", result["output"], re.I)
    assert result["extra"]["timed_out"] is False
    not_a_dir = run(env, "echo should-not-run", cwd="/etc/hostname")
    assert not_a_dir["returncode"] != 0 and "should-not-run" not in not_a_dir["output"]
    assert "/etc/hostname" in not_a_dir["output"]


def test_bash_features(env):
    """Commands run in bash: <(...), [[ ]], arrays, $'...', heredocs, brace expansion, pipefail, extglob."""
    command = r"""
diff <(printf 'a\n') <(printf 'a\n') && echo procsub-ok
[[ "abc" == a* && 3 -gt 2 ]] && echo dbl-bracket-ok
arr=(x "y z" w); echo "len=${#arr[@]} second=${arr[1]}"
declare -A m=([k]=v); echo "assoc=${m[k]}"
printf '%s\n' $'tab\there' | od -c | head -1 | grep -q '\\t' && echo ansi-c-ok
cat <<EOF
heredoc $((6*7))
EOF
cat <<'EOF'
literal $HOME `x`
EOF
echo {1..3}
set -o pipefail; false | true; echo "pipefail=$?"
shopt -s extglob
x=aaab; echo "extglob=${x##+(a)}"
echo "${BASH_VERSION%%.*}" | grep -qE '^[4-9]$' && echo bash-ok
"""
    result = run(env, command)
    assert result["returncode"] == 0, result
    assert result["output"] == (
        "procsub-ok\ndbl-bracket-ok\nlen=3 second=y z\nassoc=v\nansi-c-ok\nheredoc 42\n"
        "literal $HOME `x`\n1 2 3\npipefail=1\nextglob=b\nbash-ok\n"
    )


# -- stdin, tty, pagers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expect"),
    [
        ('cat; echo "rc=$?"', "rc=0"),
        ('read x; echo "rc=$? x=[$x]"', "rc=1 x=[]"),
        ('read -s -p Password: p; echo "rc=$?"', "rc=1"),
        ('read -p "Continue? [y/N] " yn; echo "answer=[$yn] rc=$?"', "answer=[]"),
        ('python3 -c "input(\'name? \')"; echo "rc=$?"', "EOFError"),
        ('python3 -c "import getpass; getpass.getpass()"; echo "rc=$?"', "rc=1"),
        ('python3; echo "rc=$?"', "rc=0"),
        ('python3 -i; echo "rc=$?"', "rc=0"),
        ('bash -i 2>/dev/null; echo "rc=$?"', "rc=0"),
        ('head -c 10; echo "rc=$?"', "rc=0"),
        ('cat /dev/tty; echo "rc=$?"', "rc=1"),
        ('(exec 3<>/dev/tty) 2>/dev/null && echo opened-tty || echo no-tty', "no-tty"),
        ('d=$(mktemp -d) && touch "$d/f" && rm -i "$d/f"; test -e "$d/f" && echo kept; rm -rf "$d"', "kept"),
    ],
    ids=["cat", "read", "password-prompt", "yes-no-prompt", "python-input", "getpass", "python-repl",
         "python-interactive", "bash-interactive", "head-stdin", "cat-dev-tty", "open-dev-tty", "rm-i"],
)
def test_stdin_is_empty_and_readers_end_at_once(env, command, expect):
    """stdin is /dev/null and there is no TTY: readers and prompts end at once."""
    result, elapsed = timed(env, command, timeout=10)
    assert result["extra"]["timed_out"] is False, result
    assert elapsed < 3, f"took {elapsed:.2f} s"
    assert expect in result["output"], result
    assert "opened-tty" not in result["output"]


def test_default_env_disables_pagers_and_terminals(env):
    """PAGER=cat, GIT_PAGER=cat, TERM=dumb and friends are set by default."""
    result = run(env, 'echo "$PAGER|$GIT_PAGER|$TERM"; test -t 0 || echo stdin-not-tty; test -t 1 || echo stdout-not-tty')
    assert result["output"] == "cat|cat|dumb\nstdin-not-tty\nstdout-not-tty\n"


GIT_REPO = (
    'd=$(mktemp -d) && cd "$d" && git init -q -b main && git config user.email t@example.com && '
    "git config user.name tester && printf 'one\\n' > f && git add f && git commit -q -m first-commit && "
    "printf 'two\\n' >> f && git commit -q -am second-commit && "
)


@pytest.mark.parametrize(
    ("command", "expect"),
    [
        (GIT_REPO + 'git log; rc=$?; cd /; rm -rf "$d"; exit $rc', "second-commit"),
        (GIT_REPO + 'git log -p --stat; rc=$?; cd /; rm -rf "$d"; exit $rc', "+two"),
        (GIT_REPO + 'git show HEAD~1; rc=$?; cd /; rm -rf "$d"; exit $rc', "first-commit"),
        (GIT_REPO + 'printf x >> f; git diff; rc=$?; cd /; rm -rf "$d"; exit $rc', "+x"),
        (GIT_REPO + 'git branch -a; rc=$?; cd /; rm -rf "$d"; exit $rc', "* main"),
        (GIT_REPO + 'git commit --allow-empty >/dev/null 2>&1; echo "commit-rc=$?"; cd /; rm -rf "$d"', "commit-rc="),
        ("less /etc/os-release", "NAME="),
        ("more /etc/os-release", "NAME="),
        ("printf 'a\\nb\\n' | less", "a\nb"),
        ("man ls >/dev/null 2>&1; echo man-done", "man-done"),
        ("vi -i NONE /tmp/swe-sandbox-vi-test >/dev/null 2>&1; echo vi-done", "vi-done"),
    ],
    ids=["git-log", "git-log-p", "git-show", "git-diff", "git-branch", "git-commit-editor", "less", "more",
         "less-pipe", "man", "vi"],
)
def test_pagers_and_editors_do_not_wait(env, command, expect):
    """No TTY: git's pager, less, more, man and editors return promptly."""
    tool = {"man": "man", "vi": "vi", "less": "less", "more": "more"}
    first = command.split()[0]
    if first in tool and run(env, f"command -v {first}")["returncode"] != 0:
        pytest.skip(f"{first} is not installed in this sandbox")
    if "git" in command and run(env, "command -v git")["returncode"] != 0:
        pytest.skip("git is not installed in this sandbox")
    result, elapsed = timed(env, command, timeout=10)
    assert result["extra"]["timed_out"] is False, result
    assert elapsed < 5, f"took {elapsed:.2f} s"
    assert expect in result["output"], result
    assert "\x1b[" not in result["output"], "colour codes: a terminal was assumed"


# -- output: order, encoding, CRLF -------------------------------------------------------------


def test_stdout_stderr_order_simple(env):
    """stdout and stderr are merged in the order they were written."""
    assert run(env, "echo a; echo b >&2; echo c")["output"] == "a\nb\nc\n"
    assert run(env, "ls /nonexistent-swe-dir; echo after")["output"].endswith("No such file or directory\nafter\n")


def test_stdout_stderr_order_many_writes_shell(env):
    """Many alternating stdout/stderr writes from the shell keep their order."""
    result = run(env, "for i in $(seq 1 500); do echo out$i; echo err$i >&2; done")
    expected = "".join(f"out{i}\nerr{i}\n" for i in range(1, 501))
    assert result["output"] == expected


@pytest.mark.parametrize("flush", [True, False], ids=["flush", "no-flush"])
def test_stdout_stderr_order_python(env, flush):
    """Alternating writes from python (with and without explicit flush) keep their order."""
    flush_code = "sys.stdout.flush(); " if flush else ""
    flush_err = "sys.stderr.flush(); " if flush else ""
    script = (f"import sys\nfor i in range(300):\n    sys.stdout.write('o%d\\n' % i); {flush_code}"
              f"sys.stderr.write('e%d\\n' % i); {flush_err}")
    result = run(env, f"python3 -c \"{script}\"")
    assert result["returncode"] == 0, result
    assert result["output"] == "".join(f"o{i}\ne{i}\n" for i in range(300))


def test_stdout_stderr_order_child_processes(env):
    """Order is kept across different processes writing to stdout and stderr."""
    command = "for i in 1 2 3 4 5; do sh -c \"echo o$i\"; python3 -c \"import sys; sys.stderr.write('e$i\\n')\"; done"
    assert run(env, command)["output"] == "".join(f"o{i}\ne{i}\n" for i in range(1, 6))


def test_no_crlf_translation(env):
    """No TTY line discipline: "\\n" stays "\\n" (no CRLF), and bytes the command writes are kept."""
    result = run(env, "printf 'one\\ntwo\\n'; python3 -c \"print('three')\"; echo four >&2")
    assert "\r" not in result["output"]
    assert result["output"] == "one\ntwo\nthree\nfour\n"
    assert run(env, "printf 'a\\r\\nb'")["output"] == "a\r\nb"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("printf 'a\\xffb'", "a\ufffdb"),
        ("printf 'x\\xc3(y'", "x\ufffd(y"),
        ("printf '\\x80\\x80'", "\ufffd\ufffd"),
        ("printf 'ok\\xed\\xa0\\x80'", "ok\ufffd\ufffd\ufffd"),
        ("printf 'a\\0b'", "a\x00b"),
        ("printf 'caf\\xc3\\xa9\\n'", "café\n"),
    ],
    ids=["ff", "truncated-2byte", "lone-continuation", "surrogate-encoding", "nul", "valid"],
)
def test_invalid_utf8_is_replaced(env, command, expected):
    """Output is decoded as UTF-8 with invalid bytes replaced by U+FFFD, never an exception."""
    result = run(env, command)
    assert result["returncode"] == 0
    assert result["output"] == expected


def test_binary_output_never_raises(env):
    """Random binary output gives a str (U+FFFD for bad bytes) and counts every byte."""
    result = run(env, "head -c 65536 /dev/urandom; printf END")
    assert isinstance(result["output"], str)
    assert result["output"].endswith("END")
    assert "\ufffd" in result["output"]
    assert result["extra"]["output_bytes"] == 65536 + 3
    result = run(env, "head -c 3000 /bin/true")
    assert isinstance(result["output"], str) and result["returncode"] == 0
    assert result["extra"]["output_bytes"] == 3000


def test_multibyte_output_never_split(env):
    """A large multi-byte output (read in many chunks) decodes with no U+FFFD."""
    text = "é€😀中"
    result = run(env, f"python3 -c \"import sys; sys.stdout.write('{text}' * 150000)\"")
    assert result["returncode"] == 0
    assert "\ufffd" not in result["output"]
    assert result["output"] == text * 150000
    assert result["extra"]["output_bytes"] == len((text * 150000).encode())


@pytest.mark.parametrize(
    "text",
    ["😀🎉👩‍💻", "中文字符 日本語 한국어", "e\u0301 a\u0308 n\u0303", "עברית العربية", "Ω≈ç√∫ ñ ß ø", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd"],
    ids=["emoji", "cjk", "combining", "rtl", "latin-symbols", "astral"],
)
def test_unicode_round_trips(env, text):
    """Any Unicode in the command and the output round-trips (argument, heredoc, file name, python)."""
    command = (
        f"printf '%s\\n' '{text}'\n"
        f"cat <<'EOF'\n{text}\nEOF\n"
        f"d=$(mktemp -d) && touch \"$d/{text}\" && ls \"$d\" && rm -rf \"$d\"\n"
        f"python3 -c 'import sys; print(sys.argv[1])' '{text}'\n"
    )
    result = run(env, command)
    assert result["returncode"] == 0, result
    assert result["output"] == f"{text}\n" * 4


# -- big commands ------------------------------------------------------------------------------


def _payload(size, seed, newlines):
    rng = random.Random(seed)
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                " \t\"$`\\!%&*()[]{}<>|;:,.?/~^#@=+-_" "äé中😀")
    out = []
    for i in range(size):
        out.append("\n" if newlines and i % 97 == 96 else rng.choice(alphabet))
    return "".join(out)


@pytest.mark.parametrize("size", [300_000, 1_000_000], ids=["300k", "1M"])
def test_big_heredoc_command_arrives_intact(env, size):
    """A command of hundreds of KB (a heredoc) arrives intact: sha256 inside equals the host's."""
    data = _payload(size, seed=size, newlines=True).rstrip("\n")
    command = f"sha256sum <<'SWE_EOF'\n{data}\nSWE_EOF"
    assert len(command.encode()) > size
    result = run(env, command)
    assert result["returncode"] == 0, result["output"][:500]
    assert result["output"].split()[0] == hashlib.sha256((data + "\n").encode()).hexdigest()


def test_big_single_line_command_arrives_intact(env):
    """A 300 KB single-line command (one argument beyond argv's 128 KB limit) arrives intact."""
    data = _payload(300_000, seed=7, newlines=False).replace("'", "")
    result = run(env, f"printf %s '{data}' | sha256sum")
    assert result["returncode"] == 0, result["output"][:500]
    assert result["output"].split()[0] == hashlib.sha256(data.encode()).hexdigest()


def test_command_with_quotes_and_trailing_whitespace_is_not_requoted(env):
    """The command reaches bash as written: quotes, backslashes, semicolons, trailing blank lines."""
    command = "x='a \"b\" \\c'; echo \"$x\"; echo 'it''s'; echo \"semi;colon\" # comment\n\n\n"
    assert run(env, command)["output"] == 'a "b" \\c\nits\nsemi;colon\n'


# -- output cap --------------------------------------------------------------------------------


def test_huge_output_stays_bounded(make_env):
    """200 MB of output: capped to max_output_bytes (head + tail + marker); host and runner memory bounded."""
    environment = started_env(make_env)
    cap = environment.config.max_output_bytes
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result, elapsed = timed(environment, "echo HEAD_START; yes | head -c 200000000; echo TAIL_END", timeout=120)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result["returncode"] == 0
    output, extra = result["output"], result["extra"]
    assert len(output.encode()) <= cap + 200
    assert extra["truncated"] is True
    assert extra["output_bytes"] == 200_000_000 + len("HEAD_START\n") + len("TAIL_END\n")
    assert extra["dropped_bytes"] > 0
    marker_bytes = len(output.encode()) - (extra["output_bytes"] - extra["dropped_bytes"])
    assert 0 < marker_bytes < 200, "output is not kept bytes + a short marker"
    assert output.startswith("HEAD_START\ny\ny\n")
    assert output.endswith("y\ny\nTAIL_END\n")
    assert str(extra["dropped_bytes"]) in output
    assert grown_mb < 150, f"host memory grew {grown_mb:.0f} MB"
    hwm = run(environment, "grep VmHWM /proc/$PPID/status")["output"].split()
    assert int(hwm[1]) / 1024 < 150, f"the runner's peak memory is {hwm[1]} kB"


def test_small_cap_keeps_head_and_tail_with_marker(make_env):
    """A small max_output_bytes truncates to head + tail with a marker naming the dropped count."""
    environment = make_env(max_output_bytes=4096)
    result = run(environment, "seq 1 100000")
    output, extra = result["output"], result["extra"]
    total = len("".join(f"{i}\n" for i in range(1, 100001)))
    assert extra["output_bytes"] == total
    assert extra["truncated"] is True
    kept = total - extra["dropped_bytes"]
    assert 0 < kept <= 4096
    assert output.startswith("1\n2\n3\n")
    assert output.endswith("99999\n100000\n")
    marker_match = re.search(r"\d+ bytes dropped|dropped \d+ bytes", output)
    assert marker_match and str(extra["dropped_bytes"]) in marker_match.group(0), output[2000:2200]
    assert len(output.encode()) <= 4096 + 200


def test_cap_boundary(make_env):
    """Output of exactly max_output_bytes is kept whole; one byte more drops exactly one byte."""
    environment = make_env(max_output_bytes=4096)
    exact = run(environment, "head -c 4096 /dev/zero | tr '\\0' a")
    assert exact["output"] == "a" * 4096
    assert exact["extra"]["truncated"] is False and exact["extra"]["dropped_bytes"] == 0
    over = run(environment, "head -c 4097 /dev/zero | tr '\\0' a")
    assert over["extra"]["truncated"] is True
    assert over["extra"]["dropped_bytes"] == 1 and over["extra"]["output_bytes"] == 4097


def test_cap_never_splits_multibyte(make_env):
    """Truncation cuts on character boundaries: a capped multi-byte output has no U+FFFD."""
    environment = make_env(max_output_bytes=4096)
    result = run(environment, "python3 -c \"import sys; sys.stdout.write('€' * 10001 + '😀' * 1001)\"")
    assert result["extra"]["truncated"] is True
    output = result["output"]
    assert "\ufffd" not in output
    head_chars = len(output) - len(output.lstrip("€"))
    tail_chars = len(output) - len(output.rstrip("😀"))
    assert head_chars >= 600 and tail_chars >= 400, (head_chars, tail_chars)


# -- timeouts ----------------------------------------------------------------------------------

TIMEOUT_CASES = {
    "foreground": "echo start; sleep {m}",
    "child": "echo start; bash -c 'sleep {m}; true'",
    "grandchild": "echo start; bash -c \"bash -c 'sleep {m}; true'; true\"",
    "pipeline": "echo start; (sleep {m}; echo never) | cat",
    "background-holds-pipe": "echo start; sleep {m} & sleep {m}",
    "background-then-wait": "echo start; sleep {m} & wait",
    "setsid-child": "echo start; setsid sleep {m} & wait",
    "setsid-fork": "echo start; setsid -f sleep {m}; sleep {m}",
    "closes-its-output": "echo start; exec >/dev/null 2>&1; sleep {m}",
    "nohup-background": "echo start; nohup sleep {m} >/dev/null 2>&1 & sleep {m}",
    "ignores-sigterm": "trap '' TERM INT HUP; echo start; bash -c \"trap '' TERM; sleep {m}\"",
    "writer-floods-pipe": "echo start; yes {m} & sleep {m}",
    "python-daemon-double-fork": (
        "echo start; python3 -c \"import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '{m}'])\n    os._exit(0)\n"
        "os.wait(); time.sleep(1000)\""
    ),
    "setsid-double-fork-clean-env": "echo start; ( setsid env -i sleep {m} & ); sleep {m}",
    "setsid-double-fork-clean-env-silent": "echo start; ( setsid env -i sleep {m} >/dev/null 2>&1 </dev/null & ); sleep {m}",
}


@pytest.mark.parametrize("case", list(TIMEOUT_CASES))
def test_timeout_kills_whole_tree(make_env, case):
    """A timeout kills the whole tree (children, grandchildren, setsid, background, pipe holders)."""
    environment = started_env(make_env)
    marker = unique_marker()
    result, elapsed = timed(environment, TIMEOUT_CASES[case].format(m=marker), timeout=0.5)
    assert_timed_out(result, elapsed, 0.5)
    assert result["output"].startswith("start\n"), "partial output lost"
    assert_nothing_left(environment, marker)
    after = run(environment, "echo alive")
    assert after["output"] == "alive\n" and after["returncode"] == 0


RESPAWN_CHAIN = ('f () {{ [ -e /tmp/stop-{m} ] && exit; setsid bash -c "$(declare -f f); f" & }}; '
                 'echo start; f; sleep {m}')


def test_timeout_kills_a_setsid_respawn_chain(make_env):
    """Each link starts the next in a new session and exits at once: a scan of /proc always finds
    the chain one link ahead. (One of these, left over on a test host, held its load at ~10 for hours.)"""
    environment = started_env(make_env)
    marker = unique_marker()
    try:
        result, elapsed = timed(environment, RESPAWN_CHAIN.format(m=marker), timeout=1)
        assert_timed_out(result, elapsed, 1)
        time.sleep(0.5)  # fixed: a chain that survived would show up again; nothing to poll for
        if has(environment, HOST_VISIBLE_PROCESSES):
            assert host_processes_with(f"stop-{marker}") == [], "the chain outlived its timeout"
    finally:  # a chain that escaped ends at its stop file: in the sandbox, and on the host (local, ssh)
        run(environment, f"touch /tmp/stop-{marker}", timeout=10)
        open(f"/tmp/stop-{marker}", "w").close()
    assert run(environment, "echo alive")["output"] == "alive\n"


def test_timeout_spares_earlier_background_jobs(make_env):
    """A timeout kills only that command's tree: background jobs of earlier commands keep running."""
    environment = started_env(make_env)
    earlier, victim = unique_marker(), unique_marker()
    started = run(environment, f"sleep {earlier} & ( setsid sleep {earlier} & ); echo ok")
    assert started["output"] == "ok\n"
    assert len(sandbox_processes_with(environment, earlier)) == 2
    result, elapsed = timed(environment, f"( setsid env -i sleep {victim} & ); sleep {victim}", timeout=1)
    assert_timed_out(result, elapsed, 1)
    assert wait_sandbox_gone(environment, victim) == []
    assert len(sandbox_processes_with(environment, earlier)) == 2, "the timeout killed an earlier job"


def test_timeout_spares_a_background_job_of_the_command_just_before(make_env):
    """A background job started by the command right before the one that times out (often within
    the same 10 ms clock tick as the next command's shell, which /proc start times cannot tell
    apart) keeps running: it is the earlier command's, not this one's."""
    environment = started_env(make_env)
    for _ in range(3):
        marker = unique_marker()
        started = run(environment, f"bash -c 'while :; do sleep 0.05; done; : {marker}' >/dev/null 2>&1 & echo ok")
        assert started["output"] == "ok\n"
        result, elapsed = timed(environment, "sleep 30", timeout=0.5)
        assert_timed_out(result, elapsed, 0.5)
        assert sandbox_processes_with(environment, marker), "the timeout killed the job of the command before"
        run(environment, f"pkill -f {marker}; true")


def test_timeout_spares_daemons_of_earlier_background_jobs(make_env):
    """A timeout spares processes an earlier command's background job daemonizes during that timeout."""
    environment = started_env(make_env)
    loop, daemon = unique_marker(), unique_marker()
    started = run(environment, f"bash -c 'while :; do ( sleep {daemon} & ); sleep 0.1; done; : {loop}' "
                               ">/dev/null 2>&1 & echo $!")
    loop_pid = int(started["output"])
    assert wait_until(lambda: sandbox_processes_with(environment, daemon)), "the loop started no daemon"
    before = len(sandbox_processes_with(environment, daemon))
    result, elapsed = timed(environment, "sleep 30", timeout=1)
    assert_timed_out(result, elapsed, 1)
    alive = run(environment, f"kill -0 {loop_pid} && echo alive")
    assert alive["output"] == "alive\n", "the timeout killed an earlier background job"
    after = len(sandbox_processes_with(environment, daemon))
    assert after >= before + 5, f"{before} daemons before a 1 s timeout, {after} after: the timeout killed some"


def test_timeout_from_config(make_env):
    """The config field `timeout` applies when execute gets none; execute's `timeout` overrides it."""
    environment = started_env(make_env, timeout=1)
    result, elapsed = timed(environment, "echo partial; sleep 20")
    assert_timed_out(result, elapsed, 1)
    assert result["output"] == "partial\n"
    ok = run(environment, "sleep 1.3; echo done", timeout=5)
    assert ok["returncode"] == 0 and ok["output"] == "done\n"


def test_timeout_keeps_partial_output_of_descendants(make_env):
    """Partial output written by several processes before the timeout is kept, in order."""
    environment = started_env(make_env)
    command = "echo one; sh -c 'echo two >&2'; python3 -c \"print('three')\"; sleep 0.2; echo four; sleep 30"
    result, elapsed = timed(environment, command, timeout=1)
    assert_timed_out(result, elapsed, 1)
    assert result["output"] == "one\ntwo\nthree\nfour\n"
    assert result["extra"]["output_bytes"] == len(result["output"]) and result["extra"]["truncated"] is False


def test_fractional_timeout_is_named(make_env):
    """exception_info names the timeout as given ("timed out after 1.5 seconds")."""
    environment = started_env(make_env)
    result, elapsed = timed(environment, "sleep 30", timeout=1.5)
    assert_timed_out(result, elapsed, 1.5)
    assert elapsed >= 1.5


@pytest.mark.parametrize(
    ("partial", "complete"),
    [("\\xe2\\x82", "ab€"), ("\\xf0\\x9f\\x98", "ab😀"), ("\\xc3", "abé")],
    ids=["3-byte", "4-byte", "2-byte"],
)
def test_timeout_with_partial_multibyte(make_env, partial, complete):
    """A timeout right after half a multi-byte character: complete text intact, no exception."""
    environment = started_env(make_env)
    full = "".join(f"\\x{b:02x}" for b in complete.encode())
    result, elapsed = timed(environment, f"printf '{full}{partial}'; sleep 30", timeout=0.5)
    assert_timed_out(result, elapsed, 0.5)
    assert result["output"].startswith(complete)
    assert result["output"][len(complete):] in ("", "\ufffd"), repr(result["output"])


def test_sandbox_usable_after_many_timeouts(make_env):
    """After timeouts the sandbox still runs commands (state of the sandbox is kept)."""
    environment = started_env(make_env)
    kept = f"/tmp/swe-sandbox-after-timeout-{unique_marker()}"  # unique: a host-sharing backend's /tmp is shared
    run(environment, f"echo keep > {kept}")
    for _ in range(2):
        result, elapsed = timed(environment, "sleep 30", timeout=0.5)
        assert_timed_out(result, elapsed, 0.5)
    after = run(environment, f"cat {kept}; rm -f {kept}")
    assert after["output"] == "keep\n" and after["returncode"] == 0


# -- background jobs ---------------------------------------------------------------------------


def _query_script(port, requests=1):
    return (
        "python3 - <<'EOF'\n"
        "import time, urllib.request\n"
        f"for attempt in range(200):\n"
        "    try:\n"
        f"        codes = [urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=3).status"
        f" for _ in range({requests})]\n"
        "        print('status', *sorted(set(codes)))\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.05)\n"
        "else:\n"
        "    print('no answer')\n"
        "EOF"
    )


@pytest.mark.parametrize("redirect", [True, False], ids=["redirected", "output-on-pipe"])
def test_background_server_returns_promptly_and_answers(make_env, backend, redirect):
    """A server started with `&` lets the call return promptly and answers the next command."""
    environment = started_env(make_env)
    port = free_port()
    tail = " >/dev/null 2>&1 &" if redirect else " &"
    result, elapsed = timed(environment, f"python3 -m http.server {port} --bind 127.0.0.1{tail} echo started",
                            timeout=10)
    assert result["returncode"] == 0 and result["output"].startswith("started\n"), result
    assert result["extra"]["timed_out"] is False
    assert elapsed < 2, f"took {elapsed:.2f} s"
    answer = run(environment, _query_script(port, requests=30), timeout=20)
    assert answer["output"] == "status 200\n", answer
    # the server's request log went to the pipe (or /dev/null): it must not leak into this command
    assert "GET /" not in answer["output"]


def test_background_output_after_return_is_discarded(env):
    """Output a background job writes after the command returned is discarded, not mixed in later."""
    result, elapsed = timed(env, "(sleep 0.6; echo LATE-OUTPUT) & echo now")
    assert result["output"] == "now\n" and elapsed < 2
    time.sleep(0.8)  # fixed: the late write goes nowhere the test can see
    assert run(env, "echo next")["output"] == "next\n"


def test_background_job_keeps_running(env):
    """A background job outlives its command (an agent may start something, then query it)."""
    marker = unique_marker()
    result, elapsed = timed(env, f"sleep {marker} & echo $! > /tmp/swe-bg-{marker}.pid")
    assert result["returncode"] == 0 and elapsed < 2
    check = run(env, f"kill -0 $(cat /tmp/swe-bg-{marker}.pid) && echo alive")
    assert check["output"] == "alive\n"
    assert len(sandbox_processes_with(env, marker)) == 1
    run(env, f"kill $(cat /tmp/swe-bg-{marker}.pid); rm -f /tmp/swe-bg-{marker}.pid")


def test_flooding_background_job_does_not_block_or_leak(make_env):
    """A background job flooding the pipe neither blocks later commands nor leaks into their output."""
    environment = started_env(make_env)
    marker = unique_marker()
    result, elapsed = timed(environment, f"echo started; yes {marker} &", timeout=10)
    assert result["output"].startswith("started\n") and elapsed < 2
    assert result["extra"]["timed_out"] is False
    time.sleep(0.5)  # fixed: the flood fills the pipe meanwhile; nothing to poll for
    after, elapsed = timed(environment, "echo next", timeout=10)
    assert after["output"] == "next\n" and elapsed < 2
    assert len(sandbox_processes_with(environment, marker)) == 1, "the background job should still run"
    environment.close()
    if has(environment, HOST_VISIBLE_PROCESSES):
        assert wait_host_gone(marker) == []


@pytest.mark.parametrize(
    "command",
    ["sleep {m} &", "nohup sleep {m} >/dev/null 2>&1 &", "setsid -f sleep {m}", "( setsid env -i sleep {m} & )",
     "sleep {m} & disown"],
    ids=["ampersand", "nohup", "setsid-fork", "setsid-double-fork-clean-env", "disown"],
)
@requires(HOST_VISIBLE_PROCESSES)
def test_close_ends_background_processes(make_env, command):
    """Closing the environment ends every background process its commands started."""
    environment = started_env(make_env)
    marker = unique_marker()
    result, elapsed = timed(environment, command.format(m=marker) + "\necho started", timeout=10)
    assert result["output"] == "started\n" and elapsed < 2
    assert len(wait_until_host_sees(marker)) == 1, "the background process did not start"
    environment.close()
    assert wait_host_gone(marker, grace=2.0) == []


def wait_until_host_sees(marker, grace=2.0):
    deadline = time.monotonic() + grace
    while True:
        found = host_processes_with(marker)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


# -- environment variables ---------------------------------------------------------------------

SECRETS = {
    "SWE_TEST_SECRET_API_KEY": "sk-swe-test-0123456789abcdef",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-swe-test-9876",
    "GITHUB_TOKEN": "ghp_swetesttoken0000000000000000",
}


def test_host_secrets_do_not_enter(make_env, monkeypatch):
    """The host's environment variables never enter: a secret set on the host is absent inside."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    environment = make_env()
    result = run(environment, "env; cat /proc/self/environ | tr '\\0' '\\n'")
    assert result["returncode"] == 0
    for name, value in SECRETS.items():
        assert value not in result["output"]
        assert f"{name}=" not in result["output"]
    assert run(environment, "printenv SWE_TEST_SECRET_API_KEY")["returncode"] == 1


def test_forward_env_and_env_config(make_env, monkeypatch):
    """`forward_env` brings named host variables, `env` sets variables; nothing else enters."""
    monkeypatch.setenv("SWE_FORWARDED", "forwarded-value")
    monkeypatch.setenv("SWE_NOT_FORWARDED", "must-not-appear")
    environment = make_env(forward_env=["SWE_FORWARDED", "SWE_UNSET_ON_HOST"], env={"SWE_CONFIGURED": "cfg ü"})
    result = run(environment, 'echo "[$SWE_FORWARDED][$SWE_CONFIGURED][${SWE_NOT_FORWARDED-unset}]"; '
                              'printenv SWE_UNSET_ON_HOST || echo unset-stays-unset')
    assert result["output"] == "[forwarded-value][cfg ü][unset]\nunset-stays-unset\n"


def test_env_config_overrides_defaults(make_env):
    """`env` from the config wins over the built-in defaults (e.g. PAGER)."""
    environment = make_env(env={"PAGER": "more", "SWE_X": "1"})
    assert run(environment, 'echo "$PAGER $SWE_X"')["output"] == "more 1\n"


# -- submission sentinel -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "submission"),
    [
        (f"printf '{SENTINEL}\\nline\\n'", "line\n"),
        (f"printf '{SENTINEL}\\nline'", "line"),
        (f"printf '{SENTINEL}\\n\\tindented  \\n  two\\t\\n'", "\tindented  \n  two\t\n"),
        (f"printf '{SENTINEL}\\n\\n\\nx\\n\\n\\n'", "\n\nx\n\n\n"),
        (f"printf '{SENTINEL}\\n\\033[1;31mred\\033[0m plain\\n'", "\x1b[1;31mred\x1b[0m plain\n"),
        (f"printf '{SENTINEL}\\n'", ""),
        (f"printf '{SENTINEL}'", ""),
        (f"printf '\\n\\n{SENTINEL}\\nafter blanks'", "after blanks"),
        (f"printf '{SENTINEL}\\n😀 中文 e\\xcc\\x81\\n'", "😀 中文 e\u0301\n"),
        (f"printf '{SENTINEL}\\nA\\r\\nB'", "A\r\nB"),
        (f"echo {SENTINEL}; echo out; echo err >&2", "out\nerr\n"),
        (f"printf '{SENTINEL}\\n--- a/f\\n+++ b/f\\n@@ -1 +1 @@\\n-old \\n+new\\t\\n'",
         "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old \n+new\t\n"),
        (f"echo {SENTINEL}; python3 -c \"import sys; sys.stdout.write('x' * 200000)\"", "x" * 200000),
    ],
    ids=["trailing-newline", "no-trailing-newline", "tabs-spaces", "blank-lines", "ansi", "empty-with-newline",
         "empty-no-newline", "after-blank-lines", "unicode", "crlf-inside", "stderr", "diff", "large"],
)
def test_submission_is_byte_exact(env, command, submission):
    """Sentinel as first non-empty line and returncode 0 raises Submitted with the rest, byte for byte."""
    with pytest.raises(swe_sandbox.Submitted) as info:
        run(env, command)
    assert info.value.submission == submission
    assert info.value.result["returncode"] == 0
    assert SENTINEL in info.value.result["output"]


@pytest.mark.parametrize(
    "command",
    [f"echo {SENTINEL}; echo patch; exit 1", f"echo {SENTINEL}; false", f"echo {SENTINEL}; kill -9 $$",
     f"echo {SENTINEL}; exit 2"],
    ids=["exit-1", "false", "killed", "exit-2"],
)
def test_failed_command_never_submits(env, command):
    """A failed command never submits: the sentinel with returncode != 0 returns the result."""
    result = run(env, command)
    assert result["returncode"] != 0
    assert result["output"].startswith(SENTINEL + "\n")


def test_timed_out_command_never_submits(make_env):
    """A command that prints the sentinel then times out returns a timed-out result, no Submitted."""
    environment = started_env(make_env)
    result, elapsed = timed(environment, f"echo {SENTINEL}; echo x; sleep 30", timeout=1)
    assert_timed_out(result, elapsed, 1)
    assert result["output"] == f"{SENTINEL}\nx\n"


@pytest.mark.parametrize(
    "command",
    [f"echo hello; echo {SENTINEL}", f"echo '{SENTINEL} extra'", f"echo 'x{SENTINEL}'",
     f"echo {SENTINEL.lower()}", f"echo not-it; printf '\\n{SENTINEL}\\n'"],
    ids=["second-line", "same-line-extra", "prefixed", "lowercase", "after-other-line"],
)
def test_sentinel_not_first_nonempty_line_does_not_submit(env, command):
    """The sentinel submits only as the exact first non-empty line."""
    result = run(env, command)
    assert result["returncode"] == 0


# -- life cycle --------------------------------------------------------------------------------


def test_context_manager_and_closed_environment(make_env):
    """The environment is a context manager; after close, execute raises (close is idempotent)."""
    environment = make_env()
    with environment as entered:
        assert run(entered, "echo inside")["output"] == "inside\n"
    with pytest.raises(swe_sandbox.SweSandboxError):
        run(environment, "echo after-close")
    environment.close()
    with pytest.raises(swe_sandbox.SweSandboxError):
        run(environment, "echo after-second-close")


def test_close_before_start_is_fine(make_env):
    """Closing an environment that never ran a command works, and execute then raises."""
    environment = make_env()
    environment.close()
    with pytest.raises(swe_sandbox.SweSandboxError):
        run(environment, "true")


@requires(HOST_VISIBLE_PROCESSES)
def test_sandbox_died_during_command_raises(make_env):
    """A sandbox that dies during a command raises SandboxDied, not an ordinary non-zero result."""
    environment = started_env(make_env)
    marker = unique_marker()
    killer = kill_server_when_running(marker)  # from the host: a command cannot kill its runner
    with pytest.raises(swe_sandbox.SandboxDied):
        run(environment, f"echo dying; sleep {marker}", timeout=30)
    killer.join()
    assert time.monotonic() - killer.killed_at < 5, "the host noticed the dead sandbox late"
    with pytest.raises(swe_sandbox.SweSandboxError):
        run(environment, "echo again")


@requires(HOST_VISIBLE_PROCESSES, LONG_LIVED_RUNNER)
def test_sandbox_vanished_between_commands_raises(make_env):
    """A sandbox that vanished between commands raises SandboxDied on the next execute."""
    environment = started_env(make_env)
    marker = unique_marker()
    result = run(environment, f"sleep {marker} >/dev/null 2>&1 </dev/null & echo ok")
    assert result["output"] == "ok\n"
    server = host_server_pid(marker)
    os.kill(server, signal.SIGKILL)
    assert wait_until(lambda: host_pid_gone(server)), "SIGKILL did not end the sandbox's runner"
    with pytest.raises(swe_sandbox.SandboxDied):
        run(environment, "echo hello")
