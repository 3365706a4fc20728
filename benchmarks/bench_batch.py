#!/usr/bin/env python3
"""Batch throughput: ``swe-sandbox batch`` against ``mini-extra swebench`` (mini-swe-agent's own
docker environment), same tasks, same scripted model server, same engine, in one run.

    python benchmarks/bench_batch.py [--workers 1 4 8] [--steps 10] [--tasks 20] [--repeat 1]

- Tasks: the bundled suite's SWE-bench-style instances (``examples/tasks/build/tasks.jsonl``,
  built by ``scripts/setup.sh``): the same images (``swe-sandbox-suite/<id>``, the project at
  ``/testbed``) for both; mini reads them as its local dataset (a directory with one JSON file).
- Model: the scripted OpenAI-compatible server of the tests (``tests/helpers/openai_server.py``),
  reached by both through litellm (``-m openai/scripted``). Every reply is the same bash tool
  call, a script that keeps a step counter in the sandbox's ``/tmp``: steps 1 to K-2 read the
  repository (git, ls, grep, find, sed, wc, python3), step K-1 fixes the bug (whichever task it
  is), step K submits ``git diff``. So replies fit any instance in any order, and both tools run
  the same K commands per task.
- ``--model deterministic`` replaces the server by each tool's own in-process ``deterministic``
  model replying the same command: no HTTP, no litellm, only the batch runner and the sandboxes.
- Agents only: no evaluation (mini's runner has none).
- Measured per tool and ``-w``: wall time of the whole command (start to exit, its start-up
  included), tasks per minute (= tasks / wall minutes), checked: every task submitted a
  non-empty patch. Memory, sampled every 0.5 s while it runs: the peak anonymous memory (cgroup
  ``rss``) of the tool's running containers divided by their number, and the peak resident memory
  of the tool's own process tree (what runs on the host: the driver, and for mini one ``docker
  exec`` client per running command) divided by ``-w``. Between runs, the previous run's
  containers are awaited until gone (mini stops its containers in the background after it
  exits); any still there after 60 s are force-removed and counted.

Tools, alternating per ``-w`` (``--repeat`` rounds; the median is reported): ``swe-sandbox batch
--env docker`` and ``mini-extra swebench -c swebench.yaml`` (``environment_class: docker``,
containers labelled through its ``run_args``). Needs docker, the suite's images and
mini-swe-agent (``pip install -e '.[dev]'``). A measurement, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples" / "tasks"))

from helpers.openai_server import ScriptedOpenAIServer, tool_call  # noqa: E402

BUILD = ROOT / "examples" / "tasks" / "build"
API_KEY = "sk-bench-0123456789abcdef"
LABEL = "org.swe-sandbox.bench"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
READS = ["git status --short && ls", "git log --oneline | head -n 3", "ls -la", "find . -name '*.py' | head -n 20",
         "grep -rn 'def ' --include='*.py' . | head -n 20", "sed -n 1,40p \"$(git ls-files '*.py' | head -n 1)\"",
         "wc -l $(git ls-files '*.py' | head -n 5)", "python3 -c 'import sys; print(sys.version)'"]


def fix_script() -> str:
    """Python undoing every suite bug it finds (each bug's text exists in its own task only)."""
    from suitelib.spec import load_suite

    fixes = [(e.file, e.new, e.old) for t in load_suite().tasks for e in t.edits]
    return ("from pathlib import Path\n"
            f"for name, bug, fix in {fixes!r}:\n"
            "    path = Path(name)\n"
            "    if path.is_file() and path.read_text().count(bug) == 1:\n"
            "        path.write_text(path.read_text().replace(bug, fix))\n")


def step_command(steps: int) -> str:
    """The one command every reply carries: step n of ``steps`` by a counter in /tmp."""
    reads = [READS[i % len(READS)] for i in range(steps - 2)]
    cases = [f"  {n}) {cmd} ;;" for n, cmd in enumerate(reads, 1)]
    cases.append(f"  {steps - 1}) python3 - <<'PY'\n{fix_script()}PY\n    git diff --stat ;;")
    cases.append(f"  *) {SUBMIT} ;;")
    head = "n=$(( $(cat /tmp/.bench-step 2>/dev/null || echo 0) + 1 )); echo $n > /tmp/.bench-step\n"
    return head + 'case "$n" in\n' + "\n".join(cases) + "\nesac"


def model_args(tool: str, url: str | None, command: str, steps: int) -> list[str]:
    """The model options: the scripted server through litellm (``url``), or, without a server,
    each tool's own ``deterministic`` model replying ``command`` ``steps`` times (no HTTP, no
    litellm: what is left is the batch runner and the sandbox layer)."""
    if url is not None:
        return ["-m", "openai/scripted", "-c", f"model.model_kwargs.api_base={url}/v1",
                "-c", f"model.model_kwargs.api_key={API_KEY}", "-c", "model.cost_tracking=ignore_errors"]
    if tool == "swe-sandbox":
        return ["-c", "model.model_class=deterministic", "-c", f"model.outputs={json.dumps([command] * steps)}"]
    reply = {"role": "assistant", "content": "Next step.", "extra": {"actions": [{"command": command}]}}
    return ["--model-class", "deterministic", "-m", "deterministic",
            "-c", f"model.outputs={json.dumps([reply] * steps)}"]


def swe_sandbox_argv(tasks: Path, out: Path, workers: int, run: str) -> list[str]:
    return [sys.executable, "-m", "swe_sandbox", "batch", str(tasks), "-o", str(out), "--env", "docker",
            "-w", str(workers), "-c", f'environment.labels={{"{LABEL}": "{run}"}}']


def mini_argv(dataset: Path, out: Path, workers: int, run: str) -> list[str]:
    mini = Path(sys.executable).with_name("mini-extra")
    return [str(mini), "swebench", "-c", "swebench.yaml", "--subset", str(dataset), "--split", "train",
            "-o", str(out), "-w", str(workers), "-c", f'environment.run_args=["--rm", "--label", "{LABEL}={run}"]']


def mini_env(tmp: Path) -> dict[str, str]:
    """mini with a config directory of its own, Hugging Face ``datasets`` offline."""
    (tmp / "mini-config").mkdir(exist_ok=True)
    return {**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(tmp / "mini-config"), "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1", "HF_HOME": str(tmp / "hf"), "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1"}


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            total += int(Path(f"/proc/{current}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    return total


def machine_busy_s() -> float:
    """CPU seconds this machine has spent busy since boot, all cores (``/proc/stat``)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def container_rss(run: str) -> list[int]:
    """Anonymous memory (cgroup v1 ``rss``, else v2 ``anon``) of each running container of ``run``."""
    done = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label={LABEL}={run}"],
                          capture_output=True, text=True)
    sizes = []
    for cid in done.stdout.split():
        for stat in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.stat",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.stat"):
            try:
                fields = dict(line.split() for line in Path(stat).read_text().splitlines())
            except OSError:
                continue
            sizes.append(int(fields.get("rss", fields.get("anon", 0))))
            break
    return sizes


def wait_gone(run: str, within: float = 60) -> int:
    """Wait (untimed) until no container of ``run`` is left: mini removes its containers in the
    background after it exits (``docker stop``, which waits out the stop timeout), and they must
    not load the next measurement. Returns how many had to be force-removed after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        done = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}={run}"],
                              capture_output=True, text=True)
        left = done.stdout.split()
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if left:
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
    return len(left)


class Sampler(threading.Thread):
    """Peak per-container memory and peak host process-tree memory while ``proc`` runs."""

    def __init__(self, proc: subprocess.Popen, run: str):
        super().__init__(daemon=True)
        self.proc, self.run_label = proc, run
        self.per_container, self.host = 0, 0

    def run(self) -> None:
        while self.proc.poll() is None:
            sizes = container_rss(self.run_label)
            if sizes:
                self.per_container = max(self.per_container, sum(sizes) // len(sizes))
            self.host = max(self.host, tree_rss(self.proc.pid))
            time.sleep(0.5)


def measure(tool: str, workers: int, rows: list[dict], steps: int, tmp: Path, scripted: bool) -> dict:
    """One run of ``tool`` over ``rows``; wall time, checks and memory."""
    run, command = uuid.uuid4().hex[:12], step_command(steps)
    out = tmp / f"{tool}-{workers}-{run}"
    replies = [tool_call(command) for _ in range(len(rows) * steps)] if scripted else []
    with ScriptedOpenAIServer(replies, require_tools=True) as server:
        url = server.url if scripted else None
        if tool == "swe-sandbox":
            argv, env = swe_sandbox_argv(tmp / "tasks.jsonl", out, workers, run), dict(os.environ)
        else:
            argv, env = mini_argv(tmp / "dataset", out, workers, run), mini_env(tmp)
        argv += model_args(tool, url, command, steps)
        started, busy = time.monotonic(), machine_busy_s()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=open(out.with_suffix(".log"), "w"), env=env, cwd=tmp)
        sampler = Sampler(proc, run)
        sampler.start()
        proc.wait()
        wall, busy = time.monotonic() - started, machine_busy_s() - busy
        sampler.join()
    forced = wait_gone(run)
    preds = json.loads((out / "preds.json").read_text()) if (out / "preds.json").exists() else {}
    submitted = sum(bool((p.get("model_patch") or "").strip()) for p in preds.values())
    if proc.returncode != 0 or submitted != len(rows):
        raise SystemExit(f"{tool} -w {workers}: exit {proc.returncode}, {submitted}/{len(rows)} patches; "
                         f"see {out.with_suffix('.log')}")
    return {"wall_s": wall, "tasks_per_min": len(rows) / (wall / 60), "container_mib": sampler.per_container / 2**20,
            "host_mib_per_worker": sampler.host / 2**20 / workers, "left_behind": forced,
            "cpu_s_per_task": busy / len(rows)}


def prepare(tmp: Path, count: int) -> list[dict]:
    """The first ``count`` suite tasks as our task file and as mini's dataset."""
    rows = [json.loads(line) for line in (BUILD / "tasks.jsonl").read_text().splitlines()][:count]
    (tmp / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "dataset").mkdir()
    (tmp / "dataset" / "instances.json").write_text(json.dumps(rows))
    return rows


def table(results: dict[tuple[str, int], list[dict]], workers: list[int]) -> str:
    lines = ["| -w | swe-sandbox tasks/min | mini-extra tasks/min | ratio | per container MiB (ours / mini) | "
             "host MiB per worker (ours / mini) | machine CPU s per task (ours / mini) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for w in workers:
        ours, mini = ({k: statistics.median(r[k] for r in results[(t, w)]) for k in results[(t, w)][0]}
                      for t in ("swe-sandbox", "mini"))
        lines.append(f"| {w} | {ours['tasks_per_min']:.1f} | {mini['tasks_per_min']:.1f} | "
                     f"{ours['tasks_per_min'] / mini['tasks_per_min']:.2f}x | {ours['container_mib']:.1f} / "
                     f"{mini['container_mib']:.1f} | {ours['host_mib_per_worker']:.1f} / {mini['host_mib_per_worker']:.1f} | "
                     f"{ours['cpu_s_per_task']:.2f} / {mini['cpu_s_per_task']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--steps", type=int, default=10, help="commands per task, >= 3 (default 10)")
    parser.add_argument("--tasks", type=int, default=20, help="suite tasks to run (default 20)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (default 1); the median is shown")
    parser.add_argument("--model", choices=("scripted", "deterministic"), default="scripted",
                        help="scripted: the OpenAI-compatible server through litellm (default); deterministic: "
                             "each tool's own in-process scripted model (the runner and sandboxes alone)")
    args = parser.parse_args()
    if not (BUILD / "tasks.jsonl").exists():
        raise SystemExit("the task suite is not built: bash scripts/setup.sh (or python examples/tasks/build.py)")
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp_name:
        tmp = Path(tmp_name)
        rows = prepare(tmp, args.tasks)
        results: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.repeat):
            for w in args.workers:
                for tool in ("swe-sandbox", "mini"):
                    result = measure(tool, w, rows, max(3, args.steps), tmp, args.model == "scripted")
                    results.setdefault((tool, w), []).append(result)
                    print(f"{tool:12} -w {w}: {result['wall_s']:6.1f} s  {result['tasks_per_min']:6.1f} tasks/min  "
                          f"{result['container_mib']:.1f} MiB/container  {result['host_mib_per_worker']:.1f} MiB host/worker  "
                          f"{result['cpu_s_per_task']:.2f} CPU s/task  {result['left_behind']} left behind",
                          file=sys.stderr, flush=True)
    print(f"{len(rows)} tasks, {max(3, args.steps)} commands each, docker, {args.model} model; "
          f"median of {args.repeat} round(s)\n")
    print(table(results, args.workers))


if __name__ == "__main__":
    main()
