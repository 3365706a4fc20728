"""One ``docker run -i`` for a ``ContainerSpec``: create, start and attach in one CLI process.

A one-shot ``swe-sandbox exec --env docker`` spent most of its time importing the docker SDK
(requests, and paramiko for its ssh transport: ~0.5 s on this host with chardet 7 and invoke 3
installed) before it could create anything. Where the CLI can say everything a spec asks, the
container backends start through ``CLI run --interactive`` instead, with flags mapped here from the
same ``ContainerSpec`` the SDK path maps in ``DockerEngine.create_kwargs`` (``tests/containers``
compares the two containers' inspect data); the SDK is imported later only if something needs it
(files, snapshots, a removal that waits).

Environment values never go on the CLI's command line, where any local user could read them in
``/proc``: each is passed as ``--env NAME`` with the value in the CLI process's own environment.
The names the CLI itself reads (``engine.CLI_ENV_VARS``: ``PATH``, ``HOME``, ...) and those that
would change how the CLI process runs (``CLI_PROCESS_VARS``: ``LD_PRELOAD``, ``GODEBUG``, proxies,
...) go on the command line as ``NAME=VALUE`` (the CLI keeps its own environment); a ``DOCKER_*`` or
``CONTAINER*`` name in the sandbox's environment, a mount path the ``--mount`` syntax cannot hold,
or engine-specific ``create_args`` make ``docker_run_argv`` return None: the SDK path then creates.
"""

from __future__ import annotations

from swe_sandbox.environments.container.engine import CLI_ENV_PREFIXES, CLI_ENV_VARS, ContainerSpec

#: Characters a ``--mount`` field cannot hold unquoted (its value is comma-separated key=value).
MOUNT_UNSAFE = frozenset(',="\n')
#: Variables that would change how the CLI process itself runs (its loader, libc, Go runtime,
#: resolver, TLS, proxy) were they in its environment: the sandbox's go on the command line instead.
CLI_PROCESS_VARS = frozenset((
    "GLIBC_TUNABLES", "GCONV_PATH", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "TZ", "TZDIR", "SSL_CERT_FILE",
    "SSL_CERT_DIR", "GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK", "GORACE", "HTTP_PROXY",
    "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"))
#: Prefixes of more such variables (the dynamic loader's, glibc malloc's).
CLI_PROCESS_PREFIXES = ("LD_", "MALLOC_")


def docker_run_argv(cli: list[str], spec: ContainerSpec, cidfile: str) -> tuple[list[str], dict[str, str]] | None:
    """``(argv, values)`` of ``CLI run`` for ``spec``, or None when the CLI cannot say all of it.

    Args:
        cli: the CLI and its engine option (``Engine.cli_argv``).
        spec: what to create; its image must be present (``--pull never``: pulls are the caller's).
        cidfile: a path that does not exist yet, where the CLI writes the container's id once created.

    Returns:
        ``argv``, and ``values``: the environment variables to add to the CLI process's own
        (each ``--env NAME`` takes its value from there), or None.
    """
    if spec.extra or any(name.startswith(CLI_ENV_PREFIXES) for name in spec.environment):
        return None
    paths = [*spec.binds.items(), *([("", spec.working_dir)] if spec.workspace_volume else [])]
    if any(MOUNT_UNSAFE & set(src + dst) for src, dst in paths):
        return None
    mounts = [f"type=volume,dst={spec.working_dir}"] if spec.workspace_volume else []
    mounts += [f"type=bind,src={src},dst={dst},readonly" for src, dst in spec.binds.items()]
    argv = [*cli, "run", "--interactive", "--rm", "--pull", "never", "--log-driver", "none", "--cidfile", cidfile,
            "--name", spec.name, "--workdir", spec.working_dir, "--hostname", spec.hostname, "--network", spec.network]
    values: dict[str, str] = {}
    for name, value in spec.environment.items():
        if name in CLI_ENV_VARS or name in CLI_PROCESS_VARS or name.startswith(CLI_PROCESS_PREFIXES):
            argv += ["--env", f"{name}={value}"]
        else:
            argv += ["--env", name]
            values[name] = value
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    for mount in mounts:
        argv += ["--mount", mount]
    for path, options in spec.tmpfs.items():
        argv += ["--tmpfs", f"{path}:{options}" if options else path]
    argv += _limits(spec)
    return [*argv, spec.image, *spec.command], values


def _limits(spec: ContainerSpec) -> list[str]:
    """The flags for privileges, limits, user and user namespace (``create_kwargs``' same fields)."""
    flags = [f"--cap-add={name}" for name in spec.cap_add] + [f"--cap-drop={name}" for name in spec.cap_drop]
    if spec.no_new_privileges:
        flags += ["--security-opt", "no-new-privileges"]
    flags.append("--init" if spec.init else "--init=false")  # explicit: a daemon may default to one
    if spec.read_only:
        flags.append("--read-only")
    if spec.pids_limit is not None:
        flags.append(f"--pids-limit={spec.pids_limit}")
    if spec.memory:
        flags += [f"--memory={spec.memory}", f"--memory-swap={spec.memory}"]
    if spec.cpus:
        flags.append(f"--cpus={spec.cpus}")
    if spec.user:
        flags.append(f"--user={spec.user}")
    if spec.userns == "host":
        flags.append("--userns=host")
    return flags
