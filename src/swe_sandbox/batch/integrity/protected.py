"""The paths a graded model patch may not change for grading (DESIGN.md §9, "Rewards that hold").

The evaluation resets each protected path the patch touched to the base commit after applying it
(as SWE-bench resets the test files), or refuses the patch, as the task says:

- :func:`protected_paths`: tests, ``conftest.py``, the runner's configuration files, anything that
  shadows the runner (``DEFAULT_PROTECTED``, or the task's own patterns);
- :func:`stdlib_shadows`: a new module at the root or in ``src/`` named like a standard-library
  module (imported instead of the real one before the grader's plugin loads);
- :func:`runner_config_changed`: shared configuration files (``setup.cfg``, ``pyproject.toml``,
  ``tox.ini``) count only when their test-runner sections change.
"""

from __future__ import annotations

import configparser
import sys
import tomllib
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Any

#: Top-level modules the test runner (pytest and what it imports at start: pluggy, iniconfig,
#: packaging, pygments, exceptiongroup and tomli on old Pythons, py, the shim pytest installs)
#: imports before any test runs. The repository root comes first on ``sys.path`` (``python -m
#: pytest``; pytest's default ``prepend`` import mode inserts a root ``conftest.py``'s directory),
#: so ``<name>.py`` or ``<name>/`` there shadows the real one.
RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "pygments", "exceptiongroup",
                  "tomli")

#: Directories of the repository on ``sys.path`` before pytest loads its plugins: the root (``python
#: -m pytest`` puts the current directory first) and ``src/`` (an editable install of a src-layout
#: project puts it on the path at interpreter start).
START_PATH_DIRS = ("", "src")


def stdlib_shadows(paths: Iterable[str]) -> dict[str, str]:
    """``{path: module}`` for each of ``paths`` that is a module or package directly in one of
    ``START_PATH_DIRS`` named like a standard-library module (``shlex.py``, ``json/__init__.py``):
    imported there instead of the real one by pytest's start-up, it runs before the grader's
    plugin. Only a *new* such file is an attack (the caller checks the base commit: a project's own
    module of that name is its code)."""
    found = {}
    for path in paths:
        head, _, rest = path.partition("/")
        where, name = ("src", rest) if head == "src" and rest else ("", path)
        module = name.split("/", 1)[0].removesuffix(".py")
        if (name.endswith(".py") or "/" in name) and module in sys.stdlib_module_names:
            found[path] = f"{where + '/' if where else ''}{module}"
    return found


#: The default protected patterns (see :func:`protected_paths` for the syntax), each with its reason:
DEFAULT_PROTECTED: tuple[str, ...] = (
    # pytest imports every conftest.py on the collection path: its hooks rewrite reports
    # (pytest_runtest_makereport), deselect or skip tests, or load plugins (pytest_plugins)
    "conftest.py",
    # pytest's own configuration files, the first in its lookup order (docs.pytest.org/en/stable/
    # reference/customize.html): they take precedence even when empty; addopts = -p loads a plugin
    "pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini",
    # tox.ini: its [pytest] section is pytest configuration, its [testenv] commands are the test run
    # when the eval command runs tox; noxfile.py: the same for nox
    "tox.ini", "noxfile.py",
    # test directories at any depth: SWE-bench resets the test files; a tests/__init__.py can
    # monkeypatch reporting, helpers there can make assertions pass
    "**/tests/**", "**/test/**", "**/testing/**",
    # test modules at any depth (pytest's default python_files)
    "test_*.py", "*_test.py",
    # the runner of SWE-bench's non-pytest repositories: sympy's bin/test and its runtests.py
    # (sympy/utilities/runtests.py before sympy.testing), Django's tests/runtests.py; sympy's
    # pytest.py helpers (raises, XFAIL) are what its tests assert with: any pytest.py, any depth
    "bin/test", "runtests.py", "pytest.py",
    # root-level shadows of the runner's modules (RUNNER_MODULES)
    *(pattern for module in RUNNER_MODULES for pattern in (f"{module}.py", f"{module}/**")),
    # imported by site at interpreter start from any sys.path entry (an editable install puts the
    # repository root or src/ there): any depth
    "sitecustomize.py", "usercustomize.py",
    # path configuration files: a line starting with "import" runs at interpreter start
    "*.pth",
    # editable-install metadata in the working tree: an entry_points.txt [pytest11] entry registers
    # a plugin pytest loads automatically (whatever the case: see METADATA_SUFFIXES)
    "**/*.egg-info/**", "**/*.dist-info/**",
    # pytest's cache: --lf, --ff and --sw choose the tests to run from it
    "**/.pytest_cache/**",
    # git's per-tree configuration: attributes choose filters and line endings when files are
    # reset, submodules fetch code; an ignored file survives `git clean -fd` (the reset between
    # apply attempts)
    ".gitattributes", ".gitmodules", ".gitignore",
)


#: Directories ``importlib.metadata`` reads distributions from, compared in lower case as it does
#: (``Lookup`` in CPython's ``importlib/metadata``): ``rtplug-1.0.DIST-INFO/entry_points.txt`` is a
#: distribution whose ``[pytest11]`` plugin pytest loads before any other (found by a red team).
#: Always protected, whatever the task's patterns.
METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg")


def is_metadata(path: str) -> bool:
    """Whether ``path`` is in (or is) a distribution's metadata directory or an egg, in any case."""
    return any(part.lower().endswith(METADATA_SUFFIXES) or part.lower() == "egg-info" for part in path.split("/"))


def protected_paths(paths: Iterable[str], patterns: Sequence[str] = DEFAULT_PROTECTED,
                    extra: Iterable[str] = ()) -> list[str]:
    """The ``paths`` the patch may not change for grading.

    Pattern syntax (``fnmatch`` per path component, case-sensitive as on Linux): a pattern without
    ``/`` matches the file name at any depth (``conftest.py``); one with ``/`` is anchored at the
    repository root (``pytest/**``); ``**`` matches any number of components, and a trailing ``**``
    one or more (``dir/**``: everything under ``dir``, not ``dir`` itself).

    Args:
        paths (Iterable[str]): repository-relative paths the patch touches (``PatchCheck.paths``).
        patterns (Sequence[str]): the protected patterns. Defaults to :data:`DEFAULT_PROTECTED`.
        extra (Iterable[str]): exact paths also protected: the files ``test_patch`` touches
            (SWE-bench resets those to the base commit before applying it). Defaults to none.
            Distribution metadata (:func:`is_metadata`) is protected whatever ``patterns`` say.

    Returns:
        list[str]: the protected ones among ``paths``, sorted and unique.
    """
    exact = set(extra)
    return sorted({path for path in paths
                   if path in exact or is_metadata(path) or any(_matches(p, path) for p in patterns)})


def _matches(pattern: str, path: str) -> bool:
    if "/" not in pattern:
        return fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    return _matches_parts(pattern.split("/"), path.split("/"))


def _matches_parts(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        if not rest:
            return bool(parts)
        return any(_matches_parts(rest, parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _matches_parts(rest, parts[1:])


# ---------------------------------------------------------------------------------------------------
# the test runner's sections of the shared configuration files

#: Shared configuration files that hold test-runner sections, compared by :func:`runner_config_changed`
#: (by file name, at any depth) rather than protected whole: honest patches change their other parts.
RUNNER_CONFIG_FILES = ("setup.cfg", "pyproject.toml", "tox.ini")
#: The ini sections pytest reads: setup.cfg ``[tool:pytest]`` (pytest >= 9 fails on a bare
#: ``[pytest]`` there, older ones read it: both count); tox.ini ``[pytest]`` (customize.html).
INI_RUNNER_SECTIONS = {"setup.cfg": ("tool:pytest", "pytest"), "tox.ini": ("pytest",)}
#: setuptools' ``[options.entry_points]`` key whose entries pytest loads as plugins (after a reinstall).
INI_ENTRY_POINTS = ("options.entry_points", "pytest11")
#: pyproject.toml tables: ``[tool.pytest]`` (pytest 9's native table, and ``[tool.pytest.ini_options]``
#: inside it), and the pytest11 entry points of PEP 621 and of poetry.
TOML_RUNNER_KEYS = (("tool", "pytest"), ("project", "entry-points", "pytest11"), ("tool", "poetry", "plugins", "pytest11"))
_NO_DEFAULT_SECTION = "\0"  # configparser's [DEFAULT] would spill into every section; pytest's reader has none
_INI_COMMENT = "#;"


class _CaseKeepingParser(configparser.ConfigParser):
    """configparser keeping option names' case, as pytest's ini reader (``iniconfig``) does: a
    lower-casing parser would merge ``addopts`` and ``ADDOPTS`` and miss which one pytest reads."""

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def runner_config_changed(path: str, before: str | None, after: str | None) -> bool:
    """Whether the test-runner sections of a shared configuration file differ.

    Sections compared (:data:`INI_RUNNER_SECTIONS`, :data:`INI_ENTRY_POINTS`,
    :data:`TOML_RUNNER_KEYS`): by parsed values, so an honest change elsewhere in the file (even a
    whitespace one) is no change. INI files are parsed with configparser (no interpolation,
    ``strict=False``, option names' case kept, no ``[DEFAULT]`` spill-over) and also read with
    pytest's own ini reader's section rule (``iniconfig``: a ``[x#]`` line there is no section but a
    value continuation), their runner sections' lines compared; TOML with ``tomllib`` (pytest's).

    Args:
        path (str): the file's path; only its name counts (:data:`RUNNER_CONFIG_FILES`).
        before (str | None): the file's text at the base commit; None: the file is absent.
        after (str | None): its text with the patch applied; None: absent.

    Returns:
        bool: True when the runner sections differ; when ``after`` does not parse but ``before``
        does, or the other way round (pytest may read it otherwise: conservative); when neither
        parses and the texts differ. False for a file not in :data:`RUNNER_CONFIG_FILES`.
    """
    name = path.rsplit("/", 1)[-1]
    if name not in RUNNER_CONFIG_FILES:
        return False
    old, new = _runner_view(name, before), _runner_view(name, after)
    if old is None and new is None:
        return before != after
    return old != new


def _runner_view(name: str, text: str | None) -> dict[str, Any] | None:
    """What the runner reads of the file (an absent file reads as an empty one); None: unparsable."""
    try:
        if name == "pyproject.toml":
            return _toml_view(text or "")
        return _ini_view(text or "", INI_RUNNER_SECTIONS[name])
    except (configparser.Error, tomllib.TOMLDecodeError):
        return None


def _toml_view(text: str) -> dict[str, Any]:
    data = tomllib.loads(text)
    view: dict[str, Any] = {}
    for keys in TOML_RUNNER_KEYS:
        value: Any = data
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        view[".".join(keys)] = value
    return view


def _ini_view(text: str, sections: Sequence[str]) -> dict[str, Any]:
    parser = _CaseKeepingParser(interpolation=None, strict=False, default_section=_NO_DEFAULT_SECTION)
    parser.read_string(text)
    view: dict[str, Any] = {f"[{s}]": dict(parser.items(s, raw=True)) for s in sections if parser.has_section(s)}
    section, key = INI_ENTRY_POINTS
    entries = parser.items(section, raw=True) if parser.has_section(section) else []
    view[key] = sorted((k, v) for k, v in entries if k.lower() == key)
    view["lines"] = _iniconfig_lines(text, sections)
    return view


def _iniconfig_lines(text: str, sections: Sequence[str]) -> dict[str, list[str]]:
    """The lines of ``sections`` as ``iniconfig`` (pytest's ini reader) splits the file into
    sections (``str.splitlines``, its header rule), blank and comment lines dropped, each rstripped."""
    lines: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _iniconfig_header(line)
        if header is not None:
            current = lines.setdefault(header, []) if header in sections else None
            if current is not None:
                current.append(f"[{header}]")  # a repeated section (an iniconfig error) shows
        elif current is not None and line.strip() and line.lstrip()[0] not in _INI_COMMENT:
            current.append(line.rstrip())
    return lines


def _iniconfig_header(line: str) -> str | None:
    """The section a line opens for ``iniconfig`` (``_parseline``: it starts with ``[`` and, cut at
    the first comment character and right-stripped, ends with ``]``), else None."""
    if not line.startswith("["):
        return None
    for char in _INI_COMMENT:
        line = line.split(char)[0]
    line = line.rstrip()
    return line[1:-1] if line.endswith("]") else None
