"""The grader's pytest plugin: runs INSIDE the evaluation sandbox, in the pytest process under test.

Not imported by swe-sandbox: ``swe_sandbox.batch.integrity.outcomes`` writes this file into the
sandbox under a random module name, with a key file beside it, and has ``eval_command`` load it
first (``-p`` in ``PYTEST_ADDOPTS``: before the plugins of installed distributions, any
``conftest.py`` or test module). Standard
library and pytest only; Python >= 3.6 and pytest >= 3.

At import it reads the key and unlinks the key file (only the first pytest process of the
command gets it; later ones, e.g. pytest-xdist workers, stay silent), and opens the outcome file
append-only. Then it writes one record a line for the session's start, each test phase's report
(as the outermost ``pytest_runtest_makereport`` wrapper sees it, and what ``call.excinfo`` says
happened), and the session's end with pytest's exit status. Each record is numbered and carries
HMAC-SHA256 over its bytes, so a record cannot be forged, changed, dropped or replayed by code
that does not hold the key: a line printed by the code under test is not a record, and a record
the code under test deletes leaves a gap the host sees.

It also notes, in every record, which of the parts of pytest that run a test and report it
(``_WATCHED``) are no longer what they were when it was imported: code under test that rewrites
them (a no-op ``runtest``, a ``CallInfo`` that swallows failures) makes the records prove nothing.

What it cannot stop: code under test runs in this very process and can reach this module's
state (the HMAC object, the file descriptor, ``_ORIGINAL``) through the interpreter; the README's
Security section says so.
"""

import hashlib
import hmac
import json
import os
import sys

import pytest

_NAME = __name__
_HERE = os.path.dirname(os.path.abspath(__file__))
_dumps, _write, _new_hmac = json.dumps, os.write, hmac.new


def _load():
    key_path = os.path.join(_HERE, _NAME + ".key")
    try:
        with open(key_path, "rb") as handle:
            key = handle.read()
        os.unlink(key_path)
    except OSError:
        return None, None
    fd = os.open(os.path.join(_HERE, _NAME + ".outcomes"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    return _new_hmac(key, digestmod=hashlib.sha256), fd


_MAC, _FD = _load()
_STATE = {"n": 0, "truth": {}}


def _emit(kind, **fields):
    if _MAC is None:
        return
    fields.update(k=kind, n=_STATE["n"])
    _STATE["n"] += 1
    body = _dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    mac = _MAC.copy()
    mac.update(body)
    line = mac.hexdigest().encode("ascii") + b" " + body + b"\n"
    while line:
        line = line[_write(_FD, line):]


_emit("start", pytest=getattr(pytest, "__version__", "?"), python=sys.version.split()[0], pid=os.getpid())

#: The parts of pytest (and pluggy) that run a test and make its report: ``(module, dotted name)``.
#: Code under test that replaces one (a no-op ``runtest``, a ``CallInfo.from_call`` that swallows
#: the failure, a hook caller that skips this plugin) changes what they are; each record says
#: which changed since this plugin was imported, before any code of the repository.
_WATCHED = (
    ("_pytest.runner", "CallInfo.from_call"), ("_pytest.runner", "call_runtest_hook"),
    ("_pytest.runner", "call_and_report"), ("_pytest.runner", "runtestprotocol"),
    ("_pytest.runner", "pytest_runtest_call"), ("_pytest.python", "Function.runtest"),
    ("_pytest.python", "pytest_pyfunc_call"), ("_pytest.unittest", "TestCaseFunction.runtest"),
    ("_pytest.reports", "TestReport.from_item_and_call"), ("_pytest.skipping", "pytest_runtest_makereport"),
    ("_pytest.outcomes", "fail"), ("_pytest.outcomes", "skip"), ("_pytest.outcomes", "xfail"),
    ("pluggy._hooks", "HookCaller.__call__"), ("pluggy._hooks", "_HookCaller.__call__"),
    ("pluggy._manager", "PluginManager._hookexec"), ("pluggy._callers", "_multicall"),
    ("unittest.case", "TestCase.run"), ("unittest.case", "TestCase.__call__"),
    ("hmac", "HMAC.copy"), ("hmac", "HMAC.update"), ("hmac", "HMAC.hexdigest"), ("os", "write"),
)


def _lookup(module, dotted):
    found = sys.modules.get(module)
    for part in dotted.split("."):
        found = None if found is None else found.__dict__.get(part) if hasattr(found, "__dict__") else None
    return found


_ORIGINAL = [(m, d, _lookup(m, d)) for m, d in _WATCHED]


def _tampered():
    return ["%s.%s" % (m, d) for m, d, then in _ORIGINAL if _lookup(m, d) is not then]


def _markers(item):
    """The test's own skip/xfail markers, and ``unittest-skip`` for a ``unittest.skip`` decorator
    on its method or class (pytest runs that skip in the call phase)."""
    names = set()
    for name in ("skip", "skipif", "xfail"):
        finder = getattr(item, "iter_markers", None)
        found = list(finder(name=name)) if finder is not None else [item.get_marker(name)]
        if any(m is not None for m in found):
            names.add(name)
    for owner in (getattr(item, "obj", None), getattr(item, "cls", None)):
        if getattr(owner, "__unittest_skip__", False):
            names.add("unittest-skip")
    return sorted(names)


def _truth(call):
    """What ``call.excinfo`` says happened, whatever the report says."""
    excinfo = call.excinfo
    if excinfo is None:
        return "passed"
    if excinfo.errisinstance(pytest.xfail.Exception):
        return "xfail-called"
    if excinfo.errisinstance(pytest.skip.Exception):
        return "skipped"
    return "failed"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    yield
    _STATE["truth"][(item.nodeid, call.when)] = (_truth(call), _markers(item))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    truth, markers = _STATE["truth"].pop((report.nodeid, report.when), (None, None))
    _emit("test", id=_shown(report.nodeid), when=report.when, outcome=report.outcome,
          wasxfail=hasattr(report, "wasxfail"), truth=truth, markers=markers, tampered=_tampered())


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report):
    if report.outcome == "failed":
        _emit("collect", id=_shown(report.nodeid), outcome=report.outcome)


_CONFIG = []  # type: list


def pytest_configure(config):
    _CONFIG.append(config)


def _shown(nodeid):
    """The id as pytest's ``-rA`` summary shows it (relative to the invocation directory)."""
    if _CONFIG and hasattr(_CONFIG[0], "cwd_relative_nodeid"):
        return _CONFIG[0].cwd_relative_nodeid(nodeid)
    return nodeid


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _emit("end", exitstatus=int(exitstatus), testsfailed=int(getattr(session, "testsfailed", 0) or 0),
          tampered=_tampered())
