"""pytest plugin (entry point ``pytest11``) running the conformance kit against a named backend::

    pytest --pyargs swe_sandbox.testing --swe-sandbox-backend NAME

NAME is a backend registered in the ``swe_sandbox.environments`` entry-point group (or built in),
a preset name, or a YAML environment file. Inert unless asked: without the option it only adds the
option and the ``swe_sandbox_requires`` marker; with it, it registers the kit's fixtures
(``swe_sandbox.testing.fixtures``).
"""

from __future__ import annotations

import pytest

from swe_sandbox.errors import ConfigError
from swe_sandbox.testing.kit import REQUIRES_MARKER, Variant

FIXTURES = "swe_sandbox.testing.fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("swe-sandbox", "swe-sandbox conformance kit")
    group.addoption("--swe-sandbox-backend", dest="swe_sandbox_backend", default=None, metavar="NAME",
                    help="run the swe_sandbox.testing kit against this backend (entry-point name, "
                         "preset name or YAML file)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{REQUIRES_MARKER}(*capabilities): the test needs these "
                                       "capabilities of the backend (swe_sandbox.capabilities)")
    name = config.getoption("swe_sandbox_backend")
    if name and not config.pluginmanager.has_plugin(FIXTURES):
        import importlib

        try:
            Variant.from_name(name)  # a bad NAME is one usage error, not one error per test
        except ConfigError as exc:
            raise pytest.UsageError(f"--swe-sandbox-backend {name}: {exc}") from None
        config.pluginmanager.register(importlib.import_module(FIXTURES), FIXTURES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The kit collected from the package (``--pyargs swe_sandbox.testing``) without a backend to
    test is a usage error, said once (its fixtures exist only with the option)."""
    if config.getoption("swe_sandbox_backend") or config.pluginmanager.has_plugin(FIXTURES):
        return
    if any(getattr(item.module, "__name__", "").startswith(f"{__package__}.") for item in items
           if isinstance(item, pytest.Function)):
        raise pytest.UsageError("the swe_sandbox.testing kit needs a backend: --swe-sandbox-backend NAME "
                                "(a registered backend, a preset name or a YAML environment file)")
