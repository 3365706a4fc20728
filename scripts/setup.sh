#!/usr/bin/env bash
# Prepare this checkout for use and tests: the engines, then `pip install -e '.[dev]'`.
#
#  1. scripts/setup-engines.sh: installs (Debian packages) and starts what the backends need:
#     bubblewrap, Docker (dockerd), Podman (its API socket), OpenSSH's server (the ssh tests start
#     their own sshd on loopback), and builds the sandbox images offline. Needs root (or
#     passwordless sudo); without it, or with SWE_SANDBOX_SKIP_ENGINES=1, this is a warning and the
#     backends that are missing skip their tests (under CI they fail).
#  2. the editable install;
#  3. the bundled task suite (examples/tasks/build.py).
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
