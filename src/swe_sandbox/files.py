"""Writing the files of a run safely: atomic replacement, appends, no symlink followed.

- ``atomic_write_text`` replaces a file whole (a temporary file in the same directory, ``fsync``,
  ``os.replace``): a reader sees the old or the new file, never half of one.
- ``append_bytes`` appends to a file with one ``write`` and ``fsync``s it.
- ``to_json`` / ``utf8``: text that always encodes as UTF-8 (lone surrogates included).

Neither writer follows a symlink at the file's own name (``O_NOFOLLOW``): a link planted there,
e.g. ``results.jsonl -> ~/.bashrc``, is refused by ``append_bytes`` (``OSError`` ``ELOOP``) and
replaced, never written through, by ``atomic_write_text`` (the rename replaces the link itself,
and the temporary file is created with ``O_EXCL | O_NOFOLLOW``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

SURROGATE_RE = re.compile("[\ud800-\udfff]")
#: Flags of every file a run writes: never through a symlink, not inherited by children.
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, whatever it holds: characters that UTF-8 cannot encode (lone surrogates)
    become the bytes they stand for (``surrogateescape``) or, failing that, ``?``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def to_json(data: Any, **kwargs: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, default=str, **kwargs)`` with lone surrogates written
    as ``\\uXXXX`` escapes, so the text always encodes as UTF-8 and stays valid JSON."""
    text = json.dumps(data, ensure_ascii=False, default=str, **kwargs)
    # With ensure_ascii=False, json leaves surrogates raw, and only inside string literals: the
    # escape is what ensure_ascii=True writes, and json.loads reads it back to the same character.
    return SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically: readers see the old or the new file, never half.

    The parent directory is created when missing. Text UTF-8 cannot encode (lone surrogates) is
    written as ``utf8`` says, never an error. A symlink at ``path`` is replaced, not followed.

    Raises:
        OSError: the directory is not writable (the temporary file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(utf8(text))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def append_bytes(path: str | os.PathLike[str], data: bytes, *, end_torn_line: bool = False) -> None:
    """Append ``data`` to ``path`` (created ``0o644`` when missing) with one ``write``, then ``fsync``.

    Args:
        path: the file; a symlink there is refused, never followed.
        data: what to append.
        end_torn_line: when the file does not end with a newline (a line torn by a crash), write
            one first, so ``data`` starts a line of its own. Defaults to False.

    Raises:
        OSError: the file cannot be opened (``ELOOP``: it is a symlink) or written.
    """
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)
    try:
        if end_torn_line and _ends_torn(fd):
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_torn(fd: int) -> bool:
    """Whether the open file is non-empty and does not end with a newline."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename in ``directory`` durable (best effort: some filesystems refuse to fsync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: each ends at ``\n`` alone (a ``\r`` before it is dropped).

    Not ``str.splitlines``: that also ends a line at U+2028, U+2029, U+0085 and other characters a
    JSON string may hold raw (``model_dump_json`` and ``json.dumps(..., ensure_ascii=False)`` write
    them so), which would cut one valid line in two invalid halves (JSON Lines: jsonlines.org).
    """
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]

