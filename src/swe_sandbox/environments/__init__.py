"""Backends, found by name through a lazy registry (no backend module or SDK is imported early).

The names, and the entry-point group third-party backends register in, are ``swe_sandbox.backends``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swe_sandbox.backends import BACKENDS, ENTRY_POINT_GROUP, backend_names, backend_target
from swe_sandbox.config import apply_overrides, load_environment_config, validate
from swe_sandbox.errors import ConfigError

if TYPE_CHECKING:
    from swe_sandbox.environments.base import Environment


def environment_class(name: str) -> type[Environment]:
    """Import and return the Environment class of backend ``name``.

    Raises:
        ConfigError: no such backend (the message lists the known ones), or a third-party one whose
            entry point does not load.
    """
    target = backend_target(name)
    if target is None:
        raise ConfigError(f"environment.backend: unknown backend {name!r} (known: {', '.join(backend_names())})")
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        if name in BACKENDS:
            raise
        raise ConfigError(f"environment.backend: backend {name!r} ({target}, from the {ENTRY_POINT_GROUP!r} entry "
                          f"point) cannot be loaded: {type(exc).__name__}: {exc}") from None


def get_environment(config: str | Path | Mapping[str, Any] = "local", overrides: Sequence[str] = (), **kwargs: Any):
    """Build an environment (not started yet: it starts on first use).

    Args:
        config: a preset name (``"local"``, ``"bwrap"``, ...), a YAML file, or a dict.
        overrides: ``-c`` style ``environment.key=value`` strings, applied before ``kwargs``.
        **kwargs: config fields that override the preset (e.g. ``timeout=30``).

    Returns:
        Environment: use it as a context manager, or call ``close()``.

    Raises:
        ConfigError: unknown preset or backend, or an invalid field (named in the message).
    """
    data = apply_overrides(load_environment_config(config), list(overrides), section="environment")
    data.update(kwargs)
    if "backend" not in data:
        raise ConfigError("environment.backend: missing (e.g. backend: bwrap)")
    cls = environment_class(str(data["backend"]))
    return cls(validate(cls.config_class, data))
