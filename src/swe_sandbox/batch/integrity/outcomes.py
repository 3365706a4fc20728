"""Test outcomes the code under test cannot rewrite after the fact (the strict policy's channel).

The evaluation writes the grader's pytest plugin (``pytest_plugin.py`` beside this module) into
the sandbox under a random module name, with a fresh 256-bit key in a file beside it, and runs
``eval_command`` with ``plugin_env`` (the plugin loaded first: ``-p`` in ``PYTEST_ADDOPTS``). The plugin reads and
unlinks the key, then appends one authenticated record a line to its outcome file while the tests
run. After the command, the host reads that file and ``verify`` decides what it proves.

Rules (each a reason the log proves nothing, so the instance is unresolved):

- every line must carry a valid HMAC-SHA256 and the next number of the sequence (a forged,
  changed, dropped, replayed or reordered record is a forgery attempt);
- the session must have started and ended (``end`` with pytest's exit status) and nothing may
  follow its end; pytest's exit status must be 0 (all passed) or 1 (some failed) and agree with
  the records (0 with a failed test is a rewritten report);
- no record may say that the parts of pytest that run and report a test were replaced since the
  plugin was imported (``pytest_plugin._WATCHED``);
- a test's status is the *worst* of its records (setup, call, teardown; the report pytest made
  and what ``call.excinfo`` said), never the last one seen.

Statuses (``status_map``'s values): ``PASSED``, ``FAILED``, ``ERROR`` (setup or teardown failed),
``XPASS``; ``SKIPPED`` / ``XFAIL`` only when a ``skip``/``skipif``/``xfail`` marker of the test,
or a ``unittest.skip`` decorator (which live in the protected test files), explains it; ``SKIPPED_BY_CODE`` / ``XFAIL_BY_CODE``
when the code under test called ``pytest.skip`` / ``pytest.xfail`` itself. Under the strict
policy a FAIL_TO_PASS test must be ``PASSED``; a PASS_TO_PASS test ``PASSED``, ``SKIPPED`` or
``XFAIL``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from importlib.resources import files
from typing import Any

from pydantic import BaseModel

PASSED, FAILED, ERROR, XPASS = "PASSED", "FAILED", "ERROR", "XPASS"
SKIPPED, XFAIL = "SKIPPED", "XFAIL"
SKIPPED_BY_CODE, XFAIL_BY_CODE = "SKIPPED_BY_CODE", "XFAIL_BY_CODE"
#: Worst first: a test's status is the first of these that any of its records shows.
SEVERITY = (ERROR, FAILED, XFAIL_BY_CODE, SKIPPED_BY_CODE, XPASS, XFAIL, SKIPPED, PASSED)
#: Statuses that pass a FAIL_TO_PASS / a PASS_TO_PASS test under the strict policy.
F2P_PASSES = frozenset({PASSED})
P2P_PASSES = frozenset({PASSED, SKIPPED, XFAIL})
#: pytest's exit statuses that describe a finished run (``pytest.ExitCode.OK`` and ``TESTS_FAILED``).
FINISHED_EXIT_STATUSES = (0, 1)


class PluginFiles(BaseModel):
    """What one evaluation writes into its sandbox for the plugin."""

    module: str
    """The plugin's random module name (``swe_sandbox_grader_<hex>``)."""
    source: str
    key: str
    """256 bits, hex; the HMAC key is this text's ASCII bytes (the key file holds exactly it)."""

    @property
    def outcome_file(self) -> str:
        """The outcome file's name, in the directory the plugin is written to."""
        return f"{self.module}.outcomes"


class Outcomes(BaseModel):
    """What the outcome file proves."""

    status_map: dict[str, str] = {}
    """``{test id as pytest -rA shows it: status}`` (the module docstring's statuses)."""
    problems: list[str] = []
    """Why the records prove nothing (empty: they are sound)."""
    exitstatus: int | None = None
    """pytest's exit status, from the ``end`` record."""
    records: int = 0

    @property
    def usable(self) -> bool:
        return not self.problems and bool(self.status_map)


def new_plugin() -> PluginFiles:
    """A fresh plugin: a random module name and a 256-bit key."""
    source = files("swe_sandbox.batch.integrity").joinpath("pytest_plugin.py").read_text(encoding="utf-8")
    return PluginFiles(module=f"swe_sandbox_grader_{secrets.token_hex(8)}", source=source,
                       key=secrets.token_hex(32))


def plugin_env(plugin: PluginFiles, directory: str) -> str:
    """Shell ``export`` lines that load ``plugin`` (written to ``directory``) into every pytest the
    next command starts, before anything of the repository's: ``-p`` in ``PYTEST_ADDOPTS`` is
    imported before pytest loads the plugins of installed distributions (``pytest11`` entry
    points), ``conftest.py`` files and test modules.

    The current directory stays on Python's start path as the task's command expects (``python
    -m pytest`` imports the repository's package from there): what could shadow the runner from
    there is a protected path (``patch_policy``), removed before the tests run."""
    return (f"export PYTHONPATH={directory}${{PYTHONPATH:+:$PYTHONPATH}} "
            f"PYTEST_ADDOPTS=\"-p {plugin.module}${{PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}}\" PYTHONNOUSERSITE=1; ")


def verify(text: str, key: str) -> Outcomes:
    """Check the outcome file's ``text`` against ``key`` and read the test statuses from it.

    Returns:
        Outcomes: with ``problems`` set when the records prove nothing (the module docstring's
        rules); ``status_map`` is filled only when they are sound.
    """
    records, problems = _records(text, key)
    result = Outcomes(records=len(records), problems=problems)
    if problems:
        return result
    if not records or records[0].get("k") != "start":
        return Outcomes(records=len(records), problems=["the tests did not start under the grader's plugin"])
    ends = [i for i, r in enumerate(records) if r.get("k") == "end"]
    if not ends:
        return Outcomes(records=len(records), problems=["the pytest session did not end (killed, or it exited early)"])
    if ends[0] != len(records) - 1:
        return Outcomes(records=len(records), problems=["records follow the end of the session"])
    tampered = sorted({name for r in records for name in r.get("tampered") or ()})
    if tampered:
        return Outcomes(records=len(records), problems=[f"the code under test replaced pytest's {', '.join(tampered)}"])
    result.exitstatus = int(records[-1].get("exitstatus", -1))
    result.status_map = _statuses(records)
    result.problems = _exit_problems(result.exitstatus, result.status_map)
    if result.problems:
        result.status_map = {}
    return result


def _records(text: str, key: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Each line's record, checked: its MAC and its number in the sequence. Never raises: the
    text is the code under test's to write into (any bytes, any length)."""
    mac = hmac.new(key.encode("ascii"), digestmod=hashlib.sha256)
    records: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines()):
        digest, _, body = line.partition(" ")
        check = mac.copy()
        check.update(body.encode("utf-8", "backslashreplace"))  # the plugin's bodies are ASCII
        if not hmac.compare_digest(check.hexdigest().encode("ascii"), digest.encode("utf-8", "backslashreplace")):
            return records, [f"outcome record {number + 1} is not the grader's (forged or changed)"]
        try:
            record = json.loads(body)
        except ValueError:  # the grader's MAC over text that is not its JSON: cannot happen unforged
            return records, [f"outcome record {number + 1} is not the grader's (not its JSON)"]
        if not isinstance(record, dict) or record.get("n") != number:
            return records, [f"outcome record {number + 1} is out of sequence (dropped or replayed)"]
        records.append(record)
    return records, []


def _statuses(records: list[dict[str, Any]]) -> dict[str, str]:
    worst: dict[str, str] = {}
    for record in records:
        if record.get("k") != "test":
            continue
        status = _status(record)
        name = str(record.get("id"))
        if name not in worst or SEVERITY.index(status) < SEVERITY.index(worst[name]):
            worst[name] = status
    return worst


def _status(record: dict[str, Any]) -> str:
    """One phase's status: the worse of pytest's report and ``call.excinfo``."""
    when, outcome, truth = record.get("when"), record.get("outcome"), record.get("truth")
    markers = set(record.get("markers") or ())
    failed = FAILED if when == "call" else ERROR
    if outcome == "failed":
        return failed
    if record.get("wasxfail"):
        if outcome == "passed":
            return XPASS
        if "xfail" in markers:  # the test's own (protected) marker expects the failure
            return XFAIL
        return failed if truth == "failed" else XFAIL_BY_CODE
    if truth == "failed":  # the report says otherwise: it was rewritten
        return failed
    if outcome == "skipped" or truth in ("skipped", "xfail-called"):
        marked = (when == "setup" and markers & {"skip", "skipif"}) or "unittest-skip" in markers
        return SKIPPED if marked else SKIPPED_BY_CODE
    return PASSED


def _exit_problems(exitstatus: int, status_map: dict[str, str]) -> list[str]:
    if exitstatus not in FINISHED_EXIT_STATUSES:
        return [f"pytest exited {exitstatus} (interrupted, an internal or usage error, or no tests)"]
    failed = any(s in (FAILED, ERROR) for s in status_map.values())
    if exitstatus == 0 and failed:
        return ["pytest reported success although a test failed (a rewritten report)"]
    if not status_map:
        return ["no test outcome was recorded"]
    return []


#: Bytes of the outcome file read back at most (the records of ~50,000 test phases): the code under
#: test can make the file huge or sparse.
MAX_OUTCOME_BYTES = 10 << 20


def read_command(plugin: PluginFiles, directory: str) -> str:
    """A command printing the outcome file's first ``MAX_OUTCOME_BYTES``: nothing unless it is a
    regular file (not a link, a FIFO or a device the code under test put in its place)."""
    path = f"{directory}/{plugin.outcome_file}"
    return f"if [ -f {path} ] && [ ! -L {path} ]; then head -c {MAX_OUTCOME_BYTES} {path}; fi; true"
