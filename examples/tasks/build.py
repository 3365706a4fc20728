"""Build the bundled task suite: task files, repositories, recorded solutions, images.

    python examples/tasks/build.py [--out DIR] [--engine docker|podman]... [--no-images] [--force]

Reads ``suite.yaml`` (projects and bugs: see ``suitelib/spec.py``) and writes into ``DIR``
(default ``examples/tasks/build/``, never committed):

- ``tools/``: pytest and what it needs, copied from this machine's installed distributions
  (pure Python; the sandboxes' Python imports it);
- ``workspaces/<instance_id>/``: the task's git repository, the project's real source (copied
  from its installed distribution) with the bug, as one commit;
- ``tasks.jsonl`` (docker/podman: SWE-bench-style images) and ``tasks-workspace.jsonl`` with
  ``bwrap.yaml`` (bwrap: the same repositories as workspaces): see ``suitelib/rows.py``;
- ``solutions/<instance_id>.traj.json``: the recorded solutions, for
  ``-c model.model_class=replay -c model.trajectory=DIR/solutions/{instance_id}.traj.json``;
- images ``swe-sandbox-suite/<instance_id>`` for each engine (``suitelib/images.py``; default:
  docker and podman, those that answer).

Idempotent: the files are rebuilt only when the recipe, this builder or the copied versions
change (``manifest.json``), an image only when its inputs do (a label); a build with nothing to
do takes about a second. The solutions are recorded on bwrap; the images need the engines and
``swe-sandbox/base`` (``scripts/setup.sh`` sets all of it up, and runs this).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suitelib import images, rows, solutions, sources  # noqa: E402
from suitelib.spec import SUITE_FILE, Suite, digest, load_suite  # noqa: E402
from suitelib.workspace import build_repo  # noqa: E402

DEFAULT_OUT = HERE / "build"
MANIFEST = "manifest.json"
RECIPE_VERSION = "1"


def log(message: str) -> None:
    print(f"build-tasks: {message}", file=sys.stderr, flush=True)


def inputs_hash(suite: Suite) -> str:
    """Hash of everything the files depend on: recipe, builder, copied versions, interpreter."""
    code = sorted(p for p in (HERE / "suitelib").glob("*.py")) + [Path(__file__).resolve(), SUITE_FILE]
    versions = [f"{d}=={v}" for p in suite.projects.values() for d, v in sources.project_versions(p).items()]
    runner = [f"{d.metadata['Name']}=={d.version}" for d in sources.runtime_closure()]
    return digest(RECIPE_VERSION, *(p.read_bytes() for p in code), *versions, *runner, sys.version[:4])


def build_files(suite: Suite, out: Path) -> list[str]:
    """Tools, repositories and task files (``out`` emptied first); returns the copied tools
    (``name==version``)."""
    for name in (rows.TOOLS, rows.WORKSPACES, rows.SOLUTIONS, ".pristine"):
        shutil.rmtree(out / name, ignore_errors=True)
    tools = out / rows.TOOLS
    copied = sources.copy_test_runner(tools)
    log("copied " + ", ".join(copied))
    built_rows = []
    for spec in suite.tasks:
        project = suite.projects[spec.project]
        versions = sources.project_versions(project)
        pristine = out / ".pristine" / spec.project
        if not pristine.exists():
            sources.copy_project(project, pristine)
        message = "Import " + ", ".join(f"{d} {v}" for d, v in versions.items())
        started = time.monotonic()
        built = build_repo(spec, project, pristine, out / rows.WORKSPACES / spec.instance_id, tools, message)
        log(f"{spec.instance_id}: {len(built.fail_to_pass)} FAIL_TO_PASS, {len(built.pass_to_pass)} "
            f"PASS_TO_PASS, {built.hidden} hidden ({time.monotonic() - started:.1f} s)")
        built_rows.append(rows.row(spec, project, built, ", ".join(versions.values())))
    shutil.rmtree(out / ".pristine", ignore_errors=True)
    rows.write_task_files(out, built_rows)
    return copied


def record_solutions(suite: Suite, out: Path, workers: int) -> None:
    """Record every task's solution on bwrap (the workspace tasks); check each submission.

    Raises:
        RuntimeError: a full solution's submission is not the gold patch, or a partial one's is.
    """
    import concurrent.futures as cf

    from swe_sandbox.batch import load_tasks
    from swe_sandbox.config import load_environment_config

    tasks = {t.instance_id: t for t in load_tasks(out / rows.WORKSPACE_TASKS)}
    env = load_environment_config(out / rows.BWRAP_ENV)
    (out / rows.SOLUTIONS).mkdir(exist_ok=True)

    def one(spec):
        path = out / rows.SOLUTIONS / f"{spec.instance_id}.traj.json"
        submission = solutions.record(tasks[spec.instance_id], spec, suite.projects[spec.project], env, path)
        if (submission == tasks[spec.instance_id].model_extra["patch"]) != (spec.solution == "full"):
            raise RuntimeError(f"{spec.instance_id}: the recorded submission is not what the recipe says "
                               f"({spec.solution}):\n{submission}")

    with cf.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, suite.tasks))
    log(f"recorded {len(suite.tasks)} solutions in {out / rows.SOLUTIONS}")


def build_images(out: Path, engines: list[str]) -> None:
    """The env image and every task's image for each engine (each only when its inputs changed)."""
    tools_hash = digest(*json.loads((out / MANIFEST).read_text())["tools"])  # the copied pytest's versions
    for engine in engines:
        env_hash = images.build_env_image(engine, out / rows.TOOLS, tools_hash)
        commits = {json.loads(line)["instance_id"]: json.loads(line)["base_commit"]
                   for line in (out / rows.IMAGE_TASKS).read_text().splitlines()}
        built = [i for i, commit in commits.items()
                 if images.build_task_image(engine, i, out / rows.WORKSPACES / i, env_hash, commit)]
        log(f"{engine}: {len(commits)} task images ready ({len(built)} built)")


def available_engines() -> list[str]:
    from swe_sandbox.environments import environment_class

    return [e for e in ("docker", "podman") if environment_class(e).unavailable_reason() is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    parser.add_argument("--engine", action="append", choices=("docker", "podman"),
                        help="build images for this engine (repeatable; default: those available)")
    parser.add_argument("--no-images", action="store_true", help="build no image")
    parser.add_argument("--force", action="store_true", help="rebuild the files even if up to date")
    parser.add_argument("-w", "--workers", type=int, default=2, help="recordings at once (default: 2)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per directory (a second one then finds it done)
        build(args, out)
    return 0


def build(args: argparse.Namespace, out: Path) -> None:
    """The files when their inputs changed (or ``--force``), then the images."""
    suite = load_suite()
    wanted = inputs_hash(suite)
    manifest = out / MANIFEST
    if args.force or not manifest.exists() or json.loads(manifest.read_text()).get("inputs") != wanted:
        manifest.unlink(missing_ok=True)
        started = time.monotonic()
        tools = build_files(suite, out)
        bind_tools(out, tools)
        record_solutions(suite, out, args.workers)
        manifest.write_text(json.dumps({"inputs": wanted, "tasks": len(suite.tasks), "tools": tools}) + "\n")
        log(f"{len(suite.tasks)} tasks built in {time.monotonic() - started:.0f} s: {out}")
    bind_tools(out, json.loads(manifest.read_text())["tools"])  # again: a copy under /tmp may be gone
    if not args.no_images:
        build_images(out, args.engine or available_engines())


def bind_tools(out: Path, tools: list[str]) -> None:
    """``bwrap.yaml``, binding ``tools/`` or, where other users cannot reach it, a shared copy."""
    rows.write_bwrap_env(out, sources.shareable_tools(out / rows.TOOLS, digest(*tools)))


if __name__ == "__main__":
    sys.exit(main())
