"""The kit's files suite (``swe_sandbox.testing.test_files``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_files import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
