"""The kit's asyncio suite (``swe_sandbox.testing.test_async``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_async import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
