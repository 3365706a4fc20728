"""The kit's command-options suite (``swe_sandbox.testing.test_exec_options``), run over our variants (tests/conftest.py)."""

from swe_sandbox.testing.test_exec_options import *  # noqa: F401,F403 - the kit's tests and fixtures, collected here
