"""What of a graded model patch may be applied: decided on the host, before the evaluation sandbox
sees it (DESIGN.md §9, "Rewards that hold").

The patch is hostile: a reward-hacking policy wrote it, and everything it names is read as an
attacker would have a patch program read it. Two decisions live here:

- :func:`check_patch`: may the patch be applied at all? It is parsed with ``unidiff`` (which lines
  are hunk bodies), and every header line outside the hunks is read the way ``git apply -p1`` and
  GNU ``patch -p1`` (the last command of SWE-bench's apply chain) read it, so a name either program
  would write is checked. Refused: paths outside the repository or into ``.git``, symlinks, binary
  hunks and compiled files (unless allowed), and text that only ``patch(1)`` reads as a diff.
- :func:`symlink_probe`: a shell command run in the evaluation sandbox that names the patch's
  paths that are, or go through, a symlink in the working tree (the host cannot see that tree).

What the patch may not change for grading (the protected paths) is ``protected``'s.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from io import StringIO
from typing import NamedTuple

from pydantic import BaseModel
from unidiff import PatchedFile, PatchSet

DEV_NULL = "/dev/null"
#: Suffixes of compiled code (compared case-insensitively): Python bytecode (``.pyc``, ``.pyo``; a
#: sourceless or stale ``.pyc`` is imported instead of the source), native extensions and libraries
#: (``.pyd``, ``.so``, ``.dll``, ``.dylib``, ``.o``, ``.a``), Java (``.class``, ``.jar``), Python
#: distributions (``.whl``, ``.egg``), Windows executables (``.exe``), Emacs bytecode (``.elc``).
COMPILED_SUFFIXES = (".pyc", ".pyo", ".pyd", ".so", ".dll", ".dylib", ".o", ".a", ".class", ".jar",
                     ".whl", ".egg", ".exe", ".elc")
#: Python's bytecode cache directory: anything under it is compiled.
PYCACHE_DIR = "__pycache__"
#: git's own directory, never patched (compared case-insensitively, as git's ``verify_path`` does).
GIT_DIR = ".git"
#: The git modes of a regular file (``100664`` is the legacy group-writable one git still reads).
REGULAR_MODES = ("100644", "100755", "100664")
SYMLINK_MODE = "120000"

_SO_VERSION = re.compile(r"\.so(\.\d+)+$")  # a versioned shared library: libfoo.so.1.2
_OCTAL_ESCAPE = re.compile(r"[0-3][0-7]{2}")  # git's C-style quoting writes a byte as exactly 3 digits
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}

_GIT_HEADER = "diff --git "
_TRADITIONAL_HEADERS = ("--- ", "+++ ")
# name lines of git's extended header (git-diff(1), "Generating patches with -p"); git reads their
# names with no a/ b/ prefix (apply.c strips p_value - 1 components from them)
_NAME_HEADERS = ("rename from ", "rename to ", "rename old ", "rename new ", "copy from ", "copy to ")
_SOURCE_HEADERS = ("rename from ", "rename old ", "copy from ")
_INDEX_NAME_HEADER = "Index: "  # svn/cvs-style: GNU patch takes its file name from it
_MODE_HEADERS = ("new file mode ", "deleted file mode ", "old mode ", "new mode ")
_INDEX_HEADER = "index "  # index <sha>..<sha> <mode>
# in a git header, git apply takes "--- /dev/null" for a created file only with "new file mode"
# (apply.c gitdiff_verify_name), "+++ /dev/null" for a deleted one only with "deleted file mode"
_NULL_SIDE_MODES = (("---", "new file mode"), ("+++", "deleted file mode"))
_BINARY_FILES = "Binary files "
_BINARY_HEADERS = ("GIT binary patch", _BINARY_FILES)
# Text GNU patch reads as a diff but unidiff (and git apply) skip as garbage: a context diff
# (``diff -c``), a normal diff or an ed script (``patch`` runs ``ed`` for one), at any indentation
# (``patch`` strips the indentation of a diff pasted into a mail), and indented unified headers.
_FOREIGN_DIFF = re.compile(r"\*{3} |\*{15}|\d+(,\d+)?[acd](\d+(,\d+)?)?\r?$")
_INDENTED_HEADER = re.compile(r"[ \t]+(--- |\+\+\+ |@@ |diff --git |Index:)")
_MAX_SHOWN = 200  # characters of a parser message or a foreign line quoted in a refusal
#: Linux's PATH_MAX (``<linux/limits.h>``): no path git or patch can write is longer.
PATH_MAX = 4096
_MAX_HEADER = 2 * PATH_MAX + 64  # a diff --git or Binary files line: two names and their words
# unidiff's Binary-files regex backtracks for seconds on a long line it does not match, its URI-like
# diff --git regex on a line of many "://": such lines are refused before it sees them (git writes
# none: a tab would be quoted, "//" is an empty path component)
_BINARY_LINE = "Binary file"
_BINARY_ENDS = (" differ", " has changed")
_URI_MARK = "://"


class PatchCheck(BaseModel):
    """What :func:`check_patch` decided about one patch."""

    paths: list[str]
    """Every repository-relative path the patch touches, old and new names (``/dev/null``
    excluded), sorted and unique; read as ``git apply -p1`` and ``patch -p1`` would, so it may also
    hold a name only one of them uses (safe: a path too many is only checked once more)."""
    refused: list[str]
    """One readable sentence per refusal, naming the path; empty: the patch may be applied."""

    @property
    def allowed(self) -> bool:
        """bool: True when nothing was refused (the patch may be applied)."""
        return not self.refused


class _Name(NamedTuple):
    """A file name as written in a header line (unquoted), and how many leading components
    ``-p1`` strips from it (1 for ``a/`` ``b/`` names, 0 for git's ``rename from`` lines)."""

    raw: str
    strip: int

    @property
    def path(self) -> str:
        """The repository-relative path: ``raw`` less its first component when ``strip`` is 1, as
        ``git apply -p1`` reads it (a name without ``/`` is kept whole: checking it costs nothing)."""
        return self.raw.split("/", 1)[1] if self.strip and "/" in self.raw else self.raw


@dataclass
class _Entry:
    """One file diff as its header lines describe it: from a ``diff --git`` line to the next
    (entry 0 holds what comes before the first, e.g. all of a patch without git headers)."""

    line_no: int
    names: list[_Name] = field(default_factory=list)
    loose: list[_Name] = field(default_factory=list)
    """GNU patch's reading of the ``diff --git`` line (whitespace-separated); it uses it only when
    the entry has no ``---``/``+++`` lines (seen with patch 2.7.6), so only then are these names
    listed; they are checked always."""
    traditional: bool = False
    null_sides: set[str] = field(default_factory=set)
    """The ``---``/``+++`` lines naming ``/dev/null``."""
    modes: list[tuple[str, str]] = field(default_factory=list)
    binary: bool = False
    sources: list[tuple[str, _Name]] = field(default_factory=list)

    def all_names(self) -> list[_Name]:
        return self.names + ([] if self.traditional else self.loose)

    def shown(self) -> str:
        names = [name.path for name in self.all_names() if name.path]
        return names[0] if names else f"the file diff at line {self.line_no}"


@dataclass
class _Scan:
    entries: list[_Entry] = field(default_factory=lambda: [_Entry(0)])
    refused: list[str] = field(default_factory=list)


def check_patch(patch: str, *, allow_binary: bool = False, allow_compiled: bool = False) -> PatchCheck:
    """Decide whether the graded ``patch`` may be applied, and list the paths it touches.

    ``unidiff`` decides the structure (which lines are hunk bodies); every other line is read as a
    header, as ``git apply -p1`` and GNU ``patch -p1`` read it (both are in the apply chain, after
    SWE-bench's harness), so every name either would write is checked. Refused, one sentence each:

    - a patch ``unidiff`` cannot parse, or a non-blank one in which it finds no file diff, or with
      a ``diff --git`` or ``Binary files`` line git does not write and unidiff's regexes would
      spend seconds to minutes on (refused before parsing: the grader must not stall);
    - a path that is empty, absolute, has a ``..`` or a ``.git`` component (any case; ``.git`` as a
      file too), holds a control character (or bytes that are not UTF-8), or is not canonical (an
      empty or ``.`` component), as git's ``verify_path`` refuses them, for ``patch(1)`` does not;
    - a symlink created, changed or deleted (mode 120000 in a ``new file mode``, ``new mode``,
      ``old mode``, ``deleted file mode`` or ``index`` line), or any mode that is not a regular
      file's (a submodule, a directory): a symlink may point outside the repository;
    - a binary hunk (``GIT binary patch``, ``Binary files ... differ``) unless ``allow_binary``;
    - a compiled file (:data:`COMPILED_SUFFIXES`, or under a ``__pycache__`` directory) unless
      ``allow_compiled``: a stale or sourceless ``.pyc`` runs instead of the source;
    - a rename or copy whose source is refused;
    - in a git header, ``--- /dev/null`` without ``new file mode`` or ``+++ /dev/null`` without
      ``deleted file mode``: git apply then takes it for the file ``dev/null``;
    - a line outside every hunk that ``patch(1)`` reads as a diff (context, normal, ed script, or
      an indented header) though ``unidiff`` does not: what is checked must be what is applied.

    Args:
        patch (str): the model patch, as graded.
        allow_binary (bool): accept binary hunks. Defaults to False.
        allow_compiled (bool): accept compiled files. Defaults to False.

    Returns:
        PatchCheck: the paths and the refusals; a blank patch is allowed and touches nothing.
    """
    if not patch.strip():
        return PatchCheck(paths=[], refused=[])
    hazards = _parser_hazards(patch)
    if hazards:
        return PatchCheck(paths=[], refused=hazards)
    try:
        patchset = PatchSet(patch)
    except Exception as exc:  # hostile input: any parser failure is a refusal, never a crash
        return PatchCheck(paths=[], refused=[f"not a unified diff: {str(exc)[:_MAX_SHOWN]}"])
    if not patchset:
        return PatchCheck(paths=[], refused=["not a unified diff: no file diff found in a non-blank patch"])
    scan = _scan(patch, {line.diff_line_no for file in patchset for hunk in file for line in hunk})
    names = [name for entry in scan.entries for name in entry.all_names()]
    names += [_Name(raw, 1) for file in patchset for raw in _unidiff_names(file)]
    checked = names + [name for entry in scan.entries if entry.traditional for name in entry.loose]
    refused = scan.refused + [why for name in checked for why in _path_refusals(name, allow_compiled)]
    refused += [why for entry in scan.entries for why in _entry_refusals(entry, allow_binary, allow_compiled)]
    if not allow_binary:
        refused += [_binary_refusal(_Name(_unidiff_names(file)[-1], 1).path)
                    for file in patchset if file.is_binary_file and _unidiff_names(file)]
    return PatchCheck(paths=sorted({name.path for name in names if name.path}), refused=_unique(refused))


def _parser_hazards(patch: str) -> list[str]:
    """Refusals of the lines unidiff would take super-linear time on (a hostile patch must not
    stall the grader), before it parses them: ``diff --git`` and ``Binary files`` lines longer
    than two paths can be, a ``diff --git`` line with ``://``, a ``Binary files`` line with a
    tab or not ending as git's and hg's do. These lines start so: they are never hunk bodies."""
    refused = []
    for number, line in enumerate(StringIO(patch), 1):
        line = line.rstrip("\n").removesuffix("\r")
        git, binary = line.startswith(_GIT_HEADER), line.startswith(_BINARY_LINE)
        odd = (git and _URI_MARK in line) or (binary and ("\t" in line or not line.endswith(_BINARY_ENDS)))
        if (git or binary) and (odd or len(line) > _MAX_HEADER):
            refused.append(f"not a unified diff: line {number} ({line[:_MAX_SHOWN]!r}) is a header git "
                           "does not write")
    return refused


def _scan(patch: str, hunk_lines: set[int | None]) -> _Scan:
    """Every line outside the hunk bodies, read as a header (numbered as unidiff numbers them)."""
    scan = _Scan()
    for number, line in enumerate(StringIO(patch), 1):
        if number not in hunk_lines:
            _read_header(scan, number, line.rstrip("\n"))
    return scan


def _read_header(scan: _Scan, number: int, line: str) -> None:
    """Record what one header line names."""
    entry = scan.entries[-1]
    if line.startswith(_GIT_HEADER):
        text = line[len(_GIT_HEADER):]
        scan.entries.append(_Entry(number, names=_named(scan, number, _pair(text, " "), 1),
                                   loose=_named(scan, number, _tokens(text), 1)))
    elif line.startswith(_TRADITIONAL_HEADERS):
        entry.traditional = True
        raws = _traditional_names(line[4:])
        entry.names += _named(scan, number, raws, 1)
        if DEV_NULL in raws:
            entry.null_sides.add(line[:3])
    elif line.startswith(_NAME_HEADERS):
        prefix = next(prefix for prefix in _NAME_HEADERS if line.startswith(prefix))
        names = _named(scan, number, _plain_names(line[len(prefix):]), 0)
        entry.names += names
        if prefix in _SOURCE_HEADERS:
            entry.sources += [(prefix.split()[0], name) for name in names]
    elif line.startswith(_INDEX_NAME_HEADER):  # GNU patch may strip it or not: both readings
        raws = _plain_names(line[len(_INDEX_NAME_HEADER):])
        entry.names += _named(scan, number, raws, 0) + _named(scan, number, raws, 1)
    else:
        _read_other(scan, number, line)


def _read_other(scan: _Scan, number: int, line: str) -> None:
    """Record a binary marker, a mode, or a line that only ``patch(1)`` reads as a diff."""
    entry = scan.entries[-1]
    mode = _mode(line)
    if line.startswith(_BINARY_HEADERS):
        entry.binary = True
        if line.startswith(_BINARY_FILES):
            text = line[len(_BINARY_FILES):].removesuffix(" differ")
            entry.names += _named(scan, number, _pair(text, " and "), 1)
    elif mode is not None:
        entry.modes.append((mode, line))
    elif _FOREIGN_DIFF.match(line.lstrip(" \t")) or _INDENTED_HEADER.match(line):
        scan.refused.append(f"line {number} ({line[:_MAX_SHOWN]!r}) reads as a diff to patch(1), which runs "
                            "when git apply fails, but not to the unified-diff parser")


def _named(scan: _Scan, number: int, raws: Iterable[str | None], strip: int) -> list[_Name]:
    """``raws`` as names (``/dev/null`` dropped); a quoted name git cannot read is a refusal."""
    names = []
    for raw in raws:
        if raw is None:
            scan.refused.append(f"line {number} holds a quoted path that git cannot read")
        elif raw != DEV_NULL:
            names.append(_Name(raw, strip))
    return names


def _mode(line: str) -> str | None:
    """The git file mode a header line sets or states, else None."""
    if line.startswith(_MODE_HEADERS):
        return line.rsplit(" ", 1)[-1]
    words = line.split()
    return words[2] if line.startswith(_INDEX_HEADER) and len(words) == 3 else None


def _read_quoted(text: str) -> tuple[str | None, str]:
    """Read the C-style quoted name ``text`` starts with (git's ``quote_c_style``: ``\\t``,
    ``\\n``, ``\\"``, ``\\\\``, ... and ``\\ooo`` for a byte, the bytes UTF-8); returns it (None if
    git's ``unquote_c_style`` would refuse it) and the text after the closing quote."""
    out, i = bytearray(), 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return out.decode("utf-8", "surrogateescape"), text[i + 1:]
        if char != "\\":
            out += char.encode("utf-8", "surrogatepass")  # a surrogate stays one: refused as not UTF-8
            i += 1
        elif octal := _OCTAL_ESCAPE.match(text, i + 1):
            out.append(int(octal.group(), 8))
            i += 4
        elif text[i + 1:i + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[text[i + 1]])
            i += 2
        else:
            return None, ""
    return None, ""  # no closing quote


def _pair(text: str, separator: str) -> Sequence[str | None]:
    """The two names of a ``diff --git`` (or ``Binary files``) line, as git's ``git_header_name``
    reads them: a quoted name ends at its closing quote; two unquoted names are split where they
    agree past their first component (``a/NAME b/NAME``). Where they do not (a rename) git takes
    no name from this line; the first split is returned (GNU patch's reading is :func:`_tokens`)."""
    if text.startswith('"'):
        first, rest = _read_quoted(text)
        rest = rest.removeprefix(separator)
        return [first, _read_quoted(rest)[0] if rest.startswith('"') else rest]
    head, quote, tail = text.partition(separator + '"')
    if quote:
        return [head, _read_quoted('"' + tail)[0]]
    start = _agreeing_split(text, separator)
    if start is None:
        start = text.find(separator)
    return [text] if start < 0 else [text[:start], text[start + len(separator):]]


def _agreeing_split(text: str, separator: str) -> int | None:
    """Where ``text`` splits into two names equal past their first component (``_Name.path``),
    found in linear time (a hostile line may be long): going right, the left path only grows and
    the right one only shrinks, so at most one split has equal lengths, and only it is compared."""
    first, size, end = text.find("/"), len(separator), len(text)
    slash = -1  # the first "/" of the right name; end when it has none
    start = text.find(separator)
    while start >= 0:
        rest = start + size
        if slash < rest:
            found = text.find("/", rest)
            slash = end if found < 0 else found
        left_size = start - first - 1 if 0 <= first < start else start
        right_begin = slash + 1 if slash < end else rest
        if left_size == end - right_begin and text[start - left_size:start] == text[right_begin:]:
            return start
        start = text.find(separator, start + 1)
    return None


def _tokens(text: str) -> Sequence[str | None]:
    """The first two whitespace-separated (or quoted) names of a ``diff --git`` line, as GNU patch
    reads them."""
    names: list[str | None] = []
    rest = text.lstrip()
    while rest and len(names) < 2:
        if rest.startswith('"'):
            name, rest = _read_quoted(rest)
        else:
            name, _, rest = rest.partition(" ")
        names.append(name)
        rest = rest.lstrip()
    return names


def _traditional_names(text: str) -> Sequence[str | None]:
    """The name of a ``---``/``+++`` line: up to a tab (a timestamp follows it), also without
    trailing blanks, and, with no tab, up to the first space (a name then a space and a date)."""
    if text.startswith('"'):
        return [_read_quoted(text)[0]]
    name = text.split("\t", 1)[0]
    return _unique([name, name.rstrip()] + ([] if "\t" in text else [name.split(" ", 1)[0]]))


def _plain_names(text: str) -> Sequence[str | None]:
    """The name filling the rest of a line (quoted or not; also without trailing blanks)."""
    return [_read_quoted(text)[0]] if text.startswith('"') else _unique([text, text.rstrip()])


def _unidiff_names(file: PatchedFile) -> list[str]:
    """The source and target names unidiff found for ``file`` (unquoted; ``/dev/null`` dropped)."""
    raws = [raw for raw in (file.source_file, file.target_file) if raw and raw != DEV_NULL]
    names = [_read_quoted(raw)[0] if raw.startswith('"') else raw for raw in raws]
    return [name for name in names if name is not None and name != DEV_NULL]


def _path_refusals(name: _Name, allow_compiled: bool) -> list[str]:
    """The refusals of one name, each a sentence naming it."""
    raw, path = name.raw, name.path
    parts = raw.split("/")
    absolute = raw.startswith("/") or path.startswith("/")
    checks = (
        (not path, "is empty"),
        (absolute, "is absolute: it names a file outside the repository"),
        (any(unicodedata.category(char) in ("Cc", "Cs") for char in raw),
         "holds a control character or bytes that are not UTF-8"),
        (".." in parts, "has a '..' component: it may name a file outside the repository"),
        (any(part.lower() == GIT_DIR for part in parts),
         "has a '.git' component: git's own files (config, hooks, attributes) are never patched"),
        (bool(path) and not absolute and any(part in ("", ".") for part in path.split("/")),
         "is not canonical (an empty or '.' component)"),
        (not allow_compiled and _is_compiled(path),
         "is a compiled file: it could run instead of the reviewed source (allow_compiled accepts it)"),
    )
    shown = raw if absolute else path
    return [f"path {shown!r} {why}" for failed, why in checks if failed]


def _entry_refusals(entry: _Entry, allow_binary: bool, allow_compiled: bool) -> list[str]:
    """The refusals of one file diff: its modes, a binary hunk, a refused rename or copy source."""
    shown = entry.shown()
    refused = [_mode_refusal(shown, mode, line) for mode, line in entry.modes if mode not in REGULAR_MODES]
    if entry.binary and not allow_binary:
        refused.append(_binary_refusal(shown))
    stated = {mode for _, mode in _NULL_SIDE_MODES for _, line in entry.modes if line.startswith(mode)}
    refused += [f"path {shown!r}: '{side} {DEV_NULL}' without a '{mode}' line, which git apply takes for the "
                f"file {DEV_NULL[1:]!r}" for side, mode in _NULL_SIDE_MODES
                if entry.line_no and side in entry.null_sides and mode not in stated]
    refused += [f"the {kind} from {name.path!r} is refused: its source is refused"
                for kind, name in entry.sources if _path_refusals(name, allow_compiled)]
    return refused


def _mode_refusal(shown: str, mode: str, line: str) -> str:
    if mode == SYMLINK_MODE:
        return (f"path {shown!r} is a symbolic link ({line!r}): a symlink created, changed or deleted by the "
                "patch may point outside the repository")
    return f"path {shown!r} gets mode {mode} ({line!r}), not a regular file's ({', '.join(REGULAR_MODES)})"


def _binary_refusal(shown: str) -> str:
    return f"path {shown!r} has a binary patch, which cannot be reviewed (allow_binary accepts it)"


def _is_compiled(path: str) -> bool:
    """Whether ``path`` is compiled code: a suffix in :data:`COMPILED_SUFFIXES` (any case), a
    versioned shared library (``libx.so.1``), or any file under a ``__pycache__`` directory.

    Args:
        path (str): a repository-relative path.

    Returns:
        bool: True for compiled code.
    """
    parts = path.split("/")
    base = parts[-1].lower()
    return base.endswith(COMPILED_SUFFIXES) or bool(_SO_VERSION.search(base)) or PYCACHE_DIR in parts[:-1]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ---------------------------------------------------------------------------------------------------
# symlinks in the sandbox's working tree


def symlink_probe(paths: Sequence[str]) -> str:
    """One POSIX ``sh`` command naming the ``paths`` that are, or go through, a symlink.

    Run it with the repository root as the working directory, in the evaluation sandbox, before the
    patch is applied (the host cannot see that tree). It prints, one a line, each path for which
    the path itself or a parent directory prefix (``a/b`` for ``a/b/c``) is a symlink (``[ -L ]``,
    dangling ones too), and exits 0. Shell only (the sandbox may lack python3); every path is one
    single-quoted word (``shlex.quote``), so spaces, quotes, ``$`` and backquotes stay text. One
    line however many paths: the command is sent as a string, not as argv.

    Args:
        paths (Sequence[str]): repository-relative paths (e.g. ``PatchCheck.paths``).

    Returns:
        str: the command; read its output with :func:`parse_symlink_probe`.

    Raises:
        ValueError: a path holds a newline or NUL (:func:`check_patch` refuses those first).
    """
    if any("\n" in path or "\0" in path for path in paths):
        raise ValueError("a path with a newline or NUL cannot be probed (check_patch refuses it)")
    if not paths:
        return "true"
    words = " ".join(shlex.quote(path) for path in paths)
    return (f"for p in {words}; do q=$p; while :; do "
            "if [ -L \"$q\" ]; then printf '%s\\n' \"$p\"; break; fi; "
            "case $q in */*) q=${q%/*};; *) break;; esac; done; done; true")


def parse_symlink_probe(output: str, paths: Iterable[str]) -> list[str]:
    """The paths :func:`symlink_probe` reported, from its ``output``.

    Only lines that are exactly one of ``paths`` count (anything else the sandbox printed is
    ignored); lines are split at ``\\n`` alone (a path may hold other line separators) and a
    trailing ``\\r`` (a pty) is dropped.

    Args:
        output (str): the probe's output.
        paths (Iterable[str]): the paths that were probed.

    Returns:
        list[str]: the symlinked paths, in the order of ``paths``, unique.
    """
    printed = {line.removesuffix("\r") for line in output.split("\n")}
    return _unique(path for path in paths if path in printed)


# ---------------------------------------------------------------------------------------------------
# protected paths: reset to the base commit after the patch is applied (or the patch is refused)
