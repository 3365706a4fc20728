"""The kit's streaming suite (``swe_sandbox.testing.test_stream``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_stream import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
