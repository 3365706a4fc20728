"""The kit's contract suite (``swe_sandbox.testing.test_contract``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_contract import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
