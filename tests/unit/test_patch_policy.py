"""The grading policy on the graded patch (swe_sandbox.batch.integrity.patch_policy, DESIGN.md §9).

Honest patches and attacks are real diffs (``git diff``, ``git diff --binary``, ``git diff
--no-index`` and GNU ``diff -u`` in a temporary directory), unless an attack needs text no diff
tool writes (then it is written by hand, as a hostile policy would). No infrastructure: git only.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from swe_sandbox.batch.integrity.patch_policy import PatchCheck, check_patch, parse_symlink_probe, symlink_probe
from swe_sandbox.batch.integrity.protected import (
    DEFAULT_PROTECTED,
    RUNNER_CONFIG_FILES,
    protected_paths,
    runner_config_changed,
    stdlib_shadows,
)

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "HOME": "/nonexistent"}


def run(cwd: Path, *argv: str, ok: tuple[int, ...] = (0,)) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, env={**os.environ, **GIT_ENV}, timeout=60)
    assert done.returncode in ok, done.stderr.decode(errors="replace")
    return done.stdout.decode("utf-8", "surrogateescape")


class Repo:
    """A git repository in a temporary directory: write files, commit the base, diff the rest."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        run(root, "git", "init", "-q")

    def write(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        file = self.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            file.chmod(mode)

    def commit(self) -> None:
        run(self.root, "git", "add", "-A")
        run(self.root, "git", "commit", "-qm", "base", "--allow-empty")

    def diff(self, *options: str) -> str:
        run(self.root, "git", "add", "-A")
        return run(self.root, "git", "diff", "--cached", "-M", *options)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    repo = Repo(tmp_path / "repo")
    repo.write("pkg/core.py", "def f():\n    return 1\n")
    repo.write("pkg/util.py", "X = 1\n")
    repo.write("old.py", "gone\n")
    repo.write("moved.py", "".join(f"line {i}\n" for i in range(20)))
    repo.write("run.sh", "#!/bin/sh\n", mode=0o644)
    repo.commit()
    return repo


def no_index(cwd: Path, new: str, old: str = "/dev/null") -> str:
    """``git diff --no-index``: a real git diff of any two names, ``.git/...`` and ``../`` too."""
    return run(cwd, "git", "diff", "--no-index", "--binary", old, new, ok=(1,))


def refusals(check: PatchCheck, *words: str) -> list[str]:
    return [sentence for sentence in check.refused if all(word in sentence for word in words)]


# --- honest patches --------------------------------------------------------------------------------


def test_multi_file_source_fix_is_allowed(repo):
    repo.write("pkg/core.py", "def f():\n    return 2\n")
    repo.write("pkg/util.py", "X = 2\n")
    check = check_patch(repo.diff())
    assert check.allowed and check.refused == []
    assert check.paths == ["pkg/core.py", "pkg/util.py"]


def test_new_deleted_renamed_and_chmod_files_are_allowed(repo):
    repo.write("pkg/new.py", "NEW = 1\n")
    (repo.root / "old.py").unlink()
    (repo.root / "moved.py").rename(repo.root / "pkg/moved_here.py")
    (repo.root / "run.sh").chmod(0o755)
    patch = repo.diff()
    assert "rename from moved.py" in patch and "old mode 100644\nnew mode 100755" in patch
    check = check_patch(patch)
    assert check.allowed, check.refused
    assert check.paths == ["moved.py", "old.py", "pkg/moved_here.py", "pkg/new.py", "run.sh"]


def test_rename_with_changes_names_both_sides(repo):
    (repo.root / "moved.py").unlink()
    repo.write("pkg/moved.py", "".join(f"line {i}\n" for i in range(19)) + "changed\n")
    patch = repo.diff()
    assert "similarity index" in patch and "@@" in patch
    assert check_patch(patch) == PatchCheck(paths=["moved.py", "pkg/moved.py"], refused=[])


def test_quoted_paths_with_unicode_spaces_and_quotes(repo):
    repo.write("tést dir/my file.py", "a = 1\n")
    repo.write('say "hi".py', "b = 1\n")
    repo.write("plain space.py", "c = 1\n")
    patch = repo.diff()
    assert '"b/t\\303\\251st dir/my file.py"' in patch and '"b/say \\"hi\\".py"' in patch
    check = check_patch(patch)
    assert check.allowed, check.refused
    assert check.paths == ["plain space.py", 'say "hi".py', "tést dir/my file.py"]


def test_empty_patch_is_allowed_and_touches_nothing():
    assert check_patch("") == PatchCheck(paths=[], refused=[])
    assert check_patch(" \n\n").allowed


def test_a_b_prefixes_are_stripped_like_p1(repo):
    repo.write("pkg/core.py", "def f():\n    return 3\n")
    patch = repo.diff("--src-prefix=x/", "--dst-prefix=y/")
    assert "--- x/pkg/core.py" in patch
    assert check_patch(patch).paths == ["pkg/core.py"]


# --- attacks: paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [".git/config", ".git/info/attributes", "./.git/x", "sub/../.git/x",
                                    ".GIT/config", "sub/.Git"])
def test_git_directory_is_refused(tmp_path, target):
    (tmp_path / target).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / target).write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    patch = no_index(tmp_path, target)
    assert f"b/{target}" in patch
    check = check_patch(patch)
    assert not check.allowed
    assert refusals(check, "'.git' component"), check.refused


def test_git_directory_hidden_behind_a_consistent_header_is_refused(repo):
    """git apply and patch(1) take the names of the ---/+++ lines over the diff --git line's."""
    repo.write("pkg/core.py", "def f():\n    return 2\n")
    patch = repo.diff().replace("--- a/pkg/core.py", "--- a/.git/hooks/pre-commit")
    check = check_patch(patch)
    assert refusals(check, ".git/hooks/pre-commit", "'.git'"), check.refused


def test_parent_directory_is_refused(tmp_path):
    (tmp_path / "outside").write_text("hi\n")
    work = tmp_path / "work"
    work.mkdir()
    patch = no_index(work, "../outside")
    check = check_patch(patch)
    assert refusals(check, "'../outside'", "'..' component"), check.refused


def test_absolute_path_is_refused(tmp_path):
    (tmp_path / "new").write_text("root::0:0::/root:/bin/sh\n")
    patch = run(tmp_path, "diff", "-u", "--label", "/etc/passwd", "--label", "/etc/passwd", "/dev/null", "new",
                ok=(1,))
    assert patch.startswith("--- /etc/passwd\n")
    check = check_patch(patch)
    assert refusals(check, "'/etc/passwd'", "absolute"), check.refused


@pytest.mark.parametrize(("name", "why"), [
    ('"b/x\\ny.py"', "control character"),     # a newline, C-quoted as git writes it
    ('"b/x\\000y.py"', "control character"),   # a NUL
    ('"b/x\\ty.py"', "control character"),     # a tab
    ('"b/bad\\377.py"', "not UTF-8"),          # a byte that is not UTF-8
    ('"b/bad\ud800.py"', "not UTF-8"),          # a lone surrogate (JSON allows one)
    ("b/bad\udcff.py", "not UTF-8"),            # an undecodable byte, read with surrogateescape
    ("b/x//y.py", "not canonical"),
    ("b/./x.py", "not canonical"),
    ("b/", "empty"),
])
def test_unsafe_names_are_refused(name, why):
    patch = f"--- /dev/null\n+++ {name}\n@@ -0,0 +1 @@\n+x\n"
    check = check_patch(patch)
    assert refusals(check, why), (name, check.refused)


def test_unreadable_quoted_name_is_refused():
    patch = '--- /dev/null\n+++ "b/x\\qy.py"\n@@ -0,0 +1 @@\n+x\n'
    assert refusals(check_patch(patch), "quoted path that git cannot read")


def test_names_only_patch_1_reads_are_checked():
    """A hunkless entry whose diff --git names disagree: git finds no name, GNU patch reads the
    two whitespace-separated words."""
    patch = "diff --git a/x.py b/.git/hooks/post-checkout\nnew file mode 100755\n"
    check = check_patch(patch)
    assert refusals(check, ".git/hooks/post-checkout", "'.git'"), check.refused


# --- attacks: symlinks, binaries, compiled files --------------------------------------------------------


def test_symlink_to_git_is_refused(repo):
    (repo.root / "link").symlink_to(".git")
    patch = repo.diff()
    assert "new file mode 120000" in patch
    check = check_patch(patch)
    assert refusals(check, "'link'", "symbolic link"), check.refused


@pytest.mark.parametrize("lines", [
    "old mode 100644\nnew mode 120000\n",
    "index 1234567..89abcde 120000\n--- a/link\n+++ b/link\n@@ -1 +1 @@\n-a\n+../../etc\n",
    "deleted file mode 120000\n",
])
def test_symlink_changed_is_refused(lines):
    check = check_patch(f"diff --git a/link b/link\n{lines}")
    assert refusals(check, "'link'", "symbolic link"), check.refused


def test_submodule_mode_is_refused():
    patch = "diff --git a/vendor b/vendor\nnew file mode 160000\nindex 0000000..1234567\n"
    assert refusals(check_patch(patch), "'vendor'", "mode 160000")


def test_compiled_pyc_binary_is_refused(repo):
    import py_compile

    py_compile.compile(str(repo.root / "pkg/core.py"), cfile=str(repo.root / "pkg/__pycache__/core.cpython-311.pyc"))
    patch = repo.diff("--binary")
    assert "GIT binary patch" in patch
    check = check_patch(patch)
    path = "pkg/__pycache__/core.cpython-311.pyc"
    assert check.paths == [path]
    assert refusals(check, path, "binary patch") and refusals(check, path, "compiled file")
    assert refusals(check_patch(patch, allow_binary=True), "compiled file")
    assert check_patch(patch, allow_binary=True, allow_compiled=True).allowed


def test_shared_object_is_refused(repo):
    repo.write("pkg/_speedups.so", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    check = check_patch(repo.diff("--binary"))
    assert refusals(check, "pkg/_speedups.so", "compiled") and refusals(check, "binary patch")


def test_binary_without_data_is_refused(repo):
    repo.write("data.bin", b"\x00\x01\x02")
    patch = repo.diff()
    assert "Binary files /dev/null and b/data.bin differ" in patch
    check = check_patch(patch)
    assert refusals(check, "'data.bin'", "binary patch") and check.paths == ["data.bin"]
    assert check_patch(patch, allow_binary=True).allowed


@pytest.mark.parametrize("path", ["a.pyc", "m.PYO", "x.pyd", "libz.so.1.2", "lib.dylib", "k.dll", "o.o", "l.a",
                                  "C.class", "a.jar", "w.whl", "e.egg", "p.exe", "m.elc", "pkg/__pycache__/notes.txt"])
def test_compiled_suffixes(path):
    patch = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
    assert refusals(check_patch(patch), "compiled")
    assert check_patch(patch, allow_compiled=True).allowed


def test_copy_and_rename_from_refused_source(repo):
    patch = ("diff --git a/.git/config b/leak.txt\nsimilarity index 100%\ncopy from .git/config\ncopy to leak.txt\n"
             "diff --git a/build/x.pyc b/x.py\nsimilarity index 100%\nrename from build/x.pyc\nrename to x.py\n")
    check = check_patch(patch)
    assert refusals(check, "the copy from '.git/config'", "source is refused"), check.refused
    assert refusals(check, "the rename from 'build/x.pyc'", "source is refused"), check.refused
    assert "leak.txt" in check.paths and "x.py" in check.paths


def test_rename_to_conftest_is_allowed_but_protected(repo):
    (repo.root / "pkg/util.py").rename(repo.root / "conftest.py")
    check = check_patch(repo.diff())
    assert check.allowed and check.paths == ["conftest.py", "pkg/util.py"]
    assert protected_paths(check.paths) == ["conftest.py"]


# --- attacks: text only patch(1) reads ------------------------------------------------------------------


@pytest.mark.parametrize("foreign", [
    "*** a/.git/config\n--- b/.git/config\n***************\n*** 1 ****\n! x\n--- 1 ----\n! y\n",  # context diff
    "1a2\n> evil\n",                                                                                 # normal diff
    "1c\n!touch pwned\n.\n",                                                                         # ed script
    "    --- a/conftest.py\n    +++ b/conftest.py\n    @@ -0,0 +1 @@\n    +evil\n",                  # indented
])
def test_diffs_only_patch_reads_are_refused(repo, foreign):
    repo.write("pkg/core.py", "def f():\n    return 2\n")
    check = check_patch(repo.diff() + foreign)
    assert refusals(check, "reads as a diff to patch(1)"), check.refused


def test_commit_message_and_diffstat_are_not_foreign(repo):
    repo.write("pkg/core.py", "def f():\n    return 2\n")
    run(repo.root, "git", "add", "-A")
    run(repo.root, "git", "commit", "-qm", "Fix f\n\nIt returned 1 where 2 was due.")
    patch = run(repo.root, "git", "format-patch", "-1", "--stdout")
    assert " 1 file changed" in patch
    assert check_patch(patch) == PatchCheck(paths=["pkg/core.py"], refused=[])


def test_dev_null_without_its_mode_line_is_refused():
    """In a git header, git apply reads "+++ /dev/null" as the file dev/null unless "deleted file
    mode" says the file goes (and "--- /dev/null" unless "new file mode" says it is created)."""
    patch = "diff --git a/x.py b/x.py\nindex 1111111..0000000\n--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    assert not check_patch(patch).allowed  # unidiff refuses it too: its target is the header's
    created = "diff --git a/x.py b/x.py\nindex 0000000..1111111\n--- /dev/null\n+++ b/x.py\n@@ -0,0 +1 @@\n+x\n"
    assert refusals(check_patch(created), "'--- /dev/null' without a 'new file mode' line")
    plain = "--- /dev/null\n+++ b/x.py\n@@ -0,0 +1 @@\n+x\n"  # no git header: /dev/null means created
    assert check_patch(plain) == PatchCheck(paths=["x.py"], refused=[])


def git_names(repo: Repo, patch: str) -> set[str]:
    """The paths ``git apply`` reads from ``patch`` (``--numstat -z``: nothing is applied)."""
    done = subprocess.run(["git", "apply", "--numstat", "-z", "-"], input=patch.encode("utf-8", "surrogateescape"),
                          cwd=repo.root, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {record.split("\t")[-1] for record in done.stdout.decode("utf-8", "surrogateescape").split("\0")} - {""}


def test_paths_hold_every_name_git_apply_reads(repo):
    repo.write("pkg/core.py", "def f():\n    return 2\n")
    repo.write("tést dir/my file.py", "a = 1\n")
    repo.write("sp ace.py", "b = 1\n")
    (repo.root / "old.py").unlink()
    (repo.root / "moved.py").rename(repo.root / "pkg/moved.py")
    patch = repo.diff()
    assert git_names(repo, patch) <= set(check_patch(patch).paths)
    hidden = patch.replace("--- a/pkg/core.py\n+++ b/pkg/core.py", "--- a/pkg/util.py\n+++ b/pkg/core.py")
    assert git_names(repo, hidden) <= set(check_patch(hidden).paths)


# --- unparsable ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "Binary files " + "a and " * 20_000,        # unidiff's regex backtracks for a minute on it
    "diff --git " + "a://" * 20_000,
    "diff --git a/" + "x" * 5000 + " b/" + "x" * 5000,
    "Binary files a\tand b differ",
])
def test_headers_that_would_stall_the_parser_are_refused_at_once(line):
    started = time.monotonic()
    check = check_patch(f"{line}\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert time.monotonic() - started < 1.0
    assert refusals(check, "is a header git does not write") and check.paths == []


def test_long_header_with_many_spaces_is_read_in_linear_time():
    name = "d " * 1500 + "f.py"
    started = time.monotonic()
    check = check_patch(f"diff --git a/{name} b/{name}\nold mode 100644\nnew mode 100755\n")
    assert time.monotonic() - started < 1.0
    assert name in check.paths and check.allowed



@pytest.mark.parametrize("patch", [
    "@@ -1 +1 @@\n-a\n+b\n",                                   # a hunk without a file
    "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-a\n+b\n",        # shorter than its header says
])
def test_unparsable_patch_is_refused(patch):
    check = check_patch(patch)
    assert len(check.refused) == 1 and check.refused[0].startswith("not a unified diff: ")
    assert check.paths == []


def test_non_blank_patch_without_files_is_refused():
    check = check_patch("I fixed it, trust me.\n")
    assert check.refused == ["not a unified diff: no file diff found in a non-blank patch"]


# --- symlink_probe -----------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "real dir").mkdir(parents=True)
    (root / "real dir/a b.py").write_text("x\n")
    (root / "file.txt").write_text("x\n")
    (root / "linkdir").symlink_to("real dir")
    (root / "linkfile").symlink_to("file.txt")
    (root / "dead").symlink_to("nowhere")
    (root / "sub/inner").mkdir(parents=True)
    (root / "sub/inner/up").symlink_to("../..")
    return root


def probe(root: Path, paths: list[str], shell: str = "sh") -> subprocess.CompletedProcess[str]:
    """Run the probe as ``shell -c COMMAND``; a command past Linux's 128 KiB limit on one argument
    goes on stdin instead (the sandbox's runner sends commands through a file descriptor)."""
    command = symlink_probe(paths)
    assert "\n" not in command
    if len(command) < 100_000:
        return subprocess.run([shell, "-c", command], cwd=root, capture_output=True, text=True, timeout=60)
    return subprocess.run([shell], input=command, cwd=root, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_symlink_probe_names_symlinks_and_paths_through_them(tree, shell):
    hostile = ["it's $(touch pwned).py", "`touch pwned2`", "$HOME/x", '"; touch pwned3; "', "-n", "%s%n", "a\\nb"]
    paths = ["linkdir/new.py", "linkdir", "linkfile", "dead", "sub/inner/up/file.txt", "file.txt",
             "real dir/a b.py", "real dir/new.py", "missing/x.py", *hostile, "linkdir/it's $(touch pwned4)"]
    done = probe(tree, paths, shell)
    assert done.returncode == 0, done.stderr
    expected = ["linkdir/new.py", "linkdir", "linkfile", "dead", "sub/inner/up/file.txt", "linkdir/it's $(touch pwned4)"]
    assert parse_symlink_probe(done.stdout, paths) == expected
    assert sorted(p.name for p in tree.iterdir()) == ["dead", "file.txt", "linkdir", "linkfile", "real dir", "sub"]
    assert not list(tree.parent.glob("pwned*"))


def test_symlink_probe_is_one_line_for_5000_paths(tree):
    paths = [f"real dir/d{i}/f {i}.py" for i in range(5000)] + ["linkdir/deep/er.py"]
    done = probe(tree, paths)
    assert done.returncode == 0 and parse_symlink_probe(done.stdout, paths) == ["linkdir/deep/er.py"]


def test_symlink_probe_without_paths_and_with_newlines(tree):
    assert probe(tree, []).returncode == 0
    with pytest.raises(ValueError):
        symlink_probe(["a\nb"])


def test_parse_symlink_probe_ignores_other_output():
    output = "motd: welcome\nlinkdir/x.py\r\nnot/probed\n\nlinkfile\nlinkfile\n"
    assert parse_symlink_probe(output, ["linkfile", "linkdir/x.py", "clean.py"]) == ["linkfile", "linkdir/x.py"]
    assert parse_symlink_probe("a\u2028b\n", ["a\u2028b", "a"]) == ["a\u2028b"]


# --- protected_paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "conftest.py", "src/pkg/tests/conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml",
    "tox.ini", "noxfile.py", "tests/__init__.py", "tests/test_x.py", "pkg/tests/data/input.txt", "test/a.py",
    "sympy/testing/runtests.py", "testing/python/collect.py", "pkg/test_core.py", "pkg/core_test.py",
    "pytest.py", "pytest/__init__.py", "_pytest/main.py", "pluggy/__init__.py", "pluggy.py", "py.py",
    "py/__init__.py", "packaging/version.py", "iniconfig.py", "sitecustomize.py", "lib/usercustomize.py",
    "evil.pth", "pkg/sub/hook.pth", ".gitattributes", "docs/.gitattributes", ".gitmodules", ".gitignore",
    "bin/test", "sympy/utilities/runtests.py", "sympy/utilities/pytest.py", "tests/runtests.py",
    "pkg.egg-info/entry_points.txt", "src/pkg.egg-info/entry_points.txt", "pkg-1.0.dist-info/entry_points.txt",
    ".pytest_cache/v/cache/lastfailed",
])
def test_default_protected(path):
    assert protected_paths([path]) == [path]


@pytest.mark.parametrize("path", [
    "pkg/core.py", "src/_pytest/main.py", "src/pytest/__init__.py", "lib/pluggy/__init__.py",
    "mytests/x.py", "tests", "pkg/testsuite.py", "contest.py", "setup.cfg", "pyproject.toml", "setup.py",
    "README.md", "pkg/testing.py", "pkg/test.py", "docs/conftest.txt", "src/py/x.py", "bin/tester",
])
def test_default_unprotected(path):
    assert protected_paths([path]) == []


def test_every_default_pattern_protects_something():
    samples = ["conftest.py", "a/tests/b", "a/test/b", "a/testing/b", "pkg/test_x.py", "pkg/x_test.py"]
    for pattern in DEFAULT_PROTECTED:
        concrete = pattern.replace("**/", "").replace("/**", "/x").replace("*", "a")
        assert protected_paths([concrete], [pattern]) == [concrete], pattern
    assert protected_paths(samples) == sorted(samples)


def test_protected_extra_and_custom_patterns():
    paths = ["src/a.py", "src/b.py", "docs/x/y.md", "docs/z.md"]
    assert protected_paths(paths, patterns=(), extra=["src/b.py", "other.py"]) == ["src/b.py"]
    assert protected_paths(paths, patterns=["docs/**/*.md"]) == ["docs/x/y.md", "docs/z.md"]
    assert protected_paths(paths, patterns=["docs/*"]) == ["docs/z.md"]
    assert protected_paths(paths, patterns=["*.md"]) == ["docs/x/y.md", "docs/z.md"]


# --- runner_config_changed -------------------------------------------------------------------------------

SETUP_CFG = "[metadata]\nname = pkg\n\n[tool:pytest]\naddopts = -q\ntestpaths = tests\n"


@pytest.mark.parametrize(("after", "changed"), [
    (SETUP_CFG, False),
    (SETUP_CFG.replace("name = pkg\n", "name   =   pkg\n\n\n# a comment\n"), False),  # whitespace elsewhere
    (SETUP_CFG + "\n[options]\ninstall_requires = attrs\n", False),                  # another section
    (SETUP_CFG + "\n[DEFAULT]\naddopts = -p evil\n", False),                        # pytest reads no [DEFAULT]
    (SETUP_CFG.replace("-q", "-q -p evil"), True),
    (SETUP_CFG.replace("testpaths = tests\n", "testpaths = tests\nADDOPTS = -p evil\n"), True),
    (SETUP_CFG.replace("[tool:pytest]", "[pytest]"), True),
    (SETUP_CFG + "[x#]\n  -p evil = x\n", True),   # pytest's iniconfig: a continuation of addopts
    (SETUP_CFG + "[options.entry_points]\npytest11 =\n    evil = pkg.evil\n", True),
    (SETUP_CFG + "[options.entry_points]\nconsole_scripts =\n    pkg = pkg.cli:main\n", False),
    ("[metadata]\nname = pkg\n", True),             # the section removed
    (None, True),                                   # the file deleted
    ("[tool:pytest\naddopts = -p evil\n", True),   # no longer parses
])
def test_setup_cfg(after, changed):
    assert runner_config_changed("setup.cfg", SETUP_CFG, after) is changed
    assert runner_config_changed("sub/dir/setup.cfg", SETUP_CFG, after) is changed


def test_setup_cfg_section_added():
    assert runner_config_changed("setup.cfg", None, "[tool:pytest]\n") is True
    assert runner_config_changed("setup.cfg", "[metadata]\nname = a\n", "[metadata]\nname = b\n") is False
    assert runner_config_changed("setup.cfg", None, None) is False
    assert runner_config_changed("setup.cfg", None, "[metadata]\nname = a\n") is False


def test_tox_ini():
    before = "[tox]\nenvlist = py311\n\n[testenv]\ncommands = pytest\n\n[pytest]\naddopts = -q\n"
    assert runner_config_changed("tox.ini", before, before.replace("py311", "py312")) is False
    assert runner_config_changed("tox.ini", before, before.replace("-q", "-q -p evil")) is True
    assert runner_config_changed("tox.ini", before, before.replace("[pytest]", "[tool:pytest]")) is True


PYPROJECT = ('[project]\nname = "pkg"\nversion = "1.0"\n\n[tool.ruff]\nline-length = 100\n\n'
             '[tool.pytest.ini_options]\naddopts = "-q"\n')


@pytest.mark.parametrize(("after", "changed"), [
    (PYPROJECT.replace('"1.0"', '"1.1"').replace("100", "120"), False),
    (PYPROJECT.replace("version = ", "version    =    "), False),
    (PYPROJECT.replace('"-q"', '"-q -p evil"'), True),
    (PYPROJECT.replace('addopts = "-q"', 'addopts = "-q"\nfilterwarnings = ["ignore"]'), True),
    (PYPROJECT + '\n[tool.pytest]\naddopts = ["-p", "evil"]\n', True),    # pytest 9's native table
    (PYPROJECT + '\n[project.entry-points.pytest11]\nevil = "pkg.evil"\n', True),
    (PYPROJECT + '\n[project.scripts]\npkg = "pkg.cli:main"\n', False),
    (PYPROJECT + "\n[tool.pytest.ini_options\n", True),                  # no longer parses
])
def test_pyproject_toml(after, changed):
    assert runner_config_changed("pyproject.toml", PYPROJECT, after) is changed


def test_both_unparsable_compares_text():
    broken = "[tool:pytest\naddopts = -q\n"
    assert runner_config_changed("setup.cfg", broken, broken) is False
    assert runner_config_changed("setup.cfg", broken, broken + "x\n") is True
    assert runner_config_changed("pyproject.toml", "x = [", "x = [1") is True
    assert runner_config_changed("setup.cfg", broken, SETUP_CFG) is True  # it parses now: conservative


def test_other_files_are_not_runner_config():
    assert set(RUNNER_CONFIG_FILES) == {"setup.cfg", "pyproject.toml", "tox.ini"}
    assert runner_config_changed("pkg/core.py", "a", "b") is False


def test_stdlib_shadows_at_the_root_and_in_src():
    """Modules named like the standard library's, where pytest's start-up would import them first
    (the caller keeps only the new ones)."""
    paths = ["shlex.py", "json/__init__.py", "src/os.py", "src/pkg/os.py", "pkg/shlex.py", "email", "README.md"]
    assert stdlib_shadows(paths) == {"shlex.py": "shlex", "json/__init__.py": "json", "src/os.py": "src/os"}
