"""Test helpers shared by the unit, conformance and end-to-end tests.

``tests/`` is on ``sys.path`` while pytest runs (``tests/conftest.py`` puts it there), so tests
import these as ``from helpers.openai_server import ScriptedOpenAIServer, tool_call``.
"""
