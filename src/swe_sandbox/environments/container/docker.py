"""Backend ``docker``: one container per environment, the runner its main process, created,
started and attached by one ``docker run -i`` (``cli_run``: no SDK on the start path), or through
the docker SDK then one ``docker start -ai`` where the CLI cannot say the spec or its run failed
(see ``swe_sandbox.environments.container.environment`` for everything both engines share).

Only what is Docker's own lives here: client construction (``api_timeout`` instead of the SDK's
60 s default socket timeout; API version negotiated, so an older daemon works) and how the
neutral ``ContainerSpec`` maps onto ``containers.create`` (``security_opt``, ``nano_cpus``,
an anonymous volume for the workspace when the root is read-only, since Docker cannot copy an
archive into a tmpfs or a read-only root).

User namespaces are the daemon's: with ``--userns-remap=default`` every container's uids are
shifted onto the ``dockremap`` ranges of /etc/subuid and /etc/subgid (images then live in the
daemon's remapped storage, imported again); a container can only opt out (``userns_mode: host``,
for ``userns: host``). Whether the daemon remaps is checked inside each container by the launcher
(``ContainerEnvironment``), at no extra API call.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from swe_sandbox.environments.container.cli_run import docker_run_argv
from swe_sandbox.environments.container.engine import (
    CHANGE_KINDS,
    LABEL_MANAGED,
    LABEL_SNAPSHOT,
    ContainerSpec,
    Engine,
    label_changes,
)
from swe_sandbox.environments.container.environment import ContainerConfig, ContainerEnvironment
from swe_sandbox.environments.container.image_ref import parse_image


class DockerConfig(ContainerConfig):
    """Config of the ``docker`` backend (fields: ``ContainerConfig``)."""

    backend: str = "docker"


class DockerEngine(Engine):
    name = "docker"
    cli_name = "docker"
    sdk_package = "docker"
    userns_help = ("The Docker daemon does not remap user namespaces: start dockerd with --userns-remap=default "
                   "(or \"userns-remap\": \"default\" in /etc/docker/daemon.json, then restart it), as "
                   "scripts/setup-engines.sh does for the dockerd it starts, and import the images again "
                   "(swe-sandbox image build), since a remapped daemon keeps them apart.")

    @classmethod
    def default_url(cls) -> str:
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

    def __init__(self, url: str = "", timeout: float = 600.0, cli: str = ""):
        self.from_env = not url  # DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH as the CLI reads them
        super().__init__(url, timeout, cli)

    def _connect(self, timeout: float):
        import docker

        # timeout: the SDK's default (60 s) would cut long archive transfers; version "auto"
        # negotiates with older daemons (Debian's docker.io speaks API 1.41).
        if self.from_env:
            return docker.from_env(timeout=timeout, version="auto")
        return docker.DockerClient(base_url=self.url, timeout=timeout, version="auto")

    def make_client(self):
        return self._connect(self.timeout)

    def ping(self) -> None:
        client = self._connect(5)
        try:
            client.ping()
        finally:
            client.close()

    def sdk_errors(self) -> tuple[type[BaseException], ...]:
        import docker.errors

        return (docker.errors.DockerException, OSError)

    def is_not_found(self, exc: BaseException) -> bool:
        import docker.errors

        return isinstance(exc, docker.errors.NotFound)

    def has_image(self, image: str) -> bool:
        import docker.errors

        try:
            self.client.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        return True

    def pull_events(self, image: str, *, insecure: bool = False) -> Iterator[dict[str, Any]]:
        # insecure is the daemon's to decide (--insecure-registry; 127.0.0.0/8 always is)
        ref = parse_image(image)
        return self.client.api.pull(ref.name, tag=ref.digest or ref.tag, stream=True, decode=True)

    def create_kwargs(self, spec: ContainerSpec) -> dict[str, Any]:
        import docker.types

        kwargs: dict[str, Any] = dict(
            command=spec.command, name=spec.name, labels=spec.labels, environment=spec.environment,
            working_dir=spec.working_dir, hostname=spec.hostname, init=spec.init, network_mode=spec.network,
            cap_add=spec.cap_add or None, cap_drop=spec.cap_drop or None,
            security_opt=["no-new-privileges"] if spec.no_new_privileges else None,
            pids_limit=spec.pids_limit, mem_limit=spec.memory, memswap_limit=spec.memory,
            nano_cpus=int(spec.cpus * 1e9) if spec.cpus else None, user=spec.user or None,
            # remap is the daemon's (--userns-remap); a container can only leave it
            userns_mode="host" if spec.userns == "host" else None,
            read_only=spec.read_only, tmpfs=spec.tmpfs or None, auto_remove=True,
            # The runner is the main process, attached: stdin open, closed when the attach ends.
            stdin_open=True, detach=False, log_config=docker.types.LogConfig(type="none"),
        )
        mounts = [docker.types.Mount(target=spec.working_dir, source=None, type="volume")] if spec.workspace_volume else []
        mounts += [docker.types.Mount(target=dst, source=src, type="bind", read_only=True) for src, dst in spec.binds.items()]
        if mounts:
            kwargs["mounts"] = mounts
        kwargs.update(spec.extra)
        return {k: v for k, v in kwargs.items() if v is not None}

    def create(self, spec: ContainerSpec) -> str:
        try:  # the low-level call: containers.create() adds an inspect round trip (~5 ms)
            from docker.models.containers import _create_container_args
        except ImportError:  # pragma: no cover - a future SDK without the helper
            return self.client.containers.create(spec.image, **self.create_kwargs(spec)).id
        kwargs = _create_container_args({"image": spec.image, "version": self.client.api._version,
                                         **self.create_kwargs(spec)})
        return self.client.api.create_container(**kwargs)["Id"]

    def put_archive(self, cid: str, path: str, data) -> None:
        self.client.api.put_archive(cid, path, data)

    def get_archive(self, cid: str, path: str) -> Iterable[bytes]:
        stream, _stat = self.client.api.get_archive(cid, path)
        return stream

    def inspect(self, cid: str) -> dict[str, Any] | None:
        import docker.errors

        try:
            return self.client.api.inspect_container(cid)
        except docker.errors.NotFound:
            return None

    def remove(self, cid: str) -> None:
        import docker.errors

        try:
            self.client.api.remove_container(cid, v=True, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress (auto_remove)
                raise

    def list_managed(self) -> list[dict[str, Any]]:
        found = self.client.api.containers(all=True, filters={"label": LABEL_MANAGED})
        return [{"id": c["Id"], "labels": c.get("Labels") or {}, "status": c.get("State", "")} for c in found]

    def commit(self, cid: str, image: str, labels: dict[str, str]) -> str:
        repository, _, tag = image.rpartition(":")
        return self.client.api.commit(cid, repository=repository, tag=tag, pause=True,
                                      changes=label_changes(labels))["Id"]

    def changes(self, cid: str) -> list[tuple[str, str]]:
        return [(c["Path"], CHANGE_KINDS[c["Kind"]]) for c in self.client.api.diff(cid) or []]

    def remove_image(self, image: str) -> bool:
        import docker.errors

        try:
            self.client.api.remove_image(image)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: a container still uses it
                raise
            return False
        return True

    def list_managed_images(self) -> list[dict[str, Any]]:
        found = self.client.api.images(filters={"label": LABEL_SNAPSHOT})
        return [{"id": i["Id"], "labels": i.get("Labels") or {}, "tags": i.get("RepoTags") or []} for i in found]

    def run_argv(self, spec: ContainerSpec, cidfile: str) -> tuple[list[str], dict[str, str]] | None:
        return docker_run_argv(self.cli_argv(), spec, cidfile)

    def cli_argv(self) -> list[str]:
        # With the default url the CLI reads the same DOCKER_* variables as docker.from_env().
        return [self.cli] if self.from_env else [self.cli, "--host", self.url]


class DockerEnvironment(ContainerEnvironment):
    """Commands run in a Docker container (one per environment), through one attached runner."""

    config_class = DockerConfig
    engine_class = DockerEngine
    config: DockerConfig
