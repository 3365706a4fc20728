"""What of the ``swebench`` package a task file needs when it loads: its parsers' names, and the
rules about rows in its shape (for ``swe_sandbox.batch.tasks``). Grading with it is
``swe_sandbox.batch.swebench_instances``'s. Importing this module imports nothing of swebench.
"""

from __future__ import annotations

from typing import Any

from swe_sandbox.errors import TaskFileError

EXTRA_HINT = "pip install 'swe-sandbox[swebench]'"
#: Where the harness's eval scripts run (``swebench.image_builder.constants.CONTAINER_WORKDIR``).
CONTAINER_WORKDIR = "/testbed"


def import_swebench(module: str, why: str) -> Any:
    """``importlib.import_module(module)``; a TaskFileError naming the extra when it is missing."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TaskFileError(f"{why} needs the swebench package ({EXTRA_HINT}): {exc}") from None


def parser_names(why: str) -> frozenset[str]:
    """The names in swebench's ``PARSER_REGISTRY``.

    Raises:
        TaskFileError: the ``swebench`` package is not installed (``why`` says who needs it).
    """
    return frozenset(import_swebench("swebench.harness.log_parsers", why).PARSER_REGISTRY)


def missing_script_message(repo: str, version: str) -> str:
    """Why an instance that names tests has nothing to run them (an older export: swebench 5 has
    no per-repo specs to build its script from, so it is refused rather than run as ``true``)."""
    what = f"an older SWE-bench export (repo {repo!r}, version {version!r}) " if repo and version else ""
    return (f"eval_script or eval_command missing: FAIL_TO_PASS / PASS_TO_PASS name tests but nothing runs them; "
            f"{what}needs the eval_script that SWE-bench 5's published datasets carry (swebench 5 has no "
            "per-repo specs to build one), or an eval_command")
