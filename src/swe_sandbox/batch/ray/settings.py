"""What the Ray executor is told and says: its options, constants and messages (no Ray import).

``swe-sandbox batch --ray [ADDRESS]`` / ``run_batch(..., executor="ray")`` fan rollouts out on a
Ray cluster (DESIGN.md §7): one Ray task per unit of work, each asking for one unit of
the custom resource ``RESOURCE``, which a node offers with ``ray start ... --resources
'{"swe_sandbox": N}'``. This module holds what the driver, the workers and the CLI share, and is
importable without Ray installed.
"""

from __future__ import annotations

from importlib.util import find_spec

from pydantic import BaseModel, ConfigDict, Field

from swe_sandbox.errors import ConfigError

#: The custom resource a node offers once per sandbox slot, and each task asks one unit of.
RESOURCE = "swe_sandbox"
#: ``--ray`` given without an address: a local Ray is started for the run (``-w`` slots); Ray's own
#: ``ray.init(address="local")``, which never joins a cluster this machine already runs.
LOCAL = "local"
#: Container labels the workers add (docker/podman): the batch run, and the Ray node that made it.
LABEL_BATCH_RUN = "org.swe-sandbox.batch-run"
LABEL_RAY_NODE = "org.swe-sandbox.ray-node"
#: Characters of a node id shown in progress lines (Ray's ids are 56 hex digits).
NODE_SHORT = 8

#: What the control actor answers a running task: go on, stop as Ctrl-C does, or stop for the cost limit.
GO, STOP_CANCEL, STOP_BUDGET = "", "cancel", "budget"

NOT_INSTALLED = ("--ray needs Ray on this machine and on every node: pip install 'swe-sandbox[ray]' "
                 "(or pip install ray)")
NO_SLOTS = ("no Ray node offers the {resource!r} resource: start each node that has an engine with "
            "ray start ... --resources '{{\"{resource}\": N}}' (N sandboxes at once there)")
NODE_LOST = "{kind} on node {node}: {error}"
#: Where ``ray start --head`` leaves the address of the cluster it started (what ``auto`` reads,
#: after ``RAY_ADDRESS``; Ray's own lookup, ``ray._private.services``).
CURRENT_CLUSTER_FILE = "/tmp/ray/ray_current_cluster"
#: Seconds to wait for the cluster's GCS port to accept a connection before ``ray.init`` (which
#: would retry for minutes, deaf to Ctrl-C).
CONNECT_CHECK_S = 5.0


class RayOptions(BaseModel):
    """How the batch reaches Ray and talks to its workers.

    Attributes:
        address: ``auto`` (``RAY_ADDRESS``, else the cluster ``ray start --head`` started on this
            machine), ``host:port`` of a running cluster's head (its GCS, 6379 by default), or
            ``local``: start a local Ray for this run, stopped at its end.
        local_slots: ``swe_sandbox`` slots of the local Ray (``address == "local"``; the CLI's ``-w``).
        heartbeat_s: seconds between a running task's reports to the driver (progress, cost so far;
            it also learns then whether to stop). Stops arrive within this delay.
        poll_s: seconds the driver waits for a result before it handles progress and limits.
        slots_refresh_s: seconds between reads of the cluster's offered slots (nodes come and go).
        queued_per_slot: calls kept waiting in Ray's queue per slot, besides those running, so a
            freed slot starts the next at once (a queued call that finds the batch stopping does
            not start).
        object_store_mib: object store of the local Ray, MiB (results are small).
    """

    model_config = ConfigDict(extra="forbid")

    address: str = LOCAL
    local_slots: int = Field(default=1, ge=1)
    heartbeat_s: float = Field(default=0.5, gt=0)
    poll_s: float = Field(default=0.2, gt=0)
    slots_refresh_s: float = Field(default=1.0, gt=0)
    queued_per_slot: int = Field(default=1, ge=0)
    object_store_mib: int = Field(default=128, ge=75)


def short_node(node_id: str) -> str:
    """A node id as shown to people: its first ``NODE_SHORT`` hex digits."""
    return node_id[:NODE_SHORT]


def ray_options(executor: str, address: str | None, workers: int) -> RayOptions | None:
    """The ``RayOptions`` of ``executor="ray"`` (None for ``threads``), checked before anything runs.

    Raises:
        ConfigError: an unknown executor, or Ray is not installed.
    """
    if executor == "threads":
        return None
    if executor != "ray":
        raise ConfigError(f"executor: {executor!r} is neither 'threads' nor 'ray'")
    if find_spec("ray") is None:
        raise ConfigError(NOT_INSTALLED)
    return RayOptions(address=address or LOCAL, local_slots=workers)
