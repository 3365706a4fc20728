"""The kit's hardening suite (``swe_sandbox.testing.test_hardening``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_hardening import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
