"""Task files: SWE-bench-style instances, one JSON object each (DESIGN.md §7).

A task file is ``.jsonl`` (one object a line; blank lines are skipped), ``.json`` (a list of
objects) or ``.parquet`` (one object a row, as the Hugging Face hub stores a dataset split; read
with pyarrow, the ``[parquet]`` extra; the hub itself is not reached: download the file first).
Field names follow SWE-bench's instances, so a SWE-bench dataset exported to JSON loads as it
is; fields we do not use (``repo``, ``base_commit``, ``patch``, ...) are kept in
``Task.model_extra``.

Every error names the file, the line (for ``.json`` the line where the object starts, for
``.parquet`` the row) and the field, e.g. ``tasks.jsonl line 3: instance_id: 'a/b' is not a safe file name (no '/')``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swe_sandbox.batch.grading import EXIT_STATUS_PARSER, LOG_PARSERS
from swe_sandbox.batch.jsonfiles import jsonl_items, parse_json
from swe_sandbox.batch.records import RUN_FILES
from swe_sandbox.batch.swebench_registry import CONTAINER_WORKDIR, missing_script_message, parser_names
from swe_sandbox.errors import TaskFileError
from swe_sandbox.network.policy import NetworkPolicy

#: Longest ``instance_id`` (it becomes a directory and file name).
MAX_ID_LENGTH = 200
#: Longest ``instance_id`` in UTF-8 bytes: ``<id>.submission.txt`` must fit a file name (255 bytes on Linux).
MAX_ID_BYTES = 230
#: Characters an ``instance_id`` may not hold (it becomes a file name and a line of the run's files):
#: separators, C0 and C1 controls and DEL, line and paragraph separators, bidirectional overrides
#: and isolates (they reorder what a terminal shows), lone surrogates.
UNSAFE_ID = re.compile("[/\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The option that lets a task's ``workspace`` lie outside its task file's directory.
WORKSPACE_OUTSIDE_OPTION = "--allow-workspace-outside"


class Task(BaseModel):
    """One task instance (DESIGN.md §7's table; unknown fields are kept in ``model_extra``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    instance_id: str
    """Unique, and a safe file name: no ``/``, ``\\``, control characters, no leading ``.``, and none
    of the run's own files (``records.RUN_FILES``: ``results.jsonl``, ``preds.json``, ...)."""
    problem_statement: str
    """The task text the agent gets."""
    image: str | None = Field(default=None, validation_alias=AliasChoices("image", "image_name", "docker_image"))
    """Container image for docker/podman (also read from ``image_name`` or ``docker_image``)."""
    workspace: Path | None = None
    """Host directory copied into the sandbox's working directory (relative to the task file, and
    under its directory, symlinks resolved, unless the run allows otherwise: ``load_tasks``)."""
    cwd: str = ""
    """Where commands start inside the sandbox (e.g. ``/testbed``); empty: the environment's."""
    setup_command: str = ""
    """Run before the agent (and before evaluation); non-zero is the instance's error."""
    test_patch: str = ""
    """Diff applied only at evaluation, never shown to the agent (SWE-bench's hidden tests)."""
    eval_command: str = ""
    """Run at evaluation after the model patch and ``test_patch`` are applied."""
    eval_script: str = ""
    """SWE-bench 5's own eval script (it checks out the test files, applies ``test_patch`` itself
    and prints the markers): run as the harness runs it, instead of ``test_patch`` and
    ``eval_command`` (``swe_sandbox.batch.swebench_instances``)."""
    eval_type: Literal["pass_and_fail", "fail_only"] | None = None
    """swebench's ``EvalType`` for a task graded by a swebench parser; None: ``pass_and_fail``."""
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    """Tests the patch must make pass (a list, or a JSON string of one, as SWE-bench stores them)."""
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    """Tests that must keep passing."""
    eval_timeout: float | None = Field(default=None, gt=0)
    """Seconds ``eval_command`` may run for this task; None: the run's (``--eval-timeout``)."""
    log_parser: str = "pytest"
    """How test outcomes are read from the eval output: ours, ``pytest`` (``-rA`` lines; under the
    strict grading policy, the grader plugin's records) or ``exit_status``; or a name in swebench's
    ``PARSER_REGISTRY`` (``parse_log_pytest``, ``parse_log_django``, ...): then the ``swebench``
    package grades the log (``get_eval_report``)."""
    grading: Literal["strict", "swebench"] | None = None
    """The grading policy for this task (``swe_sandbox.batch.evaluation``); None: the run's."""
    protected_paths: list[str] | None = None
    """Patterns of paths the model patch may not change for grading (``protected.protected_paths``'
    syntax); None: ``protected.DEFAULT_PROTECTED``. The files ``test_patch`` touches always are."""
    on_protected: Literal["reset", "refuse"] = "reset"
    """What the strict policy does with a patch that touches a protected path: reset the path to
    the base commit (recorded in the verdict), or refuse the patch."""
    allow_binary: bool = False
    """Let the model patch carry binary hunks and compiled files (refused by default)."""
    setup_network: Literal["none", "allowlist", "on"] | None = None
    """The network ``setup_command`` runs with (``swe_sandbox.batch.phases``): ``none``,
    ``allowlist`` (the names of ``setup_allow``) or ``on`` (only where the sandbox's other phase
    is ``on`` too: a sandbox's network cannot change to or from ``on`` after start). None
    (default): the agent's (the environment config's); in the evaluation sandbox, the evaluation's."""
    setup_allow: list[str] = Field(default_factory=list)
    """With ``setup_network: allowlist``: the names setup may reach (``allow``'s patterns); empty:
    the environment config's ``allow``. ``resolve`` always comes from the environment config."""
    eval_network: Literal["none", "allowlist", "on"] = "none"
    """The evaluation sandbox's network: ``none`` (default, whatever the agent had),
    ``allowlist`` (the names of ``eval_allow``) or ``on`` (the environment config's own setting)."""
    eval_allow: list[str] = Field(default_factory=list)
    """With ``eval_network: allowlist``: the names evaluation may reach; empty: the environment
    config's ``allow``."""
    source_line: int = Field(default=0, exclude=True)
    """Line of the task file where this task starts (for error messages; not serialized)."""

    @field_validator("instance_id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        if not value or len(value) > MAX_ID_LENGTH or len(value.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
            raise ValueError(f"must be 1 to {MAX_ID_LENGTH} characters, at most {MAX_ID_BYTES} bytes in UTF-8")
        if UNSAFE_ID.search(value) or value.startswith("."):
            raise ValueError(f"{value!r} is not a safe file name (no '/', '\\', control, line-separator or bidi characters, "
                             "no leading '.')")
        if value.casefold() in {name.casefold() for name in RUN_FILES}:
            raise ValueError(f"{value!r} is the name of one of the run's own files ({', '.join(RUN_FILES)})")
        return value

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str | None) -> str | None:
        from swe_sandbox.environments.container.image_ref import check_reference

        return None if value is None else check_reference(value)

    @field_validator("setup_command", "test_patch", "eval_command", "eval_script", "cwd", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        """A null text field (a Parquet column with gaps, a JSON export's ``null``) is an empty one."""
        return "" if value is None else value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _test_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):  # SWE-bench stores them as JSON strings
            try:
                return json.loads(value) if value.strip() else []
            except ValueError:
                raise ValueError("expected a list of test names, or a JSON string of one") from None
        return value

    @field_validator("setup_allow", "eval_allow")
    @classmethod
    def _allow_patterns(cls, value: list[str]) -> list[str]:
        try:
            return list(NetworkPolicy(allow=value).allow)
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None

    @model_validator(mode="after")
    def _allow_needs_allowlist(self) -> Task:
        for field, network in (("setup_allow", self.setup_network), ("eval_allow", self.eval_network)):
            if getattr(self, field) and network != "allowlist":
                raise ValueError(f"{field}: only with {field.replace('allow', 'network')}: allowlist "
                                 f"(it is {network!r})")
        return self

    @field_validator("log_parser")
    @classmethod
    def _known_parser(cls, value: str) -> str:

        if value in LOG_PARSERS:
            return value

        try:
            names = parser_names(f"log_parser {value!r}")
        except TaskFileError as exc:
            raise ValueError(f"unknown {value!r} here (ours: {', '.join(LOG_PARSERS)}); {exc}") from None
        if value not in names:
            raise ValueError(f"unknown {value!r} (ours: {', '.join(LOG_PARSERS)}; or a name in swebench's "
                             "PARSER_REGISTRY, e.g. parse_log_pytest, parse_log_django, parse_log_sympy)")
        return value

    @model_validator(mode="after")
    def _parser_fits_tests(self) -> Task:

        if self.log_parser == EXIT_STATUS_PARSER and (self.FAIL_TO_PASS or self.PASS_TO_PASS):
            raise ValueError("log_parser exit_status reads no test names: leave FAIL_TO_PASS and "
                             "PASS_TO_PASS empty, or use log_parser pytest")
        return self

    @model_validator(mode="after")
    def _something_runs(self) -> Task:
        """A task that names tests must run them: its ``eval_command`` or its ``eval_script``
        (an older SWE-bench export without one is refused, naming the fields)."""
        if self.eval_script.strip() and not self.graded_by_swebench:
            given = f"log_parser {self.log_parser!r}" if "log_parser" in self.model_fields_set else "log_parser (missing)"
            raise ValueError(f"eval_script runs as SWE-bench's harness runs it: {given} must be a name in "
                             "swebench's PARSER_REGISTRY (e.g. parse_log_pytest)")
        if (self.model_extra or {}).get("image_assets"):
            raise ValueError("image_assets: SWE-bench's binary test assets (multimodal instances) are not "
                             "supported yet: graded without them, the instance would fail in silence")
        if self.eval_command.strip() or self.eval_script.strip() or not self.has_tests:
            return self._default_workdir()

        extra = self.model_extra or {}
        raise ValueError(missing_script_message(str(extra.get("repo") or ""), str(extra.get("version") or "")))

    def _default_workdir(self) -> Task:
        """An ``eval_script`` task without ``cwd`` works where the harness does (``/testbed``)."""
        if self.eval_script.strip() and not self.cwd:

            self.cwd = CONTAINER_WORKDIR
        return self

    @property
    def graded_by_swebench(self) -> bool:
        """Whether the ``swebench`` package grades this task (a parser of its registry)."""

        return self.log_parser not in LOG_PARSERS

    @property
    def has_tests(self) -> bool:
        """Whether resolution is decided by named tests (else: ``eval_command``'s exit status)."""
        return bool(self.FAIL_TO_PASS or self.PASS_TO_PASS)


def load_tasks(path: str | Path, *, allow_workspace_outside: bool = False) -> list[Task]:
    """Load and validate a task file.

    Args:
        path: a ``.jsonl`` file (one object a line), a ``.json`` file (a list of objects) or a
            ``.parquet`` file (one object a row; needs pyarrow).
        allow_workspace_outside: let a ``workspace`` lie outside the task file's directory (the
            CLI's ``--allow-workspace-outside``). Defaults to False: a task file from elsewhere
            cannot have ``/etc`` or ``~/.ssh`` copied into the sandbox (and its trajectory).

    Returns:
        list[Task]: in file order; ``workspace`` resolved against the task file's directory.

    Raises:
        TaskFileError: (a ``ConfigError``) unreadable file, bad JSON, a missing or invalid field,
            a duplicate ``instance_id``, a ``workspace`` that is not a directory or (symlinks
            resolved) lies outside the task file's directory, or no task at all; the message
            names the file, the line and the field.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        items = parquet_items(path)
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskFileError(f"cannot read task file {path}: {exc}") from None
        items = _json_items(text, path) if path.suffix == ".json" else jsonl_items(text, path)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for line, item in items:
        task = _task(item, line, path, allow_workspace_outside)
        if task.instance_id in seen:
            raise TaskFileError(f"{path} line {line}: instance_id: {task.instance_id!r} duplicates "
                                f"line {seen[task.instance_id]}")
        seen[task.instance_id] = line
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{path}: no tasks in the file")
    return tasks


def _task(item: Any, line: int, path: Path, allow_workspace_outside: bool = False) -> Task:
    """Validate one object of the file (``line`` for messages); resolve and check ``workspace``."""
    where = f"{path} line {line}"
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: expected a JSON object, got {type(item).__name__}")
    try:
        task = Task.model_validate({**item, "source_line": line})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "task"
        message = "missing (required)" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise TaskFileError(f"{where}: {field}: {message}{more}") from None
    if task.workspace is not None:
        workspace = task.workspace if task.workspace.is_absolute() else path.parent / task.workspace
        if not workspace.is_dir():
            raise TaskFileError(f"{where}: workspace: {workspace} is not a directory")
        task.workspace = workspace.resolve()
        base = path.parent.resolve()
        if not allow_workspace_outside and not task.workspace.is_relative_to(base):
            raise TaskFileError(f"{where}: workspace: {task.workspace} is outside the task file's directory "
                                f"{base} (allow it with {WORKSPACE_OUTSIDE_OPTION})")
    return task


def parquet_items(path: Path) -> list[tuple[int, Any]]:
    """``(row number, object)`` of each row of a Parquet file (what the Hugging Face hub stores a
    dataset split as, e.g. SWE-bench Verified's ``data/test-00000-of-00001.parquet``), read with
    ``pyarrow`` (the ``[parquet]`` extra). Row numbers count from 1 and stand for "line" in errors.

    Raises:
        TaskFileError: pyarrow is missing, or the file is not Parquet.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskFileError(f"{path}: reading Parquet needs pyarrow (pip install 'swe-sandbox[parquet]')") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid and ArrowIOError are both
        raise TaskFileError(f"cannot read task file {path}: {exc}") from None
    return list(enumerate(rows, 1))


def _json_items(text: str, path: Path) -> list[tuple[int, Any]]:
    """The elements of a top-level JSON list, each with the line where it starts."""
    data = parse_json(text, path)
    if not isinstance(data, list):
        raise TaskFileError(f"{path}: expected a JSON list of task objects, got {type(data).__name__}")
    decoder, index, items = json.JSONDecoder(), text.index("[") + 1, []
    for _ in data:
        index = _skip(text, index, " \t\r\n,")
        item, end = decoder.raw_decode(text, index)
        items.append((text.count("\n", 0, index) + 1, item))
        index = end
    return items


def _skip(text: str, index: int, chars: str) -> int:
    while index < len(text) and text[index] in chars:
        index += 1
    return index


#: Suffixes of a dataset directory's split files: ``<split>-NNNNN-of-NNNNN.parquet`` (how the Hugging
#: Face hub's ``download --local-dir`` writes a split, e.g. ``data/test-00000-of-00001.parquet``),
#: ``<split>.parquet``, ``<split>.jsonl``, ``<split>.json``.
SPLIT_SUFFIXES = (".parquet", ".jsonl", ".json")


def load_dataset(path: str | Path, split: str | None = None, *, allow_workspace_outside: bool = False) -> list[Task]:
    """``load_tasks`` of a task file, or of one split of a dataset directory.

    Args:
        path: a task file, or a directory holding a dataset's splits (``SPLIT_SUFFIXES``, at any
            depth, outside hidden directories).
        split: the split to read from a directory (e.g. ``test``, ``dev``); None: its only one.
        allow_workspace_outside: as ``load_tasks``'. Defaults to False.

    Returns:
        list[Task]: the split's tasks, file after file (sorted by name).

    Raises:
        TaskFileError: as ``load_tasks``; a ``split`` given with a file; a directory without that
            split (the message lists the splits it has), or with several and none chosen; an
            ``instance_id`` in two files of the split.
    """
    path = Path(path)
    if not path.is_dir():
        if split is not None:
            raise TaskFileError(f"--split {split}: {path} is a task file, not a dataset directory")
        return load_tasks(path, allow_workspace_outside=allow_workspace_outside)
    splits = dataset_splits(path)
    if split is None and len(splits) != 1:
        raise TaskFileError(f"{path}: choose a split with --split ({', '.join(sorted(splits)) or 'none found'})")
    chosen = split if split is not None else next(iter(splits))
    if chosen not in splits:
        raise TaskFileError(f"{path}: no split {chosen!r} (it has: {', '.join(sorted(splits)) or 'none'})")
    tasks = [task for file in splits[chosen] for task in load_tasks(file, allow_workspace_outside=allow_workspace_outside)]
    duplicates = sorted(i for i, n in Counter(t.instance_id for t in tasks).items() if n > 1)
    if duplicates:
        raise TaskFileError(f"{path}: split {chosen!r}: instance_id in two of its files: {', '.join(duplicates[:5])}")
    return tasks


def dataset_splits(directory: Path) -> dict[str, list[Path]]:
    """``{split: its files, sorted}`` of a dataset directory (``SPLIT_SUFFIXES``)."""
    found: dict[str, list[Path]] = {}
    for file in sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in SPLIT_SUFFIXES):
        if any(part.startswith(".") for part in file.relative_to(directory).parts):
            continue  # .cache/huggingface and the like
        sharded = file.suffix == ".parquet" and "-of-" in file.stem
        found.setdefault(file.stem.split("-", 1)[0] if sharded else file.stem, []).append(file)
    return found
