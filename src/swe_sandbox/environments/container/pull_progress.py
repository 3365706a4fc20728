"""The progress of one image pull, read from the engine's stream of JSON events.

Two shapes arrive, and ``PullProgress.apply`` reads both:

- Docker's (``POST /images/create``, and Podman 5's libpod pull with ``compatMode``): one event per
  layer change, ``{"id": LAYER, "status": "Downloading", "progressDetail": {"current": N,
  "total": M}}``, statuses ``Pulling fs layer``, ``Waiting``, ``Downloading``, ``Verifying
  Checksum``, ``Download complete``, ``Extracting``, ``Pull complete`` or ``Already exists``;
- Podman 4's libpod pull (``POST /libpod/images/pull``): text lines ``{"stream": "Copying blob
  sha256:...\\n"}`` as each layer starts, ``Copying config ...`` once every layer is stored, then
  ``{"id": IMAGE_ID}``. It gives no byte counts: layers are counted, bytes stay unknown (0).

An ``{"error": ...}`` event is the engine's report of a failed pull (``error`` holds its text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: Docker statuses after which a layer is in place.
LAYER_DONE = frozenset({"Pull complete", "Already exists"})
#: Docker statuses whose ``progressDetail`` counts downloaded bytes.
DOWNLOADING = "Downloading"
DOWNLOADED = frozenset({"Verifying Checksum", "Download complete", "Extracting", *LAYER_DONE})
PODMAN_BLOB = re.compile(r"Copying blob (?:sha256:)?([0-9a-f]{12,})")
PODMAN_CONFIG = "Copying config"


@dataclass
class Layer:
    """One layer of a pull: its last status and downloaded bytes (0 when unknown)."""

    status: str = ""
    current: int = 0
    total: int = 0
    done: bool = False


@dataclass
class PullProgress:
    """What one pull has done so far (updated by ``apply``; read by the displays)."""

    image: str
    engine: str = ""
    layers: dict[str, Layer] = field(default_factory=dict)
    status: str = ""
    """The engine's last line about the whole image (e.g. ``Digest: ...``)."""
    error: str = ""
    """The engine's error text, once it reported one."""
    finished: bool = False
    """The pull ended (successfully unless ``failed``)."""
    failed: bool = False

    def apply(self, event: dict[str, Any]) -> None:
        """Take one event of the engine's stream into account (see the module doc)."""
        if event.get("error") or event.get("errorDetail"):
            self.error = str(event.get("error") or (event.get("errorDetail") or {}).get("message", ""))
            return
        if "stream" in event:
            self._apply_podman_line(str(event["stream"]).strip())
        elif event.get("id") and event.get("status") and "progressDetail" in event:
            self._apply_layer(str(event["id"]), str(event["status"]), event.get("progressDetail") or {})
        elif event.get("status"):
            self.status = str(event["status"])

    def _apply_layer(self, layer_id: str, status: str, detail: dict[str, Any]) -> None:
        layer = self.layers.setdefault(layer_id, Layer())
        layer.status = status
        if status == DOWNLOADING and detail.get("total"):
            layer.current, layer.total = int(detail.get("current") or 0), int(detail["total"])
        elif status in DOWNLOADED:
            layer.current = layer.total
        layer.done = layer.done or status in LAYER_DONE

    def _apply_podman_line(self, line: str) -> None:
        blob = PODMAN_BLOB.match(line)
        if blob:
            self.layers.setdefault(blob.group(1)[:12], Layer(status="Copying"))
        elif line.startswith(PODMAN_CONFIG):
            for layer in self.layers.values():
                layer.status, layer.done = "Copied", True
        if line:
            self.status = line

    @property
    def layers_done(self) -> int:
        return sum(layer.done for layer in self.layers.values())

    @property
    def bytes_done(self) -> int:
        return sum(layer.current for layer in self.layers.values())

    @property
    def bytes_total(self) -> int:
        """Bytes to download, as far as known (0: unknown, e.g. Podman 4)."""
        return sum(layer.total for layer in self.layers.values())

    def summary(self) -> str:
        """``3/5 layers, 12.0 MB/40.5 MB`` (bytes only when the engine counts them)."""
        text = f"{self.layers_done}/{len(self.layers)} layers"
        if self.bytes_total:
            text += f", {_size(self.bytes_done)}/{_size(self.bytes_total)}"
        return text


def _size(count: float) -> str:
    """``count`` bytes in decimal units (``950 B``, ``12.3 MB``)."""
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")  # pragma: no cover
