"""The kit's allow-list suite (``swe_sandbox.testing.test_network``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_network import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
