"""Backend ``podman``: one container per environment through podman-py and the Podman API socket
(``podman system service``), the runner its main process, attached through one
``podman --url SOCKET start -ai`` (see ``swe_sandbox.environments.container`` for everything both
engines share).

Only what is Podman's own lives here: client construction, how the neutral ``ContainerSpec`` maps
onto podman-py's ``containers.create`` (``no_new_privileges``, CPU quota, tmpfs as mounts; with a
read-only root Podman itself mounts /tmp, /var/tmp and /run as tmpfs, and the workspace is a
tmpfs too, which Podman's archive API can write into), and a removal without stop timeout.
The attach and the fallback's execs go through the CLI on purpose: podman-py's ``exec_run``
ignores ``socket=`` (no stdin) and shlex-splits a string command.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable

from swe_sandbox.environments.container import ContainerConfig, ContainerEnvironment
from swe_sandbox.environments.engine import LABEL_MANAGED, ContainerSpec, Engine

CPU_PERIOD = 100_000
#: tmpfs at the workspace when the root is read-only (Podman can copy archives into it).
WORKSPACE_TMPFS_SIZE = "2g"


class PodmanConfig(ContainerConfig):
    """Config of the ``podman`` backend (fields: ``ContainerConfig``)."""

    backend: str = "podman"


class PodmanEngine(Engine):
    name = "podman"
    cli_name = "podman"
    sdk_package = "podman"

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

    def is_not_found(self, exc: BaseException) -> bool:
        import podman.errors

        return isinstance(exc, podman.errors.NotFound) or getattr(exc, "status_code", None) == 404

    def has_image(self, image: str) -> bool:
        return self.client.images.exists(image)

    def create_kwargs(self, spec: ContainerSpec) -> dict[str, Any]:
        mounts = [{"type": "tmpfs", "target": path, **_tmpfs_options(opts)} for path, opts in spec.tmpfs.items()]
        if spec.workspace_volume:
            mounts.append({"type": "tmpfs", "target": spec.working_dir, "size": WORKSPACE_TMPFS_SIZE})
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
            # The runner is the main process, attached: stdin open; no log of the protocol.
            stdin_open=True, log_config={"Type": "none"},
        )
        kwargs.update(spec.extra)
        return {k: v for k, v in kwargs.items() if v is not None}

    def create(self, spec: ContainerSpec) -> str:
        from podman import api
        from podman.domain.containers_create import CreateMixin
        from podman.errors import ImageNotFound

        # podman-py's create() drops ``remove`` (its run() removes on the client side), so the
        # container would never auto-remove: render its payload, add ``remove``, post it here
        # (which also saves the inspect round trip create() adds).
        payload = CreateMixin._render_payload({"image": spec.image, **self.create_kwargs(spec)})
        payload["remove"] = True
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

    def inspect(self, cid: str) -> dict[str, Any] | None:
        response = self.client.api.get(f"/containers/{cid}/json")
        # 404, or a 500 "no such container" while podman is removing it (auto-remove race)
        if response.status_code == 404 or (not response.ok and "no such container" in response.text):
            return None
        response.raise_for_status()
        return response.json()

    def remove(self, cid: str) -> None:
        # timeout=0: kill at once (podman-py's remove() has no way to say so; default is 10 s).
        response = self.client.api.delete(f"/containers/{cid}",
                                          params={"force": True, "v": True, "timeout": 0, "ignore": True})
        if response.status_code not in (200, 204, 404, 409):
            response.raise_for_status()

    def list_managed(self) -> list[dict[str, Any]]:
        # The raw list: podman-py's Container.status breaks on list results (State is a string there).
        response = self.client.api.get("/containers/json",
                                       params={"all": True, "filters": json.dumps({"label": [LABEL_MANAGED]})})
        response.raise_for_status()
        return [{"id": c["Id"], "labels": c.get("Labels") or {}, "status": c.get("State", "")} for c in response.json()]

    def cli_argv(self) -> list[str]:
        url = self.url.replace("http+unix://", "unix://", 1)
        return [self.cli, "--url", url]


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
