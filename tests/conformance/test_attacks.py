"""The kit's attacks suite (``swe_sandbox.testing.test_attacks``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_attacks import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
