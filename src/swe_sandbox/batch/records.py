"""The output directory's records: ``results.jsonl`` (append-only) and ``preds.json`` (DESIGN.md §7).

``results.jsonl`` holds one ``AttemptRecord`` a line, one per finished attempt, and is the source
of truth for resume: an instance is *done* once one of its attempts ended with an agent outcome
(``done: true``); an attempt that failed for an infrastructure reason (``done: false``) is run
again, up to ``max_attempts`` attempts in all. Lines are appended with one ``write`` and
``fsync``ed; a line torn by a crash (the last one) is ignored when read and finished with a
newline before the next append, so the file stays one JSON object a line.

``preds.json`` holds SWE-bench predictions in mini-swe-agent's shape, ``{instance_id:
{model_name_or_path, instance_id, model_patch}}``, sorted by ``instance_id`` and rewritten
atomically (a reader sees the old or the new file, never half of one).

The order of writes makes a crash at any instant safe: trajectory, then ``preds.json``, then the
``results.jsonl`` line, which commits the attempt. A kill before that line reruns the instance,
whose ``preds.json`` entry and trajectory are then replaced, so each instance ends with one of each.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swe_sandbox.errors import ConfigError, Outcome
from swe_sandbox.files import append_bytes, atomic_write_text, jsonl_lines, to_json

RESULTS_FILE = "results.jsonl"
PREDS_FILE = "preds.json"
#: ``--rollouts K``: every sample's prediction (``preds.json`` keeps sample 0's, SWE-bench's shape).
SAMPLES_FILE = "preds.samples.json"
REPORT_FILE = "report.json"
TRAJECTORY_SUFFIX = ".traj.json"
EVAL_DIR = "eval"
#: Names the run itself uses at the top of an output directory: no ``instance_id`` may be one
#: (an instance's directory is ``DIR/<instance_id>``; compared case-insensitively).
RUN_FILES = (RESULTS_FILE, PREDS_FILE, REPORT_FILE, SAMPLES_FILE)


def sample_label(instance_id: str, sample: int | None) -> str:
    """``instance_id``, or ``instance_id/sample`` for a group's sample (an id is a safe file name:
    never a ``/`` in it, so the label is unambiguous)."""
    return instance_id if sample is None else f"{instance_id}/{sample}"


class AttemptRecord(BaseModel):
    """One line of ``results.jsonl``: how one attempt at one instance ended."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)  # a hand-edited NaN cost is no line

    instance_id: str
    attempt: int = Field(default=1, ge=1)
    """1 for the first attempt at this instance, then 2, 3, ..."""
    exit_status: str
    """The agent's exit status (``Submitted``, ``LimitsExceeded``, ...) or the failure's class name."""
    done: bool
    """True: an agent outcome (not run again); False: an infrastructure failure (run again).
    Written as ``outcome.done`` (``swe_sandbox.errors.Outcome``); resume reads this field, so the
    lines of older runs, without ``outcome``, resume as before."""
    outcome: Outcome | None = None
    """What the attempt's ending means (``errors.outcome_of``: ``agent``, ``instance``, ``sandbox``,
    ...); None in lines written before outcomes were recorded, and in evaluation-only lines."""
    error: str = ""
    """One line on what went wrong, when something did."""
    cost: float = 0.0
    """Model cost in USD."""
    api_calls: int = 0
    steps: int = 0
    duration_s: float = 0.0
    """Wall time of the attempt (agent and evaluation), seconds."""
    backend: str = ""
    node: str = Field(default_factory=socket.gethostname)
    """Host name of the machine that ran the attempt."""
    ray_node: str | None = None
    """With ``--ray``: the id of the Ray node that ran the attempt (or last reported it ran it)."""
    started_at: float = 0.0
    """Unix time, seconds."""
    finished_at: float = 0.0
    """Unix time, seconds."""
    patch_lines: int = 0
    """Lines of the submission (0: empty patch)."""
    eval_status: str | None = None
    """With evaluation: ``resolved``, ``unresolved``, ``empty_patch``, ``patch_failed``, ``timeout``, ``error``."""
    resolved: bool | None = None
    reward: float | None = None
    eval_pending: bool = False
    """The agent's outcome is kept (``done``) but its evaluation failed for an infrastructure
    reason (no verdict, ``eval_status: error``): it is evaluated again on resume, not run again."""
    eval_only: bool = False
    """This line is a re-evaluation of an earlier attempt's patch (its agent fields are copied,
    its cost, api calls and steps are 0)."""
    generation: int = 0
    """0, or the ``--redo-existing`` run this attempt belongs to (1, 2, ...)."""
    patch_sha256: str | None = None
    """With evaluation: sha256 of the patch the verdict graded (``swe-sandbox eval`` grades an
    instance again when its prediction's patch is another)."""
    grading: str | None = None
    """With evaluation: the grading policy of the verdict (``strict``, ``swebench``)."""
    sample: int | None = None
    """``--rollouts K`` (K > 1): the sample's number in its instance's group, 0 .. K-1; resume,
    attempts and exactly-once hold per ``(instance_id, sample)``. None: one rollout per instance."""
    group: str | None = None
    """``--rollouts K``: id of the preparation (start, setup, snapshot) the sample came from."""
    group_mode: str | None = None
    """``--rollouts K``: ``fork``, ``reuse`` or ``fresh`` (``swe_sandbox.batch.groups``)."""
    prepare_s: float | None = None
    """``--rollouts K``: seconds the group's preparation took (the same on every line of one ``group``)."""
    fork_s: float | None = None
    """``--rollouts K``: seconds this sample waited for its sandbox after the preparation (a fork, a reset)."""
    reset_drift: list[str] = []
    """``--reuse``: what the reset before this sample could not revert (it ran in a new sandbox then)."""

    @property
    def label(self) -> str:
        """The key resume counts by: ``instance_id``, or ``instance_id/sample``."""
        return sample_label(self.instance_id, self.sample)


def trajectory_file(directory: Path, instance_id: str, sample: int | None = None) -> Path:
    """Where an instance's trajectory goes under ``directory`` (an output directory):
    ``<id>/<id>.traj.json``, or for a group's sample ``<id>/<sample>/<id>.traj.json``."""
    base = directory / instance_id
    return (base / str(sample) if sample is not None else base) / f"{instance_id}{TRAJECTORY_SUFFIX}"


def output_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as the run's output directory, made if missing.

    An existing directory must belong to this process's user (or to root, e.g. ``/tmp``): one
    another user owns could hold links that user planted, or be read by them.

    Raises:
        ConfigError: it cannot be made (names the cause), is not writable, or belongs to another
            user (names the owner).
    """
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--output: cannot create the directory {directory}: {exc.strerror or exc}") from None
    owner = directory.stat().st_uid
    if owner not in (os.geteuid(), 0):
        raise ConfigError(f"--output: the directory {directory} belongs to another user (uid {owner}); "
                          "give a directory of your own")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"--output: the directory {directory} is not writable")
    return directory


def instance_directory(output_dir: Path, instance_id: str, *parts: str) -> Path:
    """``output_dir/<instance_id>[/parts...]``, each level made if missing, and each a real
    directory of this process's user: a symlink or another user's directory planted there
    (a shared output directory) would take the instance's files elsewhere.

    Raises:
        ConfigError: a level is a symlink, not a directory, or another user's (names it).
    """
    path = output_dir
    for name in (instance_id, *parts):
        path = path / name
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)
        found = os.lstat(path)
        if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
            raise ConfigError(f"--output: {path} is not a directory of the run (a symlink or a file): "
                              "remove it, or give another directory")
        if found.st_uid != os.geteuid():
            raise ConfigError(f"--output: {path} belongs to another user (uid {found.st_uid}): "
                              "remove it, or give a directory of your own")
    return path


class ResultsLog:
    """``results.jsonl``: appends (thread-safe, one write each, fsync'ed) and reads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> list[AttemptRecord]:
        """Every complete, valid line, in order (a torn or foreign line is skipped)."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        records = []
        for line in jsonl_lines(text):
            try:
                records.append(AttemptRecord.model_validate_json(line))
            except ValidationError:
                continue
        return records

    def append(self, record: AttemptRecord) -> None:
        """Append ``record`` as one line; a torn last line (a crash mid-write) is ended first.

        Raises:
            OSError: the file cannot be written (``ELOOP``: it is a symlink, never followed).
        """
        data = (record.model_dump_json() + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_bytes(self.path, data, end_torn_line=True)


class ResumeState:
    """What ``results.jsonl`` says about each instance (or, ``--rollouts K``, each sample: every
    method's ``instance_id`` is then a record's ``label``, ``instance_id/sample``): attempts so far
    and whether it is done.

    Args:
        records: the file's records, in order.
        generation: records of earlier generations do not count (``--redo-existing``: the
            attempts of earlier runs stay in the file but the instances run again; see
            ``redo_generation``).
        counts: a record for which it returns False counts only for numbering (``swe-sandbox
            eval``: a verdict of another patch or policy than the prediction's now).
    """

    def __init__(self, records: Iterable[AttemptRecord], generation: int = 0,
                 counts: Callable[[AttemptRecord], bool] | None = None):
        self.generation, self.counts = generation, counts
        self.attempts: dict[str, int] = {}
        self.eval_attempts: dict[str, int] = {}
        self.all_attempts: dict[str, int] = {}
        self.final: dict[str, AttemptRecord] = {}
        for record in records:
            self.add(record)

    def add(self, record: AttemptRecord) -> None:
        """Take one more record into account (one of an earlier generation only for numbering).
        Records are counted by their ``label``: the instance, or the instance's sample."""
        instance_id = record.label
        self.all_attempts[instance_id] = self.all_attempts.get(instance_id, 0) + 1
        if record.generation < self.generation or (self.counts is not None and not self.counts(record)):
            return
        if not record.eval_only:
            self.attempts[instance_id] = self.attempts.get(instance_id, 0) + 1
        if record.eval_pending:
            self.eval_attempts[instance_id] = self.eval_attempts.get(instance_id, 0) + 1
        if record.done or not self.is_done(instance_id):
            self.final[instance_id] = record

    def is_done(self, instance_id: str) -> bool:
        record = self.final.get(instance_id)
        return record is not None and record.done

    def should_run(self, instance_id: str, max_attempts: int) -> bool:
        """Not done, and fewer than ``max_attempts`` attempts (of this generation) so far."""
        return not self.is_done(instance_id) and self.attempts.get(instance_id, 0) < max_attempts

    def exhausted(self, instance_id: str, max_attempts: int) -> bool:
        """Not done and out of attempts: the instance ends without a result of its own."""
        return not self.is_done(instance_id) and not self.should_run(instance_id, max_attempts)

    def should_evaluate(self, instance_id: str, max_attempts: int) -> bool:
        """Done, but not evaluated yet (a run without evaluation) or its evaluation failed for an
        infrastructure reason, and fewer than ``max_attempts`` such failures so far."""
        record = self.final.get(instance_id)
        return (record is not None and record.done and (record.eval_status is None or record.eval_pending)
                and self.eval_attempts.get(instance_id, 0) < max_attempts)

    def next_attempt(self, instance_id: str) -> int:
        """The number of the next attempt (counting every attempt the file holds)."""
        return self.all_attempts.get(instance_id, 0) + 1


def redo_generation(records: list[AttemptRecord], instance_ids: Iterable[str], max_attempts: int) -> int:
    """The generation a ``--redo-existing`` run writes: the latest one while it has unfinished
    instances (a redo run that was killed resumes, and what it finished is not run a third time),
    else a new one."""
    latest = max((r.generation for r in records), default=0)
    if latest:
        state = ResumeState(records, latest)
        if any(state.should_run(i, max_attempts) for i in instance_ids):
            return latest
    return latest + 1


def prediction(instance_id: str, patch: str, model_name: str) -> dict[str, Any]:
    """One SWE-bench prediction (mini-swe-agent's keys)."""
    return {"model_name_or_path": model_name, "instance_id": instance_id, "model_patch": patch}


class SamplesFile:
    """``preds.samples.json`` (``--rollouts K``): ``{instance_id: [prediction | null] * K}``, each
    prediction with its ``sample`` (null: not done yet); rewritten atomically on every change."""

    def __init__(self, path: str | Path, k: int):
        self.path, self.k = Path(path), k
        self._lock = threading.Lock()
        self.preds: dict[str, list[dict[str, Any] | None]] = {}
        found = read_json(self.path)
        if isinstance(found, dict):
            self.preds = {i: list(v)[:k] + [None] * (k - len(v)) for i, v in found.items() if isinstance(v, list)}

    def keep_only(self, labels: set[str]) -> None:
        """Drop the entries of samples not in ``labels`` (written before a crash, not committed)."""
        with self._lock:
            for instance_id, entries in self.preds.items():
                self.preds[instance_id] = [e if sample_label(instance_id, s) in labels else None
                                           for s, e in enumerate(entries)]
            self._write()

    def put(self, instance_id: str, sample: int, patch: str, model_name: str) -> None:
        with self._lock:
            entries = self.preds.setdefault(instance_id, [None] * self.k)
            entries[sample] = {**prediction(instance_id, patch, model_name), "sample": sample}
            self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, to_json(dict(sorted(self.preds.items())), indent=2) + "\n")


class PredsFile:
    """``preds.json``: a dict of predictions, rewritten atomically on every change."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.preds: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            from swe_sandbox.batch.predictions import load_predictions

            self.preds = {p["instance_id"]: p for p in load_predictions(self.path)}

    def keep_only(self, instance_ids: set[str]) -> None:
        """Drop the entries of other instances (written before a crash, not committed)."""
        with self._lock:
            if set(self.preds) - instance_ids:
                self.preds = {k: v for k, v in self.preds.items() if k in instance_ids}
                self._write()

    def put(self, instance_id: str, patch: str, model_name: str) -> None:
        with self._lock:
            self.preds[instance_id] = prediction(instance_id, patch, model_name)
            self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, to_json(dict(sorted(self.preds.items())), indent=2) + "\n")


def read_json(path: Path) -> Any:
    """A JSON file's content, or None when it is missing or (being replaced) unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
