"""The ``swe-sandbox`` command line: exec (plain and --json), exit codes, -c overrides, check.

Most tests go through typer's CliRunner on the ``local`` backend (no infrastructure); a few run the
real program in a subprocess (``python -m swe_sandbox``) to see what a user sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import swe_sandbox
from swe_sandbox.cli import app as cli_app
from swe_sandbox.cli import exec as exec_cli
from swe_sandbox.cli import exit_codes, guard
from swe_sandbox.environments import environment_class
from swe_sandbox.testing import selfcheck

runner = CliRunner()


def invoke(*args: str, input: str | None = None):
    # a wide terminal, so rich does not wrap check's table cells in the middle of a phrase
    return runner.invoke(cli_app.app, list(args), input=input, env={"COLUMNS": "250"})


def require_bwrap() -> None:
    """Skip without bubblewrap; under CI (``CI`` set) a missing backend is a failure, as in conftest."""
    reason = environment_class("bwrap").unavailable_reason()
    if reason is None:
        return
    if "CI" in os.environ:
        pytest.fail(f"backend 'bwrap' is unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"backend 'bwrap' is unavailable: {reason}")


def run_program(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swe_sandbox", *args], input=stdin, capture_output=True, text=True,
        timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL,
    )


# -- help --------------------------------------------------------------------------------------


def test_help_lists_exactly_the_commands_that_exist_and_the_exit_codes():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "exec" in result.stdout and "check" in result.stdout
    commands = {name: cli_app.load_command(name) for name in cli_app.COMMANDS}
    assert {"exec", "check"} <= set(commands)
    for name, command in commands.items():  # no placeholders for commands still to come
        assert "not implemented" not in (command.help or "").lower(), name
    help_text = invoke("exec", "--help").stdout
    for code in ("124", "125", " 2 ", " 3 ", " 4 "):
        assert code in help_text.replace("\n", " "), code


def test_no_arguments_shows_help():
    result = invoke()
    assert "exec" in result.output and "check" in result.output


# -- exec, plain ---------------------------------------------------------------------------------


def test_exec_prints_merged_output_and_exits_0():
    result = invoke("exec", "--env", "local", "--", "echo out; echo err >&2; echo out2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "out\nerr\nout2\n"  # one stream, in the order written
    assert result.stderr == ""


def test_exec_joins_the_words_after_double_dash():
    result = invoke("exec", "--env", "local", "--", "echo", "a", "b", "'c  d'")
    assert result.stdout == "a b c  d\n"


def test_exec_options_after_the_command_belong_to_the_command():
    result = invoke("exec", "--env", "local", "echo", "--json", "-c", "x")
    assert result.exit_code == 0
    assert result.stdout == "--json -c x\n"


@pytest.mark.parametrize("code", [0, 1, 7, 42, 255])
def test_exec_passes_the_returncode_through(code):
    result = invoke("exec", "--env", "local", "--", f"echo x; exit {code}")
    assert result.exit_code == code
    assert result.stdout == "x\n"


def test_exec_signal_death_exits_128_plus_n():
    result = invoke("exec", "--env", "local", "--", "kill -TERM $$")
    assert result.exit_code == 128 + 15


def test_exec_timeout_exits_124_keeps_partial_output_and_says_so_on_stderr():
    result = invoke("exec", "--env", "local", "--timeout", "1", "--", "echo before; sleep 5; echo after")
    assert result.exit_code == exit_codes.EXIT_TIMEOUT == 124
    assert result.stdout == "before\n"
    assert "timed out after 1 seconds" in result.stderr


def test_exec_cwd():
    result = invoke("exec", "--env", "local", "--cwd", "/tmp", "--", "pwd")
    assert result.stdout == "/tmp\n"


def test_exec_missing_cwd_is_a_failed_command_not_an_error():
    result = invoke("exec", "--env", "local", "--cwd", "/nonexistent-dir-xyz", "--", "true")
    assert result.exit_code not in (0, exit_codes.EXIT_USAGE, exit_codes.EXIT_BACKEND_UNAVAILABLE, exit_codes.EXIT_SANDBOX_FAILED)
    assert "/nonexistent-dir-xyz" in result.stderr


def test_exec_reads_the_command_from_stdin_with_dash():
    script = "x=6\necho \"from stdin $((x * 7))\"\ncat <<'EOF'\nh\u00e9redoc $x\nEOF\n"
    result = invoke("exec", "--env", "local", "--", "-", input=script)
    assert result.exit_code == 0, result.output
    assert result.stdout == "from stdin 42\nh\u00e9redoc $x\n"


def test_exec_unicode_output_is_written_as_utf8():
    result = invoke("exec", "--env", "local", "--", "printf '\\xe2\\x82\\xac \\xff\\n'")
    assert result.stdout == "\u20ac \ufffd\n"


# -- -c overrides ----------------------------------------------------------------------------------


def test_override_environment_timeout_takes_effect():
    result = invoke("exec", "--env", "local", "-c", "environment.timeout=1", "--", "sleep 5")
    assert result.exit_code == 124
    assert "timed out after 1 seconds" in result.stderr


def test_override_env_variable_and_timeout_flag_wins_over_config():
    result = invoke("exec", "--env", "local", "-c", "environment.env.GREETING=hello", "-c", "environment.timeout=1",
                    "--timeout", "5", "--", "sleep 1.5; echo $GREETING")
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello\n"


def test_host_environment_does_not_leak_into_the_command(monkeypatch):
    monkeypatch.setenv("SWE_SANDBOX_TEST_SECRET", "s3cret")
    result = invoke("exec", "--env", "local", "--", "echo \"[${SWE_SANDBOX_TEST_SECRET:-}]\"")
    assert result.stdout == "[]\n"


# -- errors: one line, no traceback, exit 2 / 3 / 4 ------------------------------------------------


def assert_one_clean_line(stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("swe-sandbox: ")
    assert "Traceback" not in stderr


def test_misspelt_config_field_exits_2_naming_the_field():
    result = invoke("exec", "--env", "local", "-c", "environment.tmeout=5", "--", "true")
    assert result.exit_code == exit_codes.EXIT_USAGE == 2
    assert "environment.tmeout" in result.stderr and "unknown field" in result.stderr
    assert "timeout" in result.stderr.split("allowed", 1)[1]  # lists the allowed fields
    assert_one_clean_line(result.stderr)
    assert result.stdout == ""


def test_invalid_config_value_exits_2_naming_the_field():
    result = invoke("exec", "--env", "local", "-c", "environment.timeout=-3", "--", "true")
    assert result.exit_code == 2
    assert "environment.timeout" in result.stderr
    assert_one_clean_line(result.stderr)


@pytest.mark.parametrize("args", [
    ["--env", "no-such-preset", "--", "true"],
    ["--env", "local", "-c", "not-a-pair", "--", "true"],
    ["--env", "local", "-c", "agent.step_limit=3", "--", "true"],
])
def test_other_config_errors_exit_2(args):
    result = invoke("exec", *args)
    assert result.exit_code == 2
    assert_one_clean_line(result.stderr)


def test_config_file(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("environment:\n  backend: local\n  env: {FROM_FILE: 'yes'}\n")
    result = invoke("exec", "--env", str(config), "--", "echo $FROM_FILE")
    assert (result.exit_code, result.stdout) == (0, "yes\n")


@pytest.mark.parametrize("args", [
    ["--env", "local", "--", ""],
    ["--env", "local", "--timeout", "0", "--", "true"],
    ["--env", "local"],
    ["--", "true"],
])
def test_usage_errors_exit_2(args):
    assert invoke("exec", *args).exit_code == 2


def test_backend_unavailable_exits_3():
    result = invoke("exec", "--env", "bwrap", "-c", "environment.bwrap_path=/nonexistent/bwrap", "--", "true")
    assert result.exit_code == exit_codes.EXIT_BACKEND_UNAVAILABLE == 3
    assert "bubblewrap" in result.stderr
    assert_one_clean_line(result.stderr)


def test_a_bwrap_that_cannot_make_its_sandbox_is_unavailable_with_the_probe_reason(tmp_path):
    """The probe (``bwrap --version`` and a trial sandbox) runs only when a start fails; its reason
    still decides the error (unavailable, exit 3), not a bare "the runner did not start"."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    result = invoke("exec", "--env", "bwrap", "-c", f"environment.bwrap_path={fake}", "--", "true")
    assert result.exit_code == exit_codes.EXIT_BACKEND_UNAVAILABLE, result.stderr
    assert "bubblewrap >= 0.8.0 is needed" in result.stderr
    assert_one_clean_line(result.stderr)


def test_sandbox_that_dies_exits_4():
    result = invoke("exec", "--env", "local", "--", "kill -9 $PPID")  # $PPID: the runner
    assert result.exit_code == exit_codes.EXIT_SANDBOX_FAILED == 4
    assert "SandboxDied" in result.stderr
    assert_one_clean_line(result.stderr)


@pytest.mark.parametrize("result, code", [
    ({"returncode": 0, "extra": {"timed_out": False}}, 0),
    ({"returncode": 255, "extra": {"timed_out": False}}, 255),
    ({"returncode": -1, "extra": {"timed_out": True}}, 124),
    ({"returncode": -1, "extra": {"timed_out": False}}, 125),
    ({"returncode": 256, "extra": {}}, 125),
    ({"returncode": None}, 125),
])
def test_exit_status_mapping(result, code):
    assert exec_cli.exit_status(result) == code


def test_one_line_folds_multi_line_messages():
    assert guard.one_line("invalid config:\n  a: bad\n  b: worse") == "invalid config: a: bad; b: worse"


# -- exec --json -----------------------------------------------------------------------------------


def test_json_has_the_result_dict_and_submission_null():
    result = invoke("exec", "--env", "local", "--json", "--", "echo hi; exit 3")
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert set(data) == {"output", "returncode", "exception_info", "extra", "submission"}
    assert data["output"] == "hi\n" and data["returncode"] == 3 and data["submission"] is None
    assert data["exception_info"] == ""
    assert {"timed_out", "truncated", "output_bytes", "dropped_bytes", "duration_s"} <= set(data["extra"])


def test_json_timeout():
    result = invoke("exec", "--env", "local", "--json", "--timeout", "1", "--", "sleep 5")
    assert result.exit_code == 124
    data = json.loads(result.stdout)
    assert data["returncode"] == -1 and data["extra"]["timed_out"] is True
    assert "timed out after 1 seconds" in data["exception_info"]


def test_json_submission():
    command = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\ndiff --git a/x b/x\\n+\u00e9\\n'"
    result = invoke("exec", "--env", "local", "--json", "--", command)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["submission"] == "diff --git a/x b/x\n+\u00e9\n"
    assert data["returncode"] == 0
    assert data["output"].startswith("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n")


def test_failed_command_never_submits():
    result = invoke("exec", "--env", "local", "--json", "--", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 1")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["submission"] is None


def test_plain_mode_submission_prints_the_output_and_exits_0():
    result = invoke("exec", "--env", "local", "--", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo done")
    assert (result.exit_code, result.stdout) == (0, "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndone\n")


# -- bwrap ----------------------------------------------------------------------------------------


@pytest.mark.bwrap
def test_exec_bwrap_json_and_isolation():
    require_bwrap()
    result = invoke("exec", "--env", "bwrap", "--json", "--", "echo hi; hostname; id -u; ls /workspace | wc -l")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["output"] == "hi\nswe-sandbox\n0\n0\n"


@pytest.mark.bwrap
def test_exec_bwrap_timeout_exits_124():
    require_bwrap()
    result = invoke("exec", "--env", "bwrap", "--timeout", "1", "--", "echo a; sleep 5")
    assert (result.exit_code, result.stdout) == (124, "a\n")


# -- check ----------------------------------------------------------------------------------------


def test_check_local_passes_and_says_it_has_no_isolation():
    result = invoke("check", "--env", "local")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "PASS" in text
    assert "NO ISOLATION" in text
    assert "echo ok" in text and "back in" in text and "round trip" in text


@pytest.mark.bwrap
def test_check_bwrap_passes():
    require_bwrap()
    result = invoke("check", "--env", "bwrap")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "PASS" in text and "namespaces" in text and "NO ISOLATION" not in text


def test_check_fails_with_the_reason_when_the_backend_is_unavailable(monkeypatch):
    bwrap_class = environment_class("bwrap")
    monkeypatch.setattr(bwrap_class, "unavailable_reason", classmethod(lambda cls, *a: "simulated: no bwrap here"))
    result = invoke("check", "--env", "bwrap")
    assert result.exit_code == exit_codes.EXIT_FAILED
    assert "simulated: no bwrap here" in " ".join(result.stdout.split())
    assert "FAIL" in result.stdout


def test_check_without_env_fails_when_a_builtin_backend_fails(monkeypatch):
    bwrap_class = environment_class("bwrap")
    monkeypatch.setattr(bwrap_class, "unavailable_reason", classmethod(lambda cls, *a: "simulated: no bwrap here"))
    result = invoke("check")
    assert result.exit_code == 1
    text = " ".join(result.stdout.split())
    assert "local" in text and "bwrap" in text and "NO ISOLATION" in text


def test_check_without_env_passes_when_only_a_backend_needing_a_target_fails(monkeypatch):
    """ssh needs a host: without --env it is shown (with how to check it) but not counted."""
    monkeypatch.setattr(selfcheck, "check_backend", _fake_check(selfcheck.check_backend))
    result = invoke("check")
    text = " ".join(result.stdout.split())
    assert result.exit_code == 0, text
    assert "ssh: FAIL" in text and "not counted: check it with --env FILE" in text
    assert "(plugin)" not in text and "(needs a target)" in text  # ssh is built in, not a plugin


def test_only_entry_point_backends_are_labelled_plugins(monkeypatch):
    monkeypatch.setattr(selfcheck, "needs_target", lambda name: name == "ssh")
    assert selfcheck.not_counted_label("ssh") == selfcheck.NEEDS_TARGET
    assert selfcheck.not_counted_label("toy-third-party") == selfcheck.PLUGIN


def _fake_check(real):
    """Every backend but ssh passes at once (the real self-check of each is tested on its own)."""
    def check(name, spec, overrides=None, **kwargs):
        if name == "ssh":
            return real(name, spec, overrides, **kwargs)
        return {"backend": name, "usable": True, "isolation": "x", "steps": [(True, "ok")], "ok": True}
    return check


def test_check_unknown_backend_exits_2():
    result = invoke("check", "--env", "no-such-backend")
    assert result.exit_code == 2
    assert_one_clean_line(result.stderr)


# -- the real program ---------------------------------------------------------------------------


def test_python_dash_m_swe_sandbox_exec_and_exit_codes():
    done = run_program("exec", "--env", "local", "--", "echo via-main; exit 5")
    assert (done.returncode, done.stdout) == (5, "via-main\n")
    done = run_program("exec", "--env", "local", "-", stdin="echo piped")
    assert (done.returncode, done.stdout) == (0, "piped\n")
    done = run_program("exec", "--env", "local", "-c", "environment.tmeout=5", "--", "true")
    assert done.returncode == 2 and "environment.tmeout" in done.stderr
    assert_one_clean_line(done.stderr)


def loaded_by_the_cli(argv: list[str], modules: list[str]) -> tuple[str, list[str]]:
    """Run ``swe-sandbox ARGV`` in a fresh interpreter: its stdout, and which of ``modules`` it imported."""
    code = (
        "import sys\n"
        f"sys.argv = ['swe-sandbox', *{argv!r}]\n"
        "from swe_sandbox.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {modules!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().replace("'", '"'))


def test_help_imports_nothing_heavy():
    """``swe-sandbox --help`` must stay fast: no config models, YAML, rich, or backend modules."""
    heavy = ["swe_sandbox.config", "swe_sandbox.environments", "yaml", "rich", "litellm", "docker"]
    stdout, loaded = loaded_by_the_cli(["--help"], heavy)
    assert loaded == []
    assert "exec" in stdout


def test_a_command_loads_only_its_own_family():
    """``exec`` neither imports the agent's commands nor the batch's (the group loads them lazily)."""
    others = ["swe_sandbox.cli.run", "swe_sandbox.cli.batch", "swe_sandbox.cli.engines", "swe_sandbox.agent"]
    stdout, loaded = loaded_by_the_cli(["exec", "--help"], others)
    assert loaded == []
    assert "COMMAND" in stdout


def test_import_swe_sandbox_imports_no_sdk():
    code = (
        "import sys, json, swe_sandbox\n"
        "env = swe_sandbox.get_environment('local')\n"  # the registry loads lazily, still no SDK
        "from swe_sandbox import get_environment, Submitted, ConfigError\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert not loaded & {"docker", "podman", "paramiko", "litellm", "openai", "anthropic"}


# -- found by testing: --timeout, check -c, termination signals -----------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e12", "1e7", "1000001", "0", "-1"])
def test_exec_rejects_a_non_finite_or_absurd_timeout_itself(value, monkeypatch):
    import swe_sandbox

    def no_environment(*args, **kwargs):
        raise AssertionError("the CLI must reject the timeout before making an environment")

    monkeypatch.setattr(swe_sandbox, "get_environment", no_environment, raising=False)
    result = invoke("exec", "--env", "local", "--timeout", value, "--", "true")
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert_one_clean_line(result.stderr)
    assert "--timeout" in result.stderr and "finite" in result.stderr


def test_exec_accepts_a_large_finite_timeout():
    result = invoke("exec", "--env", "local", "--timeout", "1e6", "--", "echo ok")
    assert (result.exit_code, result.stdout) == (0, "ok\n")


def test_check_with_a_bwrap_path_that_does_not_exist_is_not_usable():
    result = invoke("check", "--env", "bwrap", "-c", "environment.bwrap_path=/nonexistent")
    assert result.exit_code == exit_codes.EXIT_FAILED, result.output
    text = " ".join(result.stdout.split())
    assert "│ yes" not in result.stdout and "no: bubblewrap (/nonexistent) is not installed" in text
    assert "FAIL" in text


def test_check_says_why_when_the_start_fails_with_an_unexpected_error(monkeypatch):
    bwrap_class = environment_class("bwrap")

    def broken_start(self):
        raise swe_sandbox.SandboxStartError("simulated: the runner never said ready")

    monkeypatch.setattr(bwrap_class, "start", broken_start)
    result = invoke("check", "--env", "bwrap")
    assert result.exit_code == exit_codes.EXIT_FAILED, result.output
    text = " ".join(result.stdout.split())
    assert "no: SandboxStartError: simulated: the runner never said ready" in text, text


def test_check_config_errors_exit_2_like_exec():
    result = invoke("check", "--env", "local", "-c", "environment.tmeout=5")
    assert result.exit_code == 2, result.output
    assert_one_clean_line(result.stderr)
    assert "environment.tmeout: unknown field" in result.stderr
    result = invoke("check", "-c", "environment.timeout=5")  # for which backend?
    assert result.exit_code == 2 and "needs --env" in result.stderr


def _bwrap_workspaces_of(parent_pid: int) -> list[str]:
    """The ``--bind HOST /workspace`` directories of the bwrap processes whose parent is ``parent_pid``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            if int(stat[stat.rfind(b")") + 2:].split()[1]) != parent_pid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode().split("\0")
        except (OSError, ValueError, IndexError):
            continue
        found += [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--bind"]
    return found


@pytest.mark.bwrap
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_exec_termination_signals_close_the_sandbox(signum):
    """SIGTERM / SIGHUP end exec like Ctrl-C: the command's processes and the temporary workspace go."""
    from swe_sandbox.testing.kit import unique_marker, wait_host_gone

    from helpers.cli_process import start_cli_until_running

    require_bwrap()
    marker = unique_marker()
    proc = start_cli_until_running([sys.executable, "-m", "swe_sandbox", "exec", "--env", "bwrap", "--",
                                    f"sleep {marker}"], marker)
    try:
        workspaces = _bwrap_workspaces_of(proc.pid)
        assert workspaces and all(os.path.isdir(w) for w in workspaces), workspaces
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, (stdout, stderr)
    assert stderr.strip() == f"swe-sandbox: terminated by {signal.Signals(signum).name}"
    assert [p for p in wait_host_gone(marker, grace=5) if "swe_sandbox" not in p] == []
    assert [w for w in workspaces if os.path.exists(w)] == []


# -- exec on a terminal: no escape sequence of the command reaches it -------------------------------

#: Sets the terminal's title and clears the screen, when written raw to a terminal.
HOSTILE = "printf '\\033]0;pwned\\007\\033[2J'"
HOSTILE_RAW = b"\x1b]0;pwned\x07\x1b[2J"
HOSTILE_SHOWN = b"\\x1b]0;pwned\\x07\\x1b[2J"


def run_on_pty(*args: str, stderr_too: bool = False, timeout: float = 60) -> tuple[bytes, bytes, int]:
    """Run ``python -m swe_sandbox ARGS`` with a pseudo-terminal as stdout (and stderr with
    ``stderr_too``; else a pipe); what reached each, byte for byte (the pty in raw mode: no \\r added)."""
    import pty
    import select
    import time
    import tty

    ptys = [pty.openpty() for _ in range(2 if stderr_too else 1)]
    for _, slave in ptys:
        tty.setraw(slave)
    proc = subprocess.Popen([sys.executable, "-m", "swe_sandbox", *args], stdin=subprocess.DEVNULL,
                            stdout=ptys[0][1], stderr=ptys[1][1] if stderr_too else subprocess.PIPE)
    got = {master: b"" for master, _ in ptys}
    open_masters = [master for master, _ in ptys]
    try:
        for _, slave in ptys:
            os.close(slave)
        deadline = time.monotonic() + timeout
        while open_masters and time.monotonic() < deadline:
            ready, _, _ = select.select(open_masters, [], [], 0.5)
            for master in ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every holder of the slave has closed it
                    data = b""
                if data:
                    got[master] += data
                else:
                    open_masters.remove(master)
        err = got[ptys[1][0]] if stderr_too else proc.stderr.read()
        return got[ptys[0][0]], err, proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        for master, _ in ptys:
            os.close(master)


def test_exec_on_a_terminal_shows_control_characters_escaped():
    out, err, code = run_on_pty("exec", "--env", "local", "--", HOSTILE + "; printf '\\ttab\\r\\nok\\rover\\n'")
    assert code == 0, err
    assert out == HOSTILE_SHOWN + b"\ttab\r\nok\\x0dover\n"
    assert b"\x1b" not in out and b"\x07" not in out


def test_exec_exception_info_on_a_terminal_is_escaped_too():
    out, err, code = run_on_pty("exec", "--env", "local", "--cwd", "/nonexistent\x1b]0;pwned\x07", "--", "true",
                                stderr_too=True)
    assert code != 0
    assert b"/nonexistent\\x1b]0;pwned\\x07" in err and b"\x1b" not in err, err
    assert b"\x1b" not in out


def test_exec_raw_writes_the_bytes_to_the_terminal_as_they_are():
    out, err, code = run_on_pty("exec", "--env", "local", "--raw", "--", HOSTILE)
    assert code == 0, err
    assert out == HOSTILE_RAW


def test_exec_into_a_pipe_writes_the_bytes_as_they_are():
    done = subprocess.run([sys.executable, "-m", "swe_sandbox", "exec", "--env", "local", "--", HOSTILE],
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == HOSTILE_RAW


def test_exec_json_on_a_terminal_is_json_as_before():
    out, err, code = run_on_pty("exec", "--env", "local", "--json", "--", HOSTILE)
    assert code == 0, err
    assert json.loads(out)["output"] == HOSTILE_RAW.decode()
    assert b"\x1b" not in out


def test_exec_help_documents_raw_and_is_itself_free_of_control_characters():
    from swe_sandbox.terminal import has_controls

    help_text = invoke("exec", "--help").stdout
    assert "--raw" in help_text and "\\x1b" in help_text
    assert not has_controls(help_text)
