"""The self-check of ``swe-sandbox check``: is a backend usable here, and does it behave?

For each backend: can it run on this host (and if not, why), what it isolates, and a quick self
check: start it, run ``echo ok``, a 1-second timeout on ``sleep 5`` (must return within
``TIMEOUT_CHECK_LIMIT_S``, timed out), and the round trip of ``true``. Each check is a row (a dict);
the command renders the rows. No pytest here: ``import swe_sandbox.testing.selfcheck`` is cheap.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from swe_sandbox.backends import BACKENDS, backend_names
from swe_sandbox.capabilities import NETWORK_ALLOWLIST, missing_capabilities
from swe_sandbox.config import load_environment_config, preset_names
from swe_sandbox.environments import environment_class, get_environment
from swe_sandbox.environments.base import Environment
from swe_sandbox.errors import BackendUnavailable, ConfigError
from swe_sandbox.terminal import one_line

#: Seconds a 1-second timeout on ``sleep 5`` may take to come back.
TIMEOUT_CHECK_LIMIT_S = 2.0
#: Runs of ``true`` timed (after two warm-up runs).
ROUND_TRIPS = 20
#: Under a backend the check shows but does not count: a built-in that needs a target (ssh: a
#: host), or a third-party backend (registered through the ``swe_sandbox.environments`` entry point).
NEEDS_TARGET = "needs a target"
PLUGIN = "plugin"


def check_plan(env: str | None) -> list[tuple[str, Any, bool]]:
    """What to check: every backend (``env`` None), or the one ``env`` names.

    Args:
        env: a backend name, a preset or a YAML file; None: every backend (plugins, and backends
            that need a target, are shown but not required to pass).

    Returns:
        list[tuple[str, Any, bool]]: ``(backend name, config spec, required to pass)`` each.

    Raises:
        ConfigError: ``env`` is neither a backend, a preset nor a file, or names no backend.
    """
    presets = set(preset_names())

    def spec_for(name: str) -> Any:
        return name if name in presets else {"backend": name}

    if env is None:
        return [(name, spec_for(name), name in BACKENDS and not needs_target(name)) for name in backend_names()]
    if env in backend_names():
        return [(env, spec_for(env), True)]
    data = load_environment_config(env)  # a preset or file; ConfigError if neither
    if "backend" not in data:
        raise ConfigError(f"environment.backend: missing in {env}")
    return [(str(data["backend"]), env, True)]


def check_backend(name: str, spec: Any, overrides: list[str] | None = None, *,
                  raise_config_errors: bool = False) -> dict[str, Any]:
    """Self-check one backend; a failure is reported in the returned row.

    "Usable" means the backend can run here *with this config*: a sandbox that does not start
    because of ``BackendUnavailable`` (e.g. ``bwrap_path`` names no binary) is not usable.

    Args:
        name: the backend's name.
        spec: its config (a preset name, a YAML file or a dict, as ``get_environment`` takes).
        overrides: ``environment.key=value`` overrides. Default none.
        raise_config_errors: raise a config error rather than report it. Default False.

    Returns:
        dict: ``backend``, ``usable`` (bool), ``isolation``, ``steps`` (``[(good, text)]``), ``ok``
        (bool), ``allowlist`` (``allowlist_support``) once the config loads, and ``reason`` when it
        is not usable.

    Raises:
        ConfigError: only with ``raise_config_errors`` (the config or ``overrides`` are invalid);
            otherwise a config error is the row's reason.
    """
    row: dict[str, Any] = {"backend": name, "usable": False, "isolation": "", "steps": [], "ok": False}
    try:
        cls = environment_class(name)
    except Exception as exc:  # a plugin that does not import
        row["reason"] = f"cannot load backend: {type(exc).__name__}: {one_line(str(exc))}"
        return row
    row["isolation"] = getattr(cls, "isolation", "") or "(not stated)"
    try:
        reason = cls.unavailable_reason()
    except Exception as exc:
        reason = f"unavailable_reason() failed: {type(exc).__name__}: {exc}"
    if reason:
        row["reason"] = one_line(reason)
        return row
    try:
        environment = get_environment(spec, overrides=list(overrides or []))
    except ConfigError as exc:
        if raise_config_errors:
            raise
        row["reason"] = "config error: " + one_line(str(exc).removeprefix("invalid config:"))
        return row
    except Exception as exc:
        row["reason"] = f"{type(exc).__name__}: {one_line(str(exc))}"
        return row
    row["isolation"] = getattr(environment, "isolation", "") or row["isolation"]  # per config (ssh + bwrap)
    row["allowlist"] = allowlist_support(environment)
    self_check(environment, row)
    row["ok"] = bool(row["steps"]) and all(good for good, _ in row["steps"])
    return row


def allowlist_support(environment: Environment) -> tuple[bool, str]:
    """Whether ``network: allowlist`` works for this backend here: ``(yes, "yes")``, or
    ``(False, why)`` (the backend's declaration, or proxy.py missing on this host)."""
    import importlib.util

    missing = missing_capabilities(type(environment), environment.config)
    if NETWORK_ALLOWLIST in missing:
        return False, "no: " + missing[NETWORK_ALLOWLIST]
    if importlib.util.find_spec("proxy") is None:
        return False, "no: proxy.py is not installed (pip install proxy.py)"
    return True, "yes"


def self_check(environment: Environment, row: dict[str, Any]) -> None:
    """Start ``environment``, run the checks into ``row["steps"]``, close it; set ``usable`` / ``reason``.

    Args:
        environment: not started yet.
        row: the backend's row (``check_backend``), updated in place.
    """
    steps = row["steps"]
    try:
        t0 = time.perf_counter()
        try:
            environment.start()
        except BackendUnavailable as exc:  # not usable with this config (e.g. no such bwrap_path)
            row["reason"] = one_line(str(exc)) or "BackendUnavailable"
            return
        row["usable"] = True
        steps.append((True, f"start {1000 * (time.perf_counter() - t0):.0f} ms"))
        for step in (echo_step, timeout_step, round_trip_step):
            steps.append(step(environment))
    except Exception as exc:
        problem = f"{type(exc).__name__}: {one_line(str(exc))}".rstrip(": ")
        steps.append((False, problem))
        if not row["usable"]:  # it failed to start: that is why it is not usable
            row["reason"] = problem
    finally:
        try:
            environment.close()
        except Exception as exc:
            steps.append((False, f"close failed: {type(exc).__name__}: {one_line(str(exc))}"))


def echo_step(environment: Environment) -> tuple[bool, str]:
    """``echo ok`` prints ``ok`` and exits 0.

    Returns:
        tuple[bool, str]: whether it did, and the step's line.
    """
    r = environment.execute({"command": "echo ok"}, timeout=30)
    good = r["returncode"] == 0 and r["output"] == "ok\n"
    return good, "echo ok" if good else f"echo ok: got {r['output']!r}, returncode {r['returncode']}"


def timeout_step(environment: Environment) -> tuple[bool, str]:
    """A 1-second timeout on ``sleep 5`` returns, timed out, within ``TIMEOUT_CHECK_LIMIT_S``.

    Returns:
        tuple[bool, str]: whether it did, and the step's line (with the seconds it took).
    """
    t0 = time.perf_counter()
    r = environment.execute({"command": "sleep 5"}, timeout=1)
    took = time.perf_counter() - t0
    good = bool(r["extra"].get("timed_out")) and r["returncode"] == -1 and took <= TIMEOUT_CHECK_LIMIT_S
    return good, f"1 s timeout on sleep 5: back in {took:.2f} s" + ("" if r["extra"].get("timed_out")
                                                                   else ", NOT timed out")


def round_trip_step(environment: Environment) -> tuple[bool, str]:
    """``ROUND_TRIPS`` runs of ``true`` (after two warm-up runs) all exit 0; their median time.

    Returns:
        tuple[bool, str]: whether all exited 0, and the step's line (the median, in ms).
    """
    times = []
    codes = set()
    for _ in range(ROUND_TRIPS + 2):
        t0 = time.perf_counter()
        codes.add(environment.execute({"command": "true"}, timeout=30)["returncode"])
        times.append(time.perf_counter() - t0)
    median = statistics.median(times[2:])  # first two: warm-up
    return codes == {0}, f"`true` round trip {1000 * median:.1f} ms (median)"


def needs_target(name: str) -> bool:
    """Whether backend ``name`` cannot run without being told where (``Environment.needs_target``).

    Returns:
        bool: False also for a backend that does not load (``check_backend`` reports it).
    """
    try:
        return bool(getattr(environment_class(name), "needs_target", False))
    except Exception:  # noqa: BLE001 - a plugin that does not import is reported by check_backend
        return False


def not_counted_label(name: str) -> str:
    """Why a backend's failure does not count.

    Returns:
        str: ``NEEDS_TARGET`` for a backend that cannot run without being told where, else
        ``PLUGIN`` for an entry-point backend (only those are plugins; ssh is built in).
    """
    return NEEDS_TARGET if name in BACKENDS or needs_target(name) else PLUGIN
