"""Environment configs (one pydantic model per backend), presets and ``-c key=value`` overrides.

A config comes from a preset name (``environments/<name>.yaml``, shipped in the wheel), a YAML
file path, or a dict; keyword arguments and ``-c`` overrides are applied on top, then the
backend's model validates it. Every model forbids unknown keys, so a misspelt key is an error that
names the field and the allowed ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swe_sandbox.backends import plugin_backend_names
from swe_sandbox.errors import ConfigError
from swe_sandbox.network.policy import NetworkPolicy

#: Set in every sandbox unless the config's ``env`` overrides them: nothing waits for a terminal
#: (pagers, editors, prompts) and Python output keeps its order (DESIGN.md §1).
DEFAULT_ENV: dict[str, str] = {
    "PAGER": "cat",
    "MANPAGER": "cat",
    "GIT_PAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESS": "-R",
    "TERM": "dumb",
    "EDITOR": "true",
    "VISUAL": "true",
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_PROGRESS_BAR": "off",
    "PIP_NO_INPUT": "1",
    "TQDM_DISABLE": "1",
    "PYTHONUNBUFFERED": "1",
}
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class EnvironmentConfig(BaseModel):
    """Fields every backend shares."""

    # defer_build: each backend's config class builds its validators when first used, not at import
    # (a one-shot ``exec`` builds one of them, not all: ~15 ms less start)
    model_config = ConfigDict(extra="forbid", defer_build=True)

    backend: str
    """Backend name, e.g. ``"local"`` or ``"bwrap"`` (see ``swe_sandbox.backends.BACKENDS``)."""
    timeout: float | None = Field(default=60.0, gt=0, le=1e6, allow_inf_nan=False)
    """Default per-command timeout in seconds; ``execute(timeout=...)`` overrides it. ``None``: no limit."""
    cwd: str = ""
    """Working directory for commands when ``execute`` gets none; empty: the backend's default."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the sandbox (on top of ``DEFAULT_ENV``)."""
    forward_env: list[str] = Field(default_factory=list)
    """Names of host variables copied into the sandbox; nothing else of the host's environment enters."""
    max_output_bytes: int = Field(default=10 << 20, ge=1024, le=32 << 20)
    """Output kept per command, in bytes (head + tail halves; at most 32 MiB); the rest is dropped and counted."""
    max_download_bytes: int = Field(default=4 << 30, gt=0)
    """Most bytes one ``download()`` may write on the host (default 4 GiB), counted over the whole
    tree by apparent size (a sparse file counts its full length) and by the bytes actually written
    (a file growing while it is copied). Past it the download raises ``DownloadTooLarge`` and leaves
    nothing on the host. ``upload()`` is not limited."""
    start_timeout: float = Field(default=60.0, gt=0)
    """Seconds to wait for the sandbox and its runner to come up."""

    @field_validator("env", mode="before")
    @classmethod
    def _scalars_to_str(cls, value: Any) -> Any:
        """``-c environment.env.N=1`` parses ``1`` as a number; environment values are strings."""
        if isinstance(value, Mapping):
            return {k: v if isinstance(v, str) or v is None or isinstance(v, (dict, list)) else str(v)
                    for k, v in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _valid_env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)

    @field_validator("forward_env")
    @classmethod
    def _valid_forward_env(cls, value: list[str]) -> list[str]:
        for name in value:
            check_env_name(name)
        return value


#: ``network`` values that go through the host's allow-list proxy (DESIGN.md section 11).
ALLOWLIST = "allowlist"


class NetworkedConfig(EnvironmentConfig):
    """Fields of the backends that can enforce ``network: allowlist`` (bwrap, docker, podman); each
    subclass has its own ``network`` field, where ``allowlist`` is one of the values."""

    allow: list[str] = Field(default_factory=list)
    """With ``network: allowlist``: the host names commands may reach, through a proxy on the host
    (``swe_sandbox.network``): ``pypi.org`` (that name), ``*.pythonhosted.org`` (names below it),
    optionally ``:PORT`` (``github.com:443``; none: 80 and 443). Raw IP addresses are never
    reachable, nor names that resolve to loopback, private or link-local addresses. Empty (the
    default): every connection is refused (and logged)."""
    resolve: dict[str, str] = Field(default_factory=dict)
    """With ``network: allowlist``: the proxy's own name -> address entries, used instead of DNS
    (like curl's ``--resolve``); such an address may be loopback or private (you said so), e.g. an
    internal package index. Default: none."""

    @model_validator(mode="after")
    def _allow_needs_allowlist(self) -> NetworkedConfig:
        if getattr(self, "network", None) != ALLOWLIST:
            given = [name for name in ("allow", "resolve") if getattr(self, name)]
            if given:
                raise ValueError(f"{given[0]}: only with network: {ALLOWLIST} (network is {getattr(self, 'network', None)!r})")
        return self

    @field_validator("allow")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return list(_checked_policy(allow=value).allow)

    @field_validator("resolve")
    @classmethod
    def _entries(cls, value: dict[str, str]) -> dict[str, str]:
        return dict(_checked_policy(resolve=value).resolve)

    def network_policy(self) -> NetworkPolicy | None:
        """The allow-list policy of this config; None unless ``network`` is ``allowlist``."""
        if getattr(self, "network", None) != ALLOWLIST:
            return None
        return NetworkPolicy(allow=self.allow, resolve=self.resolve)


def network_policy_of(config: EnvironmentConfig) -> NetworkPolicy | None:
    """``config``'s allow-list policy (``NetworkedConfig.network_policy``); None for a backend
    without one or another ``network``."""
    return config.network_policy() if isinstance(config, NetworkedConfig) else None


def _checked_policy(**fields: Any) -> NetworkPolicy:
    """``NetworkPolicy(**fields)``; its first error as a ValueError (pydantic then names our field)."""
    try:
        return NetworkPolicy(**fields)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None



#: A variable name a shell can export (POSIX's portable names, lower case too).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def encodable(text: str) -> bool:
    """Whether ``text`` is valid text (encodes as UTF-8: no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_env_name(name: Any) -> None:
    """Refuse a name that is not ``ENV_NAME`` (``A-Z a-z 0-9 _``, not starting with a digit).

    Raises:
        ValueError: naming it.
    """
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not a valid environment variable name (letters, digits and _, "
                         "not starting with a digit)")


def check_env(env: Mapping[Any, Any]) -> dict[str, str]:
    """``env`` as a dict, each name ``check_env_name``'s and each value text without NUL.

    Raises:
        ValueError: naming the first bad name or value.
    """
    for name, value in env.items():
        check_env_name(name)
        if not isinstance(value, str) or "\0" in value or not encodable(value):
            raise ValueError(f"value of {name!r} is not text, has a NUL byte or is not valid UTF-8")
    return dict(env)


def format_validation_error(exc: ValidationError, model: type[BaseModel], section: str) -> str:
    """One line per problem, each naming the field (``environment.timeout: ...``)."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in (section, *err["loc"]) if p != "")
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(sorted(model.model_fields))
            lines.append(f"{where}: unknown field (allowed: {allowed})")
        else:
            lines.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
    return "invalid config:\n  " + "\n  ".join(lines)


def validate(model: type[BaseModel], data: Mapping[str, Any], section: str = "environment"):
    """Validate ``data`` with ``model``.

    Raises:
        ConfigError: naming every bad field, with the allowed fields for unknown ones.
    """
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, section)) from None


def data_dir(kind: str) -> Path:
    """Folder of shipped YAML files (``kind`` is ``"environments"`` or ``"config"``).

    Installed wheels carry them as package data (``swe_sandbox/_data``); a source checkout uses the
    repository's top-level folders.
    """
    packaged = Path(__file__).parent / "_data" / kind
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / kind


def preset_names() -> list[str]:
    """Names of the shipped environment presets."""
    return sorted(p.stem for p in data_dir("environments").glob("*.yaml"))


def load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping at top level")
    return data


def load_environment_config(spec: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Return the raw environment config for a preset name, YAML path, or dict.

    A YAML file may hold the environment config at top level or under an ``environment:`` key
    (a full run config). A preset's ``backend`` defaults to its name.

    A backend registered through the ``swe_sandbox.environments`` entry point and without a
    preset of that name is ``{"backend": name}``.

    Raises:
        ConfigError: unknown preset or unreadable file.
    """
    if isinstance(spec, Mapping):
        return dict(spec)
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.is_file():  # a directory named like a preset is not a config
        data = load_yaml(path)
        return dict(data.get("environment", data))
    preset = data_dir("environments") / f"{spec}.yaml"
    if not preset.is_file():
        plugins = plugin_backend_names()
        if str(spec) in plugins:  # a third-party backend without a preset: its config's defaults
            return {"backend": str(spec)}
        also = f", and the registered backends are {plugins}" if plugins else ""
        raise ConfigError(f"unknown environment {spec!r}: not a file, and the presets are {preset_names()}{also}")
    data = load_yaml(preset)
    data.setdefault("backend", str(spec))
    return data


def parse_override_value(raw: str) -> Any:
    """The value of a ``-c key=value`` override: JSON when ``raw`` is JSON, else ``raw`` itself.

    So ``20`` is 20, ``0.5`` is 0.5, ``true``/``false`` are booleans, ``null`` is None, and
    ``["a", "b"]`` / ``{"k": 1}`` are a list / a dict; anything else stays the string it is:
    ``yes``, ``on``, ``0123``, ``1_000``, ``2024-01-01``, ``NaN``, ``Infinity`` (no YAML 1.1 surprises).
    """

    def refuse(name: str) -> Any:  # json accepts NaN / Infinity; a config never means them
        raise ValueError(name)

    try:
        return json.loads(raw, parse_constant=refuse)
    except ValueError:
        return raw


def apply_overrides(data: dict[str, Any], pairs: list[str], section: str | None = None) -> dict[str, Any]:
    """Apply ``key.sub=value`` pairs to a nested dict.

    Values are parsed by ``parse_override_value`` (JSON, else the raw string), except the value
    of one environment variable (``environment.env.NAME=value``), which is always the raw string.

    Args:
        data: the config to change (changed in place and returned).
        pairs: ``-c`` values such as ``environment.timeout=5`` or ``environment.env.FOO=bar``.
        section: when given, every key must start with ``section.``, which is stripped.

    Raises:
        ConfigError: a pair without ``=`` or outside ``section``.
    """
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {pair!r}: expected key=value")
        parts = key.split(".")
        if section is not None:
            if parts[0] != section or len(parts) < 2:
                raise ConfigError(f"override {pair!r}: key must start with '{section}.'")
            parts = parts[1:]
        full = key.split(".")  # with the section
        env_var = len(full) == 3 and full[0] == "environment" and full[1] == "env"
        value = raw if env_var else parse_override_value(raw)
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {pair!r}: {part} is not a section")
        node[parts[-1]] = value
    return data
