"""The kit's snapshot, fork and reset suite (``swe_sandbox.testing.test_snapshot``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_snapshot import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
