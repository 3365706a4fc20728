"""Run configs: one YAML file with ``agent:``, ``model:`` and ``environment:`` sections.

The shipped default is ``config/default.yaml`` (package data, see ``swe_sandbox.config.data_dir``).
A user file replaces it whole: a file without ``agent.system_template`` gets the default
templates, so a small file like ``agent: {step_limit: 20}`` works. ``-c section.key=value``
overrides apply last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swe_sandbox.config import apply_overrides, data_dir, load_yaml
from swe_sandbox.errors import ConfigError

SECTIONS = ("agent", "model", "environment")


def default_config_path() -> Path:
    """The shipped ``default.yaml``."""
    return data_dir("config") / "default.yaml"


def load_run_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Load a run config and apply ``-c`` overrides.

    Args:
        path: a YAML file; None: the shipped ``config/default.yaml``.
        overrides: ``section.key=value`` strings, e.g. ``agent.step_limit=20`` or
            ``model.model_kwargs.api_base=http://127.0.0.1:8000/v1`` (values are read as JSON, else
            kept as strings; see ``swe_sandbox.config.parse_override_value``).

    Returns:
        dict: ``{"agent": {...}, "model": {...}, "environment": {...}}`` (every section present).

    Raises:
        ConfigError: unreadable file, an unknown section (named), a section that is not a
            mapping, or a malformed override.
    """
    default = load_yaml(default_config_path())
    data = load_yaml(Path(path)) if path is not None else default
    check_sections(data, str(path or default_config_path()))
    config = {section: dict(data.get(section) or {}) for section in SECTIONS}
    for key in ("system_template", "instance_template"):
        config["agent"].setdefault(key, default["agent"][key])
    for pair in overrides:
        section = pair.partition("=")[0].split(".")[0]
        if section not in SECTIONS:
            allowed = ", ".join(s + "." for s in SECTIONS)
            raise ConfigError(f"override {pair!r}: the key must start with one of {allowed}")
    return apply_overrides(config, list(overrides))


def check_sections(data: dict[str, Any], where: str) -> None:
    """Raise ``ConfigError`` naming any top-level key that is not a known section."""
    unknown = [key for key in data if key not in SECTIONS]
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {', '.join(map(str, unknown))} "
                          f"(allowed: {', '.join(SECTIONS)})")
    for section in SECTIONS:
        if data.get(section) is not None and not isinstance(data[section], dict):
            raise ConfigError(f"{where}: {section}: expected a mapping")
