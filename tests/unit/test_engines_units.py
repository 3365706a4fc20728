"""Unit tests of the docker/podman backends' pieces that need no engine (DESIGN.md §2, §5).

The exec fallback's script is run here on the host itself (``sh`` and busybox ``ash``), through
the same ``ExecFallbackChannel`` the containers use: a "host fallback" environment. Its orphan
sweep stays off (it is for containers only), so nothing outside a test's own commands is touched.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

import swe_sandbox
from swe_sandbox.config import DEFAULT_ENV, SANDBOX_PATH, EnvironmentConfig
from swe_sandbox.environments import environment_class
from swe_sandbox.environments.base import Environment
from swe_sandbox.environments.container.archive import extract_single, tar_directory, tar_path
from swe_sandbox.environments.container.engine import (
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    ContainerSpec,
    owner_alive,
    process_start_id,
)
from swe_sandbox.environments.container.environment import (
    DEFAULT_CAP_ADD,
    HOST_ROOT_FRAME,
    LAUNCHER,
    NOPYTHON_FRAME,
    describe,
)
from swe_sandbox.environments.fallback import (
    FALLBACK_SCRIPT,
    ExecFallbackChannel,
    fallback_argv,
    parse_status,
    popen_exec,
)
from swe_sandbox.errors import SandboxDied, SandboxError
from swe_sandbox.testing.kit import wait_until

# -- a host fallback: the exec fallback's script run by the host's sh --------------------------------


class HostFallback(Environment):
    """Each command: ``SHELL -c FALLBACK_SCRIPT`` on the host, through ExecFallbackChannel."""

    shell: list[str] = []

    def _open_channel(self):
        env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "HOME": "/tmp"}
        return ExecFallbackChannel(popen_exec(self.shell, env=env), env=self.sandbox_env())


SHELLS = {"sh": []}
if shutil.which("busybox"):
    SHELLS["busybox-ash"] = ["busybox"]


@pytest.fixture(params=list(SHELLS), ids=list(SHELLS))
def host_fallback(request):
    cls = type("HostFallback_" + request.param.replace("-", "_"), (HostFallback,), {"shell": SHELLS[request.param]})
    env = cls(EnvironmentConfig(backend="host-fallback", timeout=20))
    yield env
    env.close()


def run(env, command, **kwargs):
    return env.execute({"command": command}, **kwargs)


def test_fallback_ready_frame_and_mode(host_fallback):
    host_fallback.start()
    assert host_fallback.info["mode"] == "exec" and host_fallback.info["python"] is None


def test_fallback_merges_streams_in_order_inside(host_fallback):
    result = run(host_fallback, "echo one; echo two >&2; echo three; printf four >&2")
    assert result["output"] == "one\ntwo\nthree\nfour"
    assert result["returncode"] == 0 and result["exception_info"] == ""
    assert result["extra"]["output_bytes"] == len("one\ntwo\nthree\nfour")


@pytest.mark.parametrize(("command", "code"), [("exit 7", 7), ("false", 1), ("kill -9 $$", 137),
                                               ("kill -TERM $$", 143), ("no-such-cmd-swe", 127)])
def test_fallback_exit_status_and_signals(host_fallback, command, code):
    assert run(host_fallback, command)["returncode"] == code


def test_fallback_stdin_is_empty_and_env_is_the_sandbox_env(host_fallback, monkeypatch):
    monkeypatch.setenv("SWE_UNIT_SECRET", "must-not-appear")
    result = run(host_fallback, 'cat; read x || echo eof; echo "$PAGER ${SWE_UNIT_SECRET-unset}"')
    assert result["output"] == f"eof\n{DEFAULT_ENV['PAGER']} unset\n"


def test_fallback_missing_cwd_is_the_runners_message(host_fallback):
    result = run(host_fallback, "pwd", cwd="/no/such/dir-swe")
    assert result["returncode"] == 1
    assert result["exception_info"] == "swe-sandbox: working directory /no/such/dir-swe does not exist"
    assert result["output"] == result["exception_info"] + "\n"
    assert run(host_fallback, "pwd", cwd="/tmp")["output"] == "/tmp\n"


def test_fallback_command_arrives_intact(host_fallback):
    body = "".join(f"echo 'line {i} \"q\" $HOME ü'\n" for i in range(5000))  # ~170 kB, never argv
    command = "cat <<'EOF' | sha256sum\n" + body + "EOF"
    expected = subprocess.run(["sha256sum"], input=body.encode(), capture_output=True).stdout.decode()
    assert run(host_fallback, command)["output"] == expected


def test_fallback_timeout_kills_the_tree_and_keeps_partial_output(host_fallback):
    marker = f"{os.getpid()}{time.monotonic_ns() % 10**6}"
    started = time.monotonic()
    result = run(host_fallback, f"echo start; setsid sleep 7{marker} & sleep 8{marker}", timeout=1)
    elapsed = time.monotonic() - started
    assert result["returncode"] == -1 and result["extra"]["timed_out"] is True
    assert result["exception_info"] == "Command timed out after 1 seconds"
    assert result["output"] == "start\n"
    assert elapsed < 2.0
    def left() -> str:
        return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout

    assert wait_until(lambda: left() == "", within=1.0), f"left running: {left()}"
    assert run(host_fallback, "echo alive")["output"] == "alive\n"


def test_fallback_background_job_does_not_hold_the_call(host_fallback):
    marker = f"9{os.getpid()}{time.monotonic_ns() % 10**6}"
    started = time.monotonic()
    result = run(host_fallback, f"sleep {marker} & echo started")
    assert result["output"] == "started\n" and time.monotonic() - started < 1.5
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0, "the job should run on"
    subprocess.run(["pkill", "-f", marker])


SLOW_DISCARD_CAT = """#!/bin/sh
# the discarding reader (a FIFO in, /dev/null out) starting slowly, fd 3 on something else meanwhile
if [ -p "$1" ] && [ /dev/stdout -ef /dev/null ]; then exec 3</etc/hostname; sleep 0.5; exec 3<&-; fi
exec /bin/cat "$@"
"""


def test_fallback_keeps_a_flooding_job_alive_while_the_discarding_reader_starts(host_fallback, tmp_path):
    """The first reader goes only once the discarding reader holds the FIFO, not merely some fd 3:
    while the dynamic loader runs, that fd is libc (CI once saw a ``yes &`` die of SIGPIPE there).
    A slow ``cat`` with fd 3 on another file makes the race certain."""
    (tmp_path / "cat").write_text(SLOW_DISCARD_CAT)
    (tmp_path / "cat").chmod(0o755)
    marker = f"8{os.getpid()}{time.monotonic_ns() % 10**6}"
    try:
        host_fallback.config.env = {"PATH": f"{tmp_path}:{SANDBOX_PATH}"}
        result = run(host_fallback, f"echo go; yes {marker} &")
        assert result["output"].startswith("go\n"), result
        time.sleep(0.3)
        assert subprocess.run(["pgrep", "-f", f"yes {marker}"]).returncode == 0, "the flooding job should run on"
    finally:
        subprocess.run(["pkill", "-f", f"yes {marker}"])


def test_fallback_output_cap_uses_the_runners_buffer(host_fallback):
    host_fallback.config.max_output_bytes = 1024
    result = run(host_fallback, "yes abcdefgh | head -c 100000")
    assert result["extra"]["truncated"] is True and result["extra"]["output_bytes"] == 100000
    assert result["extra"]["dropped_bytes"] == 100000 - 1024
    assert "[swe-sandbox: output truncated, 98976 bytes dropped]" in result["output"]


def test_fallback_submission(host_fallback):
    with pytest.raises(swe_sandbox.Submitted) as info:
        run(host_fallback, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; printf 'a\\nb'")
    assert info.value.submission == "a\nb"


def test_fallback_lost_wrapper_is_sandbox_died(host_fallback):
    """No status line (the per-command process was killed): the sandbox is considered gone."""
    with pytest.raises(SandboxDied):
        run(host_fallback, "kill -9 $PPID; sleep 1")


def test_parse_status_ignores_other_stderr():
    status, rest = parse_status(b"noise\nswe-sandbox-status rc=3 timed_out=0\nmore\n")
    assert status == {"rc": "3", "timed_out": "0"} and rest == "noise\nmore"
    assert parse_status(b"Error: No such container: x\n") == (None, "Error: No such container: x")


def test_fallback_argv_is_shell_safe_for_ssh():
    """The argv can be joined into one command string (ssh) without re-quoting problems."""
    argv = fallback_argv("/a b", 1.5, "tok", {"X": "it's \"q\" $HOME"})
    assert argv[:3] == ["sh", "-c", FALLBACK_SCRIPT] and argv[4:7] == ["/a b", "150", "tok"]  # centiseconds
    assert "export X='it'\"'\"'s \"q\" $HOME'" in argv[9]
    assert argv[10] == "0", "the orphan sweep is off unless asked for"
    assert argv[11] == "", "no shared-clock deadline unless given"


# -- the container launcher (checked without running it: its guard ends with kill -9 -1) ------------


def test_launcher_writes_well_formed_frames():
    found = re.findall(r"printf '((?:\\[0-7]{3}){4})%s' '([^']*)'", LAUNCHER)
    for octal, frame in found:
        header = bytes(int(o, 8) for o in re.findall(r"\\([0-7]{3})", octal))
        assert header == struct.pack(">I", len(frame.encode()))
    assert [json.loads(frame) for _, frame in found] == [HOST_ROOT_FRAME, NOPYTHON_FRAME]


def test_launcher_makes_the_isolated_runner_pid_1():
    """exec'd first, before any guard or other process (only the user namespace check, builtins of
    the shell, comes before): the runner is PID 1 and the only holder of its pipes."""
    check, _, rest = LAUNCHER.partition("; done; fi; ")
    assert check.startswith('if [ "$4" = remap ]; then') and "&" not in check.replace("&&", "")
    assert rest.startswith('if [ -n "$1" ] && command -v "$1" >/dev/null 2>&1; then exec "$1" -I -S -c "$2"; fi;')
    assert 'sleep $((end - ${u%%.*})); done; kill -9 -1; kill -TERM 1)' in LAUNCHER


@pytest.mark.parametrize("shell", [["sh"], *([["busybox", "sh"]] if shutil.which("busybox") else [])],
                         ids=lambda s: "-".join(s))
def test_launcher_refuses_when_the_host_root_is_mapped(shell, tmp_path):
    """``userns: remap`` and the host's uid or gid 0 in the container's maps (no user namespace),
    or maps that cannot be read: the host-root frame, and nothing started."""
    started, python, maps = tmp_path / "started", tmp_path / "python", tmp_path / "maps"
    python.write_text(f"#!/bin/sh\ntouch {started}\n")
    python.chmod(0o755)
    maps.mkdir()
    frame = json.dumps(HOST_ROOT_FRAME).encode()

    def launch(map_dir: str | None, userns: str = "remap") -> subprocess.CompletedProcess:
        started.unlink(missing_ok=True)
        launcher = LAUNCHER if map_dir is None else LAUNCHER.replace("/proc/self/$m", f"{map_dir}/$m")
        return subprocess.run([*shell, "-c", launcher, "swe-sandbox", str(python), "", "5", userns],
                              capture_output=True, timeout=10)

    for name in ("uid_map", "gid_map"):  # no user namespace
        (maps / name).write_text("         0          0 4294967295\n")
    for map_dir in (str(maps), f"{tmp_path}/missing"):  # the host's own maps; none at all
        out = launch(map_dir)
        assert out.stdout == struct.pack(">I", len(frame)) + frame and out.returncode == 1, out
        assert not started.exists()
    for name in ("uid_map", "gid_map"):  # a remapped container's maps: the runner starts
        (maps / name).write_text("         0 1000000000      65536\n")
    out = launch(str(maps))
    assert out.returncode == 0 and started.exists(), out
    (maps / "gid_map").write_text("         0 1000000000      65536\n     65536          0          1\n")
    out = launch(str(maps))
    assert out.stdout.endswith(frame) and not started.exists(), "the host's gid 0 is mapped in: refused"
    out = launch(None, userns="host")
    assert out.returncode == 0 and started.exists(), "userns: host opts out of the check"


# -- engine option mapping ----------------------------------------------------------------------------


def spec(**overrides) -> ContainerSpec:
    values = dict(image="swe-sandbox/base", command=["sh", "-c", "x"], name="swe-sandbox-t", labels={"a": "b"},
                  environment={"K": "v"}, working_dir="/workspace", hostname="swe-sandbox", init=True,
                  network="none", cap_add=list(DEFAULT_CAP_ADD), cap_drop=["ALL"], no_new_privileges=True,
                  pids_limit=100, memory="512m", cpus=1.5, user="", read_only=False, tmpfs={},
                  workspace_volume=False)
    values.update(overrides)
    return ContainerSpec(**values)


def test_docker_create_kwargs_are_hardened():
    pytest.importorskip("docker")
    from swe_sandbox.environments.container.docker import DockerEngine

    kw = DockerEngine("unix:///nonexistent.sock").create_kwargs(spec())
    assert kw["network_mode"] == "none" and kw["cap_drop"] == ["ALL"] and kw["cap_add"] == DEFAULT_CAP_ADD
    assert kw["security_opt"] == ["no-new-privileges"] and kw["init"] is True
    assert kw["pids_limit"] == 100 and kw["mem_limit"] == kw["memswap_limit"] == "512m"
    assert kw["nano_cpus"] == 1_500_000_000 and kw["auto_remove"] is True
    assert kw["stdin_open"] is True and kw["detach"] is False and kw["log_config"]["Type"] == "none"
    assert "user" not in kw and "mounts" not in kw
    assert "userns_mode" not in kw, "remapping is the daemon's: a container only opts out"
    assert DockerEngine("unix:///nonexistent.sock").create_kwargs(spec(userns="host"))["userns_mode"] == "host"


def test_docker_read_only_gets_writable_tmp_and_a_workspace_volume():
    pytest.importorskip("docker")
    from swe_sandbox.environments.container.docker import DockerEngine
    from swe_sandbox.environments.container.environment import READ_ONLY_TMPFS

    kw = DockerEngine("unix:///nonexistent.sock").create_kwargs(spec(read_only=True, workspace_volume=True,
                                                                      user="1000:1000", tmpfs=READ_ONLY_TMPFS))
    assert kw["read_only"] is True and set(kw["tmpfs"]) == {"/tmp", "/var/tmp", "/run"}
    assert kw["mounts"][0]["Target"] == "/workspace" and kw["mounts"][0]["Type"] == "volume"
    assert kw["user"] == "1000:1000"


def test_podman_payload_is_hardened_and_auto_removes():
    pytest.importorskip("podman")
    from podman.domain.containers_create import CreateMixin

    from swe_sandbox.environments.container.podman import PodmanEngine

    engine = PodmanEngine("unix:///nonexistent.sock")
    kw = engine.create_kwargs(spec(read_only=True, workspace_volume=True))
    CreateMixin._render_payload({"image": "x", **kw})  # raises on keys podman-py does not know
    payload = engine.create_payload(spec(read_only=True, workspace_volume=True))
    assert payload["netns"] == {"nsmode": "none"} and payload["cap_drop"] == ["ALL"]
    assert payload["no_new_privileges"] is True and payload["init"] is True
    assert payload["resource_limits"]["pids"] == {"limit": 100}
    assert payload["resource_limits"]["memory"]["limit"] == 512 << 20
    assert payload["resource_limits"]["cpu"]["quota"] == 150_000 and payload["resource_limits"]["cpu"]["period"] == 100_000
    assert payload["read_only_filesystem"] is True and payload["stdin"] is True
    assert payload["log_configuration"]["driver"] == "none"
    assert payload["remove"] is True and payload["volumes"] == [{"Name": "", "Dest": "/workspace"}]
    assert not payload.get("mounts"), "no tmpfs at the workspace: Podman cannot copy into it under a user namespace"
    assert payload["userns"] == {"nsmode": "auto", "value": "size=65536"}
    assert payload["idmappings"] == {"AutoUserNs": True, "AutoUserNsOpts": {"Size": 65536}}


def test_podman_user_namespace_fits_the_user_and_opts_out():
    pytest.importorskip("podman")
    from podman.domain.containers_create import CreateMixin

    from swe_sandbox.environments.container.podman import PodmanEngine

    engine = PodmanEngine("unix:///nonexistent.sock")
    payload = CreateMixin._render_payload({"image": "x", **engine.create_kwargs(spec(user="70000:1000"))})
    assert payload["userns"]["value"] == "size=70001" and payload["idmappings"]["AutoUserNsOpts"]["Size"] == 70001
    payload = CreateMixin._render_payload({"image": "x", **engine.create_kwargs(spec(userns="host"))})
    assert payload["userns"] == {"nsmode": "host"} and not payload.get("idmappings")


def test_trap_podman_py_create_drops_remove():
    """podman-py's create() silently drops ``remove`` (so PodmanEngine.create posts it itself)."""
    pytest.importorskip("podman")
    from podman.domain.containers_create import CreateMixin

    assert CreateMixin._render_payload({"image": "x", "remove": True}).get("remove") is None


def test_trap_podman_py_exec_run_splits_strings_and_ignores_socket():
    """podman-py's exec_run shlex-splits a string command and has no socket: the backends never use it."""
    pytest.importorskip("podman")
    from podman.domain.containers import Container

    sent = {}

    class FakeResponse:
        status_code = 200
        ok = True

        def raise_for_status(self, **_):
            pass

        def json(self):
            return {"Id": "exec-id", "ExitCode": 0}

        text = ""
        content = b""

    class FakeClient:
        def post(self, path, **kwargs):
            if path.endswith("/exec"):
                sent["create"] = json.loads(kwargs["data"])
            return FakeResponse()

        def get(self, path, **kwargs):
            return FakeResponse()

    container = Container(attrs={"Id": "c"}, client=FakeClient())
    try:
        container.exec_run("echo 'a  b'\necho c", socket=True)
    except Exception:  # noqa: BLE001 - the fake answers too little for the rest of exec_run
        pass
    assert sent["create"]["Cmd"] == ["echo", "a  b", "echo", "c"], "no longer split? re-check the backends' choice"
    sources = "".join(p.read_text() for p in Path(swe_sandbox.__file__).parent.glob("environments/*.py"))
    assert "exec_run(" not in sources and "exec_start(" not in sources


def test_host_network_needs_the_host_user_namespace():
    """Neither engine gives a remapped container the host's network namespace: said at config time."""
    with pytest.raises(swe_sandbox.ConfigError, match="environment.userns: .*network: host"):
        swe_sandbox.get_environment("podman", network="host")
    env = swe_sandbox.get_environment("docker", network="host", userns="host")
    assert env.config.userns == "host" and "IS the host's root" in env.isolation
    assert swe_sandbox.get_environment("docker").config.userns == "remap"


# -- labels, owners, gc --------------------------------------------------------------------------------


def test_owner_alive_tells_a_reused_pid_apart():
    me = {LABEL_OWNER_PID: str(os.getpid()), LABEL_OWNER_START: process_start_id(os.getpid())}
    assert owner_alive(me)
    assert not owner_alive({**me, LABEL_OWNER_START: "other-boot:1"}), "same pid, other process"
    child = subprocess.Popen(["true"])
    child.wait()
    assert not owner_alive({LABEL_OWNER_PID: str(child.pid), LABEL_OWNER_START: "x"})
    assert not owner_alive({LABEL_OWNER_PID: "not-a-pid"})


def test_describe_container_states():
    assert describe(None) == "the container no longer exists"
    assert describe({"State": {"Running": True}}) == "the container is still running"
    text = describe({"State": {"Running": False, "ExitCode": 137, "OOMKilled": True}})
    assert "exit code 137" in text and "memory" in text


def test_backends_registered_and_presets_validate():
    for name in ("docker", "podman"):
        cls = environment_class(name)
        env = swe_sandbox.get_environment(name, overrides=["environment.memory=1g", "environment.runner=exec"])
        assert isinstance(env, cls) and env.config.memory == "1g" and env.config.runner == "exec"
        assert env.config.network == "none" and env.config.cap_drop == ["ALL"] and env.config.no_new_privileges
        env.close()  # never started: nothing to remove, no engine needed
    with pytest.raises(swe_sandbox.ConfigError):
        swe_sandbox.get_environment("docker", runner="sometimes")


# -- archives -----------------------------------------------------------------------------------------


def test_workspace_tar_is_owned_by_the_container_user(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f ü.txt").write_text("x")
    os.symlink("d/f ü.txt", tmp_path / "link")
    with tarfile.open(fileobj=tar_directory(tmp_path, (1000, 1001))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"d", "d/f ü.txt", "link"}
    assert all((m.uid, m.gid, m.uname) == (1000, 1001, "") for m in members.values())
    assert members["link"].issym() and members["link"].linkname == "d/f ü.txt"


def _tar(entries) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE
                info.linkname = data
                tar.addfile(info)
    buf.seek(0)
    return buf


def test_download_extracts_file_and_tree(tmp_path):
    extract_single(_tar([("f.txt", "file", b"hello")]), "f.txt", tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_bytes() == b"hello"
    extract_single(_tar([("d", "dir", None), ("d/a", "file", b"1")]), "d", tmp_path / "tree")
    assert (tmp_path / "tree" / "a").read_bytes() == b"1"


@pytest.mark.parametrize("entries", [
    [("../escape.txt", "file", b"x")],
    [("d", "dir", None), ("d/evil", "symlink", "/etc/passwd"), ("d/evil", "file", b"overwrite")],
], ids=["dot-dot", "absolute-symlink"])
def test_download_refuses_archives_that_leave_the_target(tmp_path, entries):
    """The archive comes from an untrusted sandbox: nothing may land outside the target."""
    with pytest.raises(SandboxError, match="download: "):
        extract_single(_tar(entries), "d", tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()
    assert Path("/etc/passwd").read_bytes() != b"overwrite"


def test_download_keeps_symlinks_pointing_anywhere_as_symlinks(tmp_path):
    """A venv's ``bin/python -> /usr/bin/python3`` comes back as that link (local and ssh keep it too);
    no entry is written through a link: a file below one is refused."""
    entries = [("d", "dir", None), ("d/py", "symlink", "/usr/bin/python3"), ("d/up", "symlink", "../../x"),
               ("d/rel", "symlink", "f"), ("d/f", "file", b"1")]
    extract_single(_tar(entries), "d", tmp_path / "out")
    links = {p.name: os.readlink(p) for p in (tmp_path / "out").iterdir() if p.is_symlink()}
    assert links == {"py": "/usr/bin/python3", "up": "../../x", "rel": "f"}
    assert (tmp_path / "out" / "rel").read_bytes() == b"1"
    through = [("d", "dir", None), ("d/etc", "symlink", str(tmp_path / "host")), ("d/etc/x", "file", b"x")]
    (tmp_path / "host").mkdir()
    with pytest.raises(SandboxError, match="twice"):
        extract_single(_tar(through), "d", tmp_path / "out2")
    assert list((tmp_path / "host").iterdir()) == []


def test_tar_path_names_the_entry(tmp_path):
    (tmp_path / "src.txt").write_text("data")
    with tarfile.open(fileobj=tar_path(tmp_path / "src.txt", "renamed.txt", (0, 0))) as tar:
        assert tar.getnames() == ["renamed.txt"]


@pytest.mark.parametrize(("field", "value"), [("memory", "lots"), ("memory", "10x"), ("cap_add", ["NET_RAWW"]),
                                              ("cap_drop", ["all", "BOGUS"])])
def test_bad_limits_are_config_errors_naming_the_field(field, value):
    with pytest.raises(swe_sandbox.ConfigError, match=f"environment.{field}"):
        swe_sandbox.get_environment("docker", **{field: value})


def test_good_limits_pass_validation():
    env = swe_sandbox.get_environment("docker", memory="512M", cap_add=["cap_net_raw", "KILL"], cap_drop=["ALL"])
    assert env.config.memory == "512M"
