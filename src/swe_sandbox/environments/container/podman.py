"""Backend ``podman``: one container per environment through podman-py and the Podman API socket
(``podman system service``), the runner its main process, attached through one
``podman --url SOCKET start -ai`` (see ``swe_sandbox.environments.container.environment`` for everything both
engines share).

Only what is Podman's own lives here: client construction, how the neutral ``ContainerSpec`` maps
onto podman-py's ``containers.create`` (``no_new_privileges``, CPU quota, tmpfs as mounts; with a
read-only root Podman itself mounts /tmp, /var/tmp and /run as tmpfs, and the workspace is an
anonymous volume, as on Docker: Podman's archive API cannot write into a tmpfs of a container
with a user namespace, EOVERFLOW, since it writes as the host's root, which is not mapped there),
a user namespace per container, and a removal without stop timeout that takes the anonymous
volume along (the libpod API's ``volumes``; its ``v`` is the compat API's and is ignored).

User namespaces (``userns: remap``): each container gets ``userns=auto`` with ``USERNS_SIZE`` ids
(more when a numeric ``user`` needs them), a range of its own taken from the ``containers`` entries
of /etc/subuid and /etc/subgid; image layers are not copied for it (on a kernel with idmapped
mounts, as here, Podman mounts them id-shifted: start cost measured unchanged). podman-py's
``userns_mode`` alone is not enough: the API server ignores ``nsmode: auto`` without
``idmappings`` (Podman 4.3 measured; its CLI fills them in client-side), so both are sent.
The attach and the fallback's execs go through the CLI on purpose: podman-py's ``exec_run``
ignores ``socket=`` (no stdin) and shlex-splits a string command.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from swe_sandbox import capabilities as cap
from swe_sandbox.environments.container.archive import shift_owners
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

CPU_PERIOD = 100_000
#: ids in each container's user namespace (0-65535: every uid and gid an image normally uses,
#: ``nobody`` 65534 included).
USERNS_SIZE = 65536


class PodmanConfig(ContainerConfig):
    """Config of the ``podman`` backend (fields: ``ContainerConfig``)."""

    backend: str = "podman"


class PodmanEngine(Engine):
    name = "podman"
    cli_name = "podman"
    sdk_package = "podman"
    commit_keeps_owners = False  # Podman 4.3 with userns=auto: the committed layer holds host ids

    def __init__(self, url: str = "", timeout: float = 600.0, cli: str = ""):
        super().__init__(url, timeout, cli)
        self._mappings: dict[str, tuple[int, int, int] | None] = {}
        self._lock = threading.Lock()
    userns_help = ("Podman needs subordinate ids for user namespaces: a range for the user \"containers\" in "
                   "/etc/subuid and /etc/subgid (e.g. containers:1000000000:1000000000; each sandbox takes "
                   f"{USERNS_SIZE} of them while it runs), as scripts/setup-engines.sh writes.")

    @classmethod
    def default_url(cls) -> str:
        url = os.environ.get("CONTAINER_HOST")
        if url:
            return url
        if os.geteuid() == 0:
            return "unix:///run/podman/podman.sock"
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
        return f"unix://{runtime}/podman/podman.sock"

    def make_client(self):
        import podman

        return podman.PodmanClient(base_url=self.url, timeout=self.timeout)

    def ping(self) -> None:
        import podman

        with podman.PodmanClient(base_url=self.url, timeout=5) as client:
            if not client.ping():
                raise ConnectionError("ping failed")

    def sdk_errors(self) -> tuple[type[BaseException], ...]:
        import podman.errors

        # APIError and NotFound derive from requests' HTTPError, an OSError
        return (podman.errors.DockerException, podman.errors.HTTPException, podman.errors.StreamParseError, OSError)

    def is_not_found(self, exc: BaseException) -> bool:
        import podman.errors

        return isinstance(exc, podman.errors.NotFound) or getattr(exc, "status_code", None) == 404

    def is_userns_error(self, exc: BaseException) -> bool:
        # "could not find enough available IDs" (no ranges, or all taken), "no subuid ranges found"
        text = str(exc).lower()
        return "available ids" in text or "subuid" in text or "subgid" in text

    def has_image(self, image: str) -> bool:
        return self.client.images.exists(image)

    def pull_events(self, image: str, *, insecure: bool = False) -> Iterator[dict[str, Any]]:
        # The libpod endpoint: the compat one has no way to skip TLS (Podman 4.3). Tag or digest
        # are in the reference (podman-py splits it at the last ':' and joins it back).
        return self.client.images.pull(parse_image(image).qualified, stream=True, decode=True,
                                       tls_verify=not insecure)

    def create_kwargs(self, spec: ContainerSpec) -> dict[str, Any]:
        mounts = [{"type": "tmpfs", "target": path, **_tmpfs_options(opts)} for path, opts in spec.tmpfs.items()]
        mounts += [{"type": "bind", "source": src, "target": dst, "read_only": True} for src, dst in spec.binds.items()]
        kwargs: dict[str, Any] = dict(
            command=spec.command, name=spec.name, labels=spec.labels, environment=spec.environment,
            working_dir=spec.working_dir, hostname=spec.hostname, init=spec.init, network_mode=spec.network,
            cap_add=spec.cap_add or None, cap_drop=spec.cap_drop or None,
            no_new_privileges=spec.no_new_privileges or None,
            pids_limit=spec.pids_limit, mem_limit=spec.memory, memswap_limit=spec.memory,
            cpu_period=CPU_PERIOD if spec.cpus else None,
            cpu_quota=int(spec.cpus * CPU_PERIOD) if spec.cpus else None,
            user=spec.user or None, read_only=spec.read_only or None,
            mounts=mounts or None,
            **_userns_kwargs(spec),
            # The runner is the main process, attached: stdin open; no log of the protocol.
            stdin_open=True, log_config={"Type": "none"},
        )
        kwargs.update(spec.extra)
        return {k: v for k, v in kwargs.items() if v is not None}

    def create_payload(self, spec: ContainerSpec) -> dict[str, Any]:
        """The body of ``POST /containers/create``: podman-py's rendering of ``create_kwargs``, plus
        ``remove`` (podman-py's create() drops it: its run() removes on the client side) and the
        workspace's anonymous volume (podman-py renders named volumes only)."""
        from podman.domain.containers_create import CreateMixin

        payload = CreateMixin._render_payload({"image": spec.image, **self.create_kwargs(spec)})
        payload["remove"] = True
        if spec.workspace_volume:
            payload["volumes"] = [*(payload.get("volumes") or []), {"Name": "", "Dest": spec.working_dir}]
        return payload

    def create(self, spec: ContainerSpec) -> str:
        from podman import api
        from podman.errors import ImageNotFound

        # Posted here, not through podman-py's create(): that would drop ``remove`` (the container
        # would never auto-remove) and add an inspect round trip.
        payload = self.create_payload(spec)
        response = self.client.api.post("/containers/create", headers={"content-type": "application/json"},
                                        data=api.prepare_body(payload))
        response.raise_for_status(not_found=ImageNotFound)
        return response.json()["Id"]

    def put_archive(self, cid: str, path: str, data) -> None:
        self.client.api.put(f"/containers/{cid}/archive", params={"path": path}, data=data).raise_for_status()

    def get_archive(self, cid: str, path: str) -> Iterable[bytes]:
        response = self.client.api.get(f"/containers/{cid}/archive", params={"path": path}, stream=True)
        response.raise_for_status()
        return response.iter_content(chunk_size=1 << 20)

    def get_owned_archive(self, cid: str, path: str) -> Iterable[bytes]:
        """The archive with the container's own owners: Podman 4 sends a user namespace's host ids
        (``put_archive`` wants the container's)."""
        chunks = self.get_archive(cid, path)
        mapping = self.id_mapping(cid)
        return chunks if mapping is None else shift_owners(chunks, *mapping)

    def id_mapping(self, cid: str) -> tuple[int, int, int] | None:
        """``(host uid of root, host gid of root, size)`` of the container's user namespace, or None."""
        with self._lock:
            if cid not in self._mappings:
                maps = ((self.inspect(cid) or {}).get("HostConfig") or {}).get("IDMappings") or {}
                uid, gid = (maps.get("UidMap") or [""])[0].split(":"), (maps.get("GidMap") or [""])[0].split(":")
                mapped = len(uid) == 3 and len(gid) == 3 and uid[0] == gid[0] == "0"
                self._mappings[cid] = (int(uid[1]), int(gid[1]), int(uid[2])) if mapped else None
            return self._mappings[cid]

    def inspect(self, cid: str) -> dict[str, Any] | None:
        response = self.client.api.get(f"/containers/{cid}/json")
        # 404, or a 500 "no such container" while podman is removing it (auto-remove race)
        if response.status_code == 404 or (not response.ok and "no such container" in response.text):
            return None
        response.raise_for_status()
        return response.json()

    def remove(self, cid: str) -> None:
        # timeout=0: kill at once (podman-py's remove() has no way to say so; default is 10 s);
        # volumes: its anonymous volumes too (the workspace of a read-only root).
        response = self.client.api.delete(f"/containers/{cid}",
                                          params={"force": True, "volumes": True, "timeout": 0, "ignore": True})
        if response.status_code not in (200, 204, 404, 409):
            response.raise_for_status()

    def list_managed(self) -> list[dict[str, Any]]:
        # The raw list: podman-py's Container.status breaks on list results (State is a string there).
        response = self.client.api.get("/containers/json",
                                       params={"all": True, "filters": json.dumps({"label": [LABEL_MANAGED]})})
        response.raise_for_status()
        return [{"id": c["Id"], "labels": c.get("Labels") or {}, "status": c.get("State", "")} for c in response.json()]

    def commit(self, cid: str, image: str, labels: dict[str, str]) -> str:
        repository, _, tag = image.rpartition(":")
        response = self.client.api.post("/commit", params={"container": cid, "repo": repository, "tag": tag,
                                                            "pause": True, "changes": label_changes(labels)})
        response.raise_for_status()
        return response.json()["Id"]

    def changes(self, cid: str) -> list[tuple[str, str]]:
        response = self.client.api.get(f"/containers/{cid}/changes")
        response.raise_for_status()
        return [(c["Path"], CHANGE_KINDS[c["Kind"]]) for c in response.json() or []]

    def remove_image(self, image: str) -> bool:
        # never forced: Podman's force removes the containers using the image too
        response = self.client.api.delete(f"/images/{image}")
        if response.status_code == 409:  # a container still uses it
            return False
        if response.status_code not in (200, 404):
            response.raise_for_status()
        return True

    def list_managed_images(self) -> list[dict[str, Any]]:
        response = self.client.api.get("/images/json", params={"filters": json.dumps({"label": [LABEL_SNAPSHOT]})})
        response.raise_for_status()
        return [{"id": i["Id"], "labels": i.get("Labels") or {}, "tags": i.get("RepoTags") or []}
                for i in response.json()]

    def cli_argv(self) -> list[str]:
        url = self.url.replace("http+unix://", "unix://", 1)
        return [self.cli, "--url", url]


def _userns_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """``userns=auto`` with ``USERNS_SIZE`` ids, or enough for a numeric ``user``; or the host's."""
    if spec.userns == "host":
        return {"userns_mode": {"nsmode": "host"}}
    size = max([USERNS_SIZE] + [int(part) + 1 for part in spec.user.split(":") if part.isdigit()])
    return {"userns_mode": {"nsmode": "auto", "value": f"size={size}"},
            "idmappings": {"AutoUserNs": True, "AutoUserNsOpts": {"Size": size}}}


def _tmpfs_options(opts: str) -> dict[str, Any]:
    """``"size=64m,mode=1777"`` -> podman-py mount options."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in opts.split(","))):
        key, _, value = part.partition("=")
        if key in ("size", "mode") and value:
            out[key] = value
    return out


class PodmanEnvironment(ContainerEnvironment):
    """Commands run in a Podman container (one per environment), through one attached runner."""

    config_class = PodmanConfig
    engine_class = PodmanEngine
    config: PodmanConfig

    @classmethod
    def missing_capabilities(cls, config: ContainerConfig) -> dict[str, str]:
        """As docker's, but in a user namespace podman's exec streams refuse the command's opens (EACCES)."""
        gaps = super().missing_capabilities(config)
        gaps.pop(cap.PRIVATE_RUNNER_CHANNEL, None)
        return gaps
