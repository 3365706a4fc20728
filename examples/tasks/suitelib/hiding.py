"""Hidden tests: the tests that catch a bug are taken out of the agent's copy (SWE-bench's
``test_patch`` puts them back at evaluation only).

A pytest id ``path::Class::test_name[param]`` names the function ``test_name`` (in ``Class``);
its whole definition (decorators included) is removed, found with ``ast``. A class left with no
statement gets ``pass``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path


def targets(test_ids: list[str]) -> dict[str, set[tuple[str, ...]]]:
    """``{file: {(Class, ..., function)}}`` from pytest ids (parameters dropped)."""
    found: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for test_id in test_ids:
        file, *names = test_id.split("::")
        if names:
            names[-1] = names[-1].split("[", 1)[0]
            found[file].add(tuple(names))
    return found


def _spans(body: list[ast.stmt], wanted: set[tuple[str, ...]], prefix: tuple[str, ...]) -> list[tuple[int, int]]:
    """Line spans (1-based, inclusive) of the wanted definitions in ``body``; ``pass`` marks."""
    spans = []
    for node in body:
        path = (*prefix, getattr(node, "name", ""))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and path in wanted:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((start, node.end_lineno))
        elif isinstance(node, ast.ClassDef) and any(w[:len(path)] == path for w in wanted):
            inner = _spans(node.body, wanted, path)
            if len(inner) == len(node.body):  # emptied: keep one statement
                inner[-1] = (*inner[-1], "pass")
            spans += inner
    return spans


def remove_tests(path: Path, names: set[tuple[str, ...]]) -> int:
    """Remove the definitions ``names`` from the file ``path``; the number removed."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    spans = _spans(ast.parse(text).body, names, ())
    for span in sorted(spans, reverse=True):
        start, end = span[0], span[1]
        indent = lines[start - 1][:len(lines[start - 1]) - len(lines[start - 1].lstrip())]
        lines[start - 1:end] = [f"{indent}pass\n"] if len(span) == 3 else []
    path.write_text("".join(lines), encoding="utf-8")
    return len(spans)


def hide(repo: Path, fail_to_pass: list[str]) -> int:
    """Remove every FAIL_TO_PASS test function from its file in ``repo``; how many were removed."""
    return sum(remove_tests(repo / file, names) for file, names in targets(fail_to_pass).items())
