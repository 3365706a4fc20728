"""Our backends as an inspect_ai sandbox provider: ``sandbox="swe_sandbox"`` in an inspect task.

Installed with ``pip install 'swe-sandbox[inspect]'``; inspect finds it through the ``inspect_ai``
entry point (pyproject.toml), which imports this module (``import swe_sandbox`` never does). The
sandbox config is a preset name or one of our YAML files: ``("swe_sandbox", "bwrap.yaml")``, or a
path to a YAML file of your own; none means the ``local`` preset. Every sample gets a sandbox of its
own (``swe_sandbox.aio``), removed at the sample's end; a host directory the config names for its
commands (bwrap's ``workspace``, local's ``cwd``) is copied for each sample, as samples run at once.

Commands: inspect's ``cmd`` list becomes one bash string (``shlex.join``), so ``cmd[0]`` resolves
through the sandbox's PATH. Files are copied through a staging file in the sample's working directory
(our ``upload``/``download``: bwrap reaches nothing outside its workspace), after a shell check
that gives inspect's errors. ``exec_remote`` streams through ``env.stream`` (no injected tools).
Tested against inspect_ai 0.3.285 (tests/inspect).
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import shlex
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Literal, overload

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from inspect_ai.util import (
    ExecCompleted,
    ExecRemoteAwaitableOptions,
    ExecRemoteProcess,
    ExecRemoteStreamingOptions,
    ExecResult,
    ExecStderr,
    ExecStdout,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
)

from swe_sandbox import aio, capabilities, environments
from swe_sandbox.backends import backend_names
from swe_sandbox.environments.snapshot import copy_static
from swe_sandbox.errors import SandboxDied, Submitted

DEFAULT_PRESET = "local"
#: Backends whose commands work in a host directory named by this config field (bwrap binds its
#: ``workspace``; local runs in its ``cwd``): each sample gets a copy of its own (none given: an empty
#: one), as samples run at once and must not see each other's files.
HOST_DIRECTORY_FIELDS = {"bwrap": "workspace", "local": "cwd"}
#: Prefix of the staging files read_file/write_file leave for a moment in the working directory.
STAGING_PREFIX = ".swe-sandbox-inspect-"
_READ = ('f={f}; s={s}\nif [ -d "$f" ]; then echo "$f: Is a directory" >&2; exit 21; fi\n'
         'cat -- "$f" > "$s" || {{ rm -f -- "$s"; exit 1; }}\nwc -c < "$s"')
_WRITE = ('f={f}; s={s}\nmkdir -p -- "$(dirname -- "$f")"\nif [ -d "$f" ]; then rm -f -- "$s"; '
          'echo "$f: Is a directory" >&2; exit 21; fi\ncat -- "$s" > "$f"; rc=$?; rm -f -- "$s"; exit $rc')


def _private_copy(source: str | None, parent: Path) -> str:
    """``parent/work``: a copy of the directory ``source`` (its contents, mode and owner; links as
    links, reflinks where the filesystem has them), or an empty directory when ``source`` is None.

    Raises:
        OSError: the copy failed (``cp``'s message).
    """
    os.chmod(parent, 0o711)  # searchable by the sandbox's unprivileged uid, not listable
    private = parent / "work"
    private.mkdir()
    if source is not None:
        shutil.copystat(source, private)
        st = os.stat(source)
        os.chown(private, st.st_uid, st.st_gid)
        copy_static(Path(source), private, None)
    return str(private)


@sandboxenv(name="swe_sandbox")
class SweSandboxEnvironment(SandboxEnvironment):
    """One swe-sandbox sandbox (any backend) behind inspect's ``SandboxEnvironment`` contract."""

    def __init__(self, env: aio.AsyncEnvironment, missing: dict[str, str], host_dir: str | None = None):
        """Wrap a started ``env``; ``missing`` is what its backend lacks (``capabilities``);
        ``host_dir``: a host directory made for it, removed with it."""
        super().__init__()
        self.env, self.missing, self.host_dir = env, missing, host_dir
        self.cwd = str(env.info.get("cwd") or "/")

    @classmethod
    def default_concurrency(cls) -> int | None:
        """Two sandboxes per CPU, as inspect's docker provider."""
        return 2 * (os.cpu_count() or 1)

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        """Start the sample's sandbox from ``config`` (a preset name, ``NAME.yaml`` or a YAML path).

        Raises:
            ConfigError: unknown preset or invalid field. SandboxStartError: it did not come up.
            RuntimeError: the backend cannot keep stdout and stderr apart (``runner: exec``).
        """
        fields: dict[str, Any] = {"timeout": None,
                                  "max_output_bytes": min(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE, 32 << 20)}
        source, host_dir = _config_source(config), None
        env = await aio.get_environment(source, **fields)
        field = HOST_DIRECTORY_FIELDS.get(env.config.backend)
        # a directory of the sample's own, never the eval's or another sample's (bwrap without a
        # workspace makes a private one itself)
        if field is not None and (getattr(env.config, field) is not None or env.config.backend == "local"):
            host_dir = tempfile.mkdtemp(prefix="swe-sandbox-inspect-")
            private = await anyio.to_thread.run_sync(_private_copy, getattr(env.config, field), Path(host_dir))
            env = await aio.get_environment(source, **{field: private}, **fields)
        try:
            missing = capabilities.missing_capabilities(type(env.sync), env.config)
            if capabilities.SEPARATE_STDERR in missing:
                raise RuntimeError(f"swe_sandbox: {source}: {missing[capabilities.SEPARATE_STDERR]}")
            await env.start()
        except BaseException:
            await env.close()
            if host_dir:
                shutil.rmtree(host_dir, ignore_errors=True)
            raise
        return {"default": cls(env, missing, host_dir)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        """Close (remove) the sample's sandboxes."""
        for sandbox in environments.values():
            ours = sandbox.as_type(SweSandboxEnvironment)
            await ours.env.close()
            if ours.host_dir:
                shutil.rmtree(ours.host_dir, ignore_errors=True)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """``inspect sandbox cleanup swe_sandbox``: ``swe-sandbox gc`` of every backend (``id`` unused:
        our leftovers are found by their dead owner process, not by an id)."""
        for name in backend_names():
            cls_ = environments.environment_class(name)
            if cls_.unavailable_reason() is None:
                await anyio.to_thread.run_sync(cls_.gc)

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        """Run ``cmd`` (see ``SandboxEnvironment.exec``); stdout and stderr apart.

        Raises:
            TimeoutError: ``timeout`` seconds passed (the command's tree was killed).
            PermissionError: ``cmd[0]`` is not executable.
            SandboxUserUnsupportedError: ``user`` given to a backend without ``run_as_user``, or the
                sandbox may not switch users.
            OutputLimitExceededError: stdout or stderr passed inspect's exec output limit.
            SandboxUnavailableError: the sandbox died or vanished.
        """
        if user is not None and capabilities.RUN_AS_USER in self.missing:
            raise SandboxUserUnsupportedError(self.missing[capabilities.RUN_AS_USER])
        result = await self._run(shlex.join(cmd), cwd=self._path(cwd or "."), timeout=timeout,
                                 stdin=input, env=env, user=user)
        extra = result["extra"]
        if extra.get("timed_out"):
            error = TimeoutError(f"Command timed out after {timeout} seconds")
            error.truncated_output = result["output"] + result["stderr"]  # type: ignore[attr-defined]
            raise error
        if extra.get("user_error") == "not_permitted":
            raise SandboxUserUnsupportedError(result["exception_info"])
        if result["returncode"] == 126 and not result["output"] and cmd and \
                result["stderr"].strip().endswith(f"{cmd[0]}: Permission denied"):
            raise PermissionError(f"Permission denied executing command: {result['stderr'].strip()}")
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE  # now: inspect may lower it for one call
        if extra.get("truncated") or extra.get("stderr_dropped_bytes") or \
                max(extra.get("output_bytes", 0), extra.get("stderr_bytes", 0)) > limit:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, result["output"][-limit:])
        return ExecResult(result["returncode"] == 0, result["returncode"], result["output"], result["stderr"])

    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write ``file`` (parents made). Raises: IsADirectoryError, PermissionError, RuntimeError."""
        path, staging = self._path(file), self._staging()
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        with tempfile.TemporaryDirectory() as host:
            Path(host, "f").write_bytes(data)
            await self.env.upload(Path(host, "f"), staging)
        result = await self._run(_WRITE.format(f=shlex.quote(path), s=shlex.quote(staging)))
        self._raise_for_file(result, file)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Read ``file``: str (UTF-8, newlines kept) or bytes.

        Raises:
            FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError: as inspect's.
            OutputLimitExceededError: the file is larger than inspect's read limit.
        """
        staging = self._staging()
        result = await self._run(_READ.format(f=shlex.quote(self._path(file)), s=shlex.quote(staging)))
        self._raise_for_file(result, file)
        try:
            if int(result["output"].split()[-1]) > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
                raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None)
            with tempfile.TemporaryDirectory() as host:
                await self.env.download(staging, Path(host, "f"))
                data = Path(host, "f").read_bytes()
        finally:
            await self._run(f"rm -f -- {shlex.quote(staging)}")
        return data.decode("utf-8") if text else data

    async def exec_remote(self, cmd: list[str],  # type: ignore[override]
                          options: ExecRemoteStreamingOptions | ExecRemoteAwaitableOptions | None = None, *,
                          stream: bool = True) -> ExecRemoteProcess | ExecResult[str]:
        """Our native streaming (``env.stream``) instead of inspect's injected tools; ``stdin_open``
        (stdin written while the command runs) falls back to inspect's own implementation."""
        opts = options or ExecRemoteStreamingOptions()
        if not stream:
            timeout = getattr(opts, "timeout", None)
            return await self.exec(cmd, opts.input, opts.cwd, opts.env, opts.user,
                                   None if timeout is None else int(timeout))
        if isinstance(opts, ExecRemoteStreamingOptions) and opts.stdin_open:
            return await super().exec_remote(cmd, opts, stream=True)
        if opts.user is not None and capabilities.RUN_AS_USER in self.missing:
            raise SandboxUserUnsupportedError(self.missing[capabilities.RUN_AS_USER])
        return await _StreamedProcess.start(self, cmd, opts)

    # -- helpers ---------------------------------------------------------------------------------
    async def _run(self, command: str, **options: Any) -> dict[str, Any]:
        """``execute`` with stderr apart; a command printing the submission sentinel is no submission here.

        Raises:
            SandboxUnavailableError: the sandbox died or vanished (``SandboxDied``).
        """
        try:
            return await self.env.execute({"command": command}, options.pop("cwd", self.cwd),
                                          separate_stderr=True, **options)
        except Submitted as submitted:
            return submitted.result
        except SandboxDied as died:
            raise SandboxUnavailableError(f"The sandbox is not running and cannot execute: {died}") from died

    def _path(self, file: str) -> str:
        """``file`` in the sandbox: relative ones to the sample's working directory."""
        return posixpath.normpath(posixpath.join(self.cwd, file))

    def _staging(self) -> str:
        return posixpath.join(self.cwd, STAGING_PREFIX + uuid.uuid4().hex)

    @staticmethod
    def _raise_for_file(result: dict[str, Any], file: str) -> None:
        """Inspect's error for a failed read/write script (named by its stderr), else nothing."""
        if result["returncode"] == 0:
            return
        message = result["stderr"].lower()
        for phrase, error in (("is a directory", IsADirectoryError(errno.EISDIR, "Is a directory.", file)),
                              ("no such file", FileNotFoundError(errno.ENOENT, "No such file or directory.", file)),
                              ("permission denied", PermissionError(errno.EACCES, "Permission denied.", file))):
            if phrase in message:
                raise error
        raise RuntimeError(f"swe_sandbox: {file}: {result['stderr'] or result['exception_info']}")


class _StreamedProcess(ExecRemoteProcess):
    """``exec_remote``'s process handle over ``AsyncEnvironment.stream``: events from a task that
    pumps the stream into a memory channel; ``kill()`` cancels that task (the command's tree dies)."""

    _send: MemoryObjectSendStream[Any]
    _receive: MemoryObjectReceiveStream[Any]
    _task: asyncio.Future[None]

    @classmethod
    async def start(cls, sandbox: SweSandboxEnvironment, cmd: list[str],
                    opts: ExecRemoteStreamingOptions | ExecRemoteAwaitableOptions) -> _StreamedProcess:
        proc = cls(sandbox, cmd, opts, sandbox.default_polling_interval())
        proc._send, proc._receive = anyio.create_memory_object_stream[Any](1024)
        proc._pid = 0  # one runner runs every command: no pid of its own to give
        proc._task = asyncio.ensure_future(proc._pump(sandbox, opts))
        return proc

    async def _pump(self, sandbox: SweSandboxEnvironment, opts: Any) -> None:
        kinds = {"output": ExecStdout, "stderr": ExecStderr}
        async with self._send:
            try:
                async for event in sandbox.env.stream({"command": shlex.join(self._cmd)},
                                                      sandbox._path(opts.cwd or "."), stdin=opts.input, env=opts.env,
                                                      user=opts.user, separate_stderr=True):
                    if event.text:
                        await self._send.send(kinds[event.stream](data=event.text))
                    if event.result is not None:
                        await self._send.send(ExecCompleted(exit_code=event.result["returncode"]))
            except Submitted as submitted:
                await self._send.send(ExecCompleted(exit_code=submitted.result.get("returncode", 0)))

    async def __anext__(self) -> Any:
        try:
            event = await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        except asyncio.CancelledError:  # the caller's task was cancelled: so is the command
            await self.kill()
            raise
        self._completed = isinstance(event, ExecCompleted)
        return event

    async def kill(self) -> None:
        """End the command (its whole tree); the iteration then stops."""
        self._killed = True
        self._task.cancel()

    async def write_stdin(self, data: str | bytes) -> None:
        raise RuntimeError("write_stdin() requires stdin_open=True in ExecRemoteStreamingOptions")

    async def close_stdin(self) -> None:
        raise RuntimeError("close_stdin() requires stdin_open=True in ExecRemoteStreamingOptions")


def _config_source(config: SandboxEnvironmentConfigType | None) -> str:
    """The ``get_environment`` config of inspect's sandbox config: a YAML path, else a preset name."""
    if config is None:
        return DEFAULT_PRESET
    if not isinstance(config, str):
        raise TypeError(f"swe_sandbox: the sandbox config is a preset name or YAML file, not {type(config).__name__}")
    return config if Path(config).is_file() else config.removesuffix(".yaml").removesuffix(".yml")
