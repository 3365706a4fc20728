"""Doctests as hidden tests: a module's doctests taken out of its pristine source into a pytest file.

A project whose tests are the doctests of its modules (``doctests: true``: Jinja2 and MarkupSafe
ship no test files) would be graded by docstrings inside the very modules the agent edits: an
agent could edit a doctest and be graded resolved. So the build finds each doctest of the module
with the stdlib's ``doctest.DocTestFinder`` (what pytest's ``--doctest-modules`` runs), on the
pristine source, imported by the interpreter the tests run with (``testruns``), and writes its
examples into ``tests/test_doctests_<module>.py``: one test function a doctest, named after its
qualified name (``jinja2.sandbox.modifies_known_mutable``:
``test_jinja2_sandbox_modifies_known_mutable``), running the examples with
``doctest.DocTestRunner`` against the module as imported from the repository (the module's
namespace as globals, pytest's default option flags, ``ELLIPSIS``, which the doctests ran with),
failing with the doctest's report. Only the doctests that pass on the pristine source are kept
(those grade the task); the file is then the task's hidden test (``test_patch`` adds it), so the
module's docstrings grade nothing.
"""

from __future__ import annotations

import ast
import doctest
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from swe_sandbox.batch.grading import PASSED

from suitelib.spec import Project
from suitelib.testruns import RUN_TIMEOUT_S, run_tests

TESTS_DIR = "tests"
#: pytest's default ``doctest_optionflags`` (the repositories set none): what the doctests ran with.
OPTIONFLAGS = ("ELLIPSIS",)
#: Run by the tests' interpreter (``-I -S``: it sees the repository only): every doctest with an
#: example that runs (pytest skips the others), as JSON.
FIND = """\
import doctest, importlib, json, sys
root, name = sys.argv[1:]
sys.path.insert(0, root)
module = importlib.import_module(name)
names = {flag: key for key, flag in doctest.OPTIONFLAGS_BY_NAME.items()}
found = []
for test in doctest.DocTestFinder().find(module, name):
    if not test.examples or all(e.options.get(doctest.SKIP) for e in test.examples):
        continue
    found.append({"name": test.name, "examples": [
        {"source": e.source, "want": e.want, "exc_msg": e.exc_msg,
         "options": {names[f]: on for f, on in e.options.items()}} for e in test.examples]})
print(json.dumps(found))
"""
#: The examples' indent in the file (a test function's body).
INDENT = " " * 8

HEADER = '''\
"""The doctests of ``{module}``, as pytest tests: hidden tests, added by ``test_patch``.

Taken out of the module's pristine source when the task was built (examples/tasks/build.py:
``suitelib/doctests.py``). Each test runs one doctest's examples with ``doctest.DocTestRunner``
against ``{module}`` as imported from this repository (its namespace as globals, the option
flags below), so the module's own docstrings change no verdict.
"""

import doctest
import importlib
import sys
from pathlib import Path

import pytest

MODULE = {module!r}
SOURCE_ROOT = Path(__file__).resolve().parent.parent{source_root}
OPTIONFLAGS = {flags}


def run_doctest(name, lineno, examples):
    """Run the doctest ``name`` (its examples, at line ``lineno`` of this file) in MODULE's namespace."""
    if str(SOURCE_ROOT) not in sys.path:
        sys.path.insert(0, str(SOURCE_ROOT))
    module = importlib.import_module(MODULE)
    if not Path(module.__file__).resolve().is_relative_to(SOURCE_ROOT):
        pytest.fail(f"{{MODULE}} was imported from {{module.__file__}}, not from {{SOURCE_ROOT}}", pytrace=False)
    test = doctest.DocTestParser().get_doctest(examples, dict(vars(module)), name, __file__, lineno)
    report = []
    if doctest.DocTestRunner(verbose=False, optionflags=OPTIONFLAGS).run(test, out=report.append).failed:
        pytest.fail("".join(report), pytrace=False)
'''


@dataclass
class Doctest:
    """One doctest as the finder found it: its qualified name and its examples."""

    name: str
    examples: list[dict]

    @property
    def function(self) -> str:
        """The test function's name: ``test_`` and the qualified name, ``.`` as ``_``."""
        return "test_" + re.sub(r"\W", "_", self.name)


def module_name(file: str, project: Project) -> str:
    """``src/jinja2/sandbox.py``: ``jinja2.sandbox``; ``src/markupsafe/__init__.py``: ``markupsafe``."""
    path = Path(file)
    if project.layout == "src":
        path = path.relative_to("src")
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_file(module: str) -> str:
    """Where ``module``'s doctests go: ``tests/test_doctests_jinja2_sandbox.py``."""
    return f"{TESTS_DIR}/test_doctests_{module.replace('.', '_')}.py"


def find(repo: Path, project: Project, module: str) -> list[Doctest]:
    """``module``'s doctests (with examples), imported from ``repo`` as the tests' interpreter does.

    Raises:
        RuntimeError: the module does not import.
    """
    root = repo / "src" if project.layout == "src" else repo
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", FIND, str(root), module], cwd=repo,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"finding the doctests of {module} in {repo} failed:\n{done.stderr[-2000:]}")
    return [Doctest(**d) for d in json.loads(done.stdout)]


def _example_text(example: dict) -> str:
    """One example as doctest text at ``INDENT``: its source (``>>>``, ``...``; option directives
    are comments in it), then its expected output."""
    source = example["source"].splitlines()
    lines = [f">>> {source[0]}", *(f"... {line}" if line else "..." for line in source[1:])]
    lines += [line if line else "<BLANKLINE>" for line in example["want"].splitlines()]
    return "".join(f"{INDENT}{line}\n" if line else "\n" for line in lines)


def _literal(text: str) -> str:
    """``text`` as a string literal opened by three quotes and a backslash (its first line is the
    next one), lines kept; backslashes, runs of quotes and control characters escaped.

    Raises:
        RuntimeError: the literal does not read back as ``text``.
    """
    escaped = "".join(c if c == "\n" or (c.isprintable() and c != "\\") else
                      {"\\": "\\\\", "\t": "\\t", "\r": "\\r"}.get(c, c.encode("unicode_escape").decode("ascii"))
                      for c in text)
    escaped = re.sub(r'"(?=")', r'\\"', escaped)  # never two quotes in a row: no closing triple quote
    literal = f'"""\\\n{escaped}"""'
    if ast.literal_eval(literal) != text:
        raise RuntimeError(f"cannot write {text!r} as a string literal")
    return literal


def _parses_back(test: Doctest, text: str) -> bool:
    """Whether doctest's parser reads ``text`` as exactly ``test``'s examples."""
    names = {flag: key for key, flag in doctest.OPTIONFLAGS_BY_NAME.items()}
    parsed = [{"source": e.source, "want": e.want, "exc_msg": e.exc_msg,
               "options": {names[f]: on for f, on in e.options.items()}}
              for e in doctest.DocTestParser().get_examples(text, test.name)]
    return parsed == test.examples


def render(module: str, project: Project, tests: list[Doctest]) -> str:
    """The test file of ``module``'s doctests ``tests``.

    Raises:
        RuntimeError: two doctests make the same function name, or an example does not read back.
    """
    functions = [t.function for t in tests]
    if len(set(functions)) != len(functions):
        raise RuntimeError(f"{module}: two doctests make the same test name ({sorted(functions)})")
    flags = " | ".join(f"doctest.{flag}" for flag in OPTIONFLAGS) or "0"
    text = HEADER.format(module=module, source_root=' / "src"' if project.layout == "src" else "", flags=flags)
    for test in tests:
        examples = "".join(_example_text(e) for e in test.examples)
        if not _parses_back(test, examples):
            raise RuntimeError(f"{test.name}: its examples do not read back from the test file")
        head = f"\n\ndef {test.function}():\n    run_doctest({test.name!r}, "
        # the doctest's line (0-based, as ``DocTest.lineno``): the examples start on the line after
        # ``run_doctest(``'s, so that a failure's report names its line in this file
        lineno = text.count("\n") + head.count("\n") + 1
        text += f"{head}{lineno}, {_literal(examples)})\n"
    return text


def write_tests(repo: Path, project: Project, modules: list[str], tools: Path) -> dict[str, str]:
    """Write the test files of ``modules``' (paths) doctests into ``repo`` and return them
    (``{path: text}``), each holding the doctests that pass in ``repo`` (the pristine source).

    Raises:
        RuntimeError: a module has no doctest, or none of its doctests passes.
    """
    found = {}
    for file in modules:
        module = module_name(file, project)
        found[test_file(module)] = (module, find(repo, project, module))
        if not found[test_file(module)][1]:
            raise RuntimeError(f"{file} has no doctest")
    for path, (module, tests) in found.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(render(module, project, tests), encoding="utf-8")
    statuses = run_tests(repo, tools, project.pytest_args, sorted(found))
    files = {}
    for path, (module, tests) in found.items():
        passing = [t for t in tests if statuses.get(f"{path}::{t.function}") == PASSED]
        if not passing:
            raise RuntimeError(f"none of the doctests of {module} passes in {repo}")
        files[path] = render(module, project, passing)
        (repo / path).write_text(files[path], encoding="utf-8")
    return files
