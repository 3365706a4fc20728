"""Our backend variants: what tests/conftest.py parametrises the kit's ``backend_under_test`` over.

Adding a variant to the conformance suite is one line in ``VARIANTS``. Each variant carries its
backend's marker (declared in pyproject.toml), so ``pytest -m bwrap`` runs one backend only. What a
variant lacks is declared by its backend (``missing_capabilities``; see
``swe_sandbox.capabilities``), never here.
"""

from __future__ import annotations

import json
from typing import Any

from swe_sandbox.testing.kit import Variant


def _ssh_settings(runner: str) -> Any:
    """The test sshd's config for ``runner``, resolved (the server started) on first use."""

    def settings() -> dict[str, Any]:
        from ssh.sshd import ssh_spec

        spec = ssh_spec(runner)
        spec.pop("backend")
        return spec

    return settings


#: Every backend variant the conformance suite runs against, by test id.
VARIANTS: dict[str, Variant] = {variant.name: variant for variant in [
    Variant("local", "local"),
    Variant("local-exec", "local", {"runner": "exec"}),
    Variant("bwrap", "bwrap"),
    Variant("docker", "docker"),
    Variant("docker-exec", "docker", {"runner": "exec"}),
    Variant("podman", "podman"),
    Variant("podman-exec", "podman", {"runner": "exec"}),
    Variant("ssh", "ssh", _ssh_settings("python")),
    Variant("ssh-exec", "ssh", _ssh_settings("exec")),
]}
#: Their names, in test order.
BACKENDS = list(VARIANTS)
#: Variants the agent's own tests (tests/unit) are not repeated on: the agent sees the same
#: contract there (the conformance suite and the e2e test cover those modes).
UNIT_SKIPS_VARIANTS = {"local-exec", "docker-exec", "podman-exec", "ssh-exec"}


def variant(name: str) -> Variant:
    """The variant ``name`` (a ``BACKENDS`` entry; a bare backend name works too)."""
    return VARIANTS.get(name) or Variant(name, name)


def variant_spec(name: str) -> tuple[str, dict[str, Any]]:
    """``(backend, overrides)`` of a ``BACKENDS`` entry, for ``get_environment(backend, **overrides)``."""
    chosen = variant(name)
    return chosen.backend, chosen.config()


def variant_cli_args(name: str) -> list[str]:
    """``--env BACKEND -c environment.KEY=VALUE ...``: the command-line options selecting variant ``name``."""
    backend, overrides = variant_spec(name)
    args = ["--env", backend]
    for key, value in overrides.items():
        args += ["-c", f"environment.{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return args


def make_variant(name: str, **overrides: Any) -> Any:
    """A new (not yet started) environment of the ``BACKENDS`` entry ``name``."""
    return variant(name).make(**overrides)


def require_backend(name: str) -> None:
    """Skip (or, under CI, fail) the current test when backend (or variant) ``name`` cannot run here."""
    variant(name).require_available()
