"""The kit as a third party runs it: a toy backend registered through the ``swe_sandbox.environments``
entry point passes ``pytest --pyargs swe_sandbox.testing --swe-sandbox-backend toy`` (what it lacks
as strict xfails), the plugin does nothing for a project that does not ask for it, and NAME may be
a preset, a YAML file or a backend."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import swe_sandbox

TOY_MODULE = '''"""A third-party backend: the local backend under another name, registered by entry point."""
from swe_sandbox.environments.local import LocalConfig, LocalEnvironment


class ToyConfig(LocalConfig):
    backend: str = "toy"


class ToyEnvironment(LocalEnvironment):
    config_class = ToyConfig
'''


def install_toy(site: Path) -> None:
    """``toy_backend`` and its distribution metadata (the entry point) in ``site``, a PYTHONPATH entry."""
    site.mkdir()
    (site / "toy_backend.py").write_text(TOY_MODULE)
    dist = site / "toy_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[swe_sandbox.environments]\ntoy = toy_backend:ToyEnvironment\n")


def run_pytest(cwd: Path, site: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m pytest -p swe_sandbox.testing.plugin ARGS`` in ``cwd`` with ``site`` and this
    checkout's package on PYTHONPATH (the installed metadata may predate the pytest11 entry point)."""
    src = Path(swe_sandbox.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src)])}
    argv = [sys.executable, "-m", "pytest", "-p", "swe_sandbox.testing.plugin", "-p", "no:cacheprovider", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.local
def test_a_toy_third_party_backend_passes_the_kit(tmp_path):
    site = tmp_path / "site"
    install_toy(site)
    done = run_pytest(tmp_path, site, "--pyargs", "swe_sandbox.testing", "--swe-sandbox-backend", "toy",
                      "-q", "-rx", timeout=900)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and not re.search(r"\b(failed|errors?|skipped)\b", summary), summary
    xfails = [line for line in done.stdout.splitlines() if line.startswith("XFAIL")]
    assert xfails and all(" - toy: " in line for line in xfails), xfails


@pytest.mark.local
def test_the_plugin_is_inert_unless_asked(tmp_path):
    """Loaded without ``--swe-sandbox-backend``, the plugin gives a project no fixture (``env`` stays unknown)."""
    (tmp_path / "test_other.py").write_text("def test_mine(env):\n    pass\n\ndef test_plain():\n    pass\n")
    done = run_pytest(tmp_path, tmp_path / "none", "-q", timeout=120)
    assert "fixture 'env' not found" in done.stdout, done.stdout
    assert "1 passed, 1 error" in done.stdout, done.stdout


def test_the_backend_option_names_a_preset_a_yaml_file_or_a_backend(tmp_path):
    """``--swe-sandbox-backend``: a preset (its fields), a YAML file (named by its stem), a backend."""
    from swe_sandbox.errors import ConfigError
    from swe_sandbox.testing.kit import Variant

    assert Variant.from_name("bwrap").backend == "bwrap"
    config = tmp_path / "mine.yaml"
    config.write_text("backend: local\ntimeout: 5\nrunner: exec\n")
    mine = Variant.from_name(str(config))
    assert (mine.name, mine.backend, mine.config()) == ("mine", "local", {"timeout": 5, "runner": "exec"})
    with pytest.raises(ConfigError, match="unknown environment 'no-such-backend'"):
        Variant.from_name("no-such-backend")


@pytest.mark.parametrize(("option", "said"), [
    ((), "the swe_sandbox.testing kit needs a backend: --swe-sandbox-backend NAME"),
    (("--swe-sandbox-backend", "missing.yaml"), "--swe-sandbox-backend missing.yaml: cannot read config file"),
    (("--swe-sandbox-backend", "no-such-backend"), "unknown environment 'no-such-backend'"),
], ids=["no-option", "missing-file", "unknown-name"])
def test_a_kit_run_without_a_usable_backend_is_one_usage_error(tmp_path, option, said):
    """Said once, before any test runs (it was one 'fixture not found' error per test, or the
    unknown-backend message for a YAML file that does not exist)."""
    done = run_pytest(tmp_path, tmp_path, "--pyargs", "swe_sandbox.testing", *option, timeout=120)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert said in done.stderr and done.stderr.count("ERROR") == 1, done.stderr


def test_a_capability_nobody_knows_is_refused():
    """A typo in a backend's declaration would silently hide a test: it is an error instead."""
    from swe_sandbox.capabilities import missing_capabilities
    from swe_sandbox.environments.local import LocalConfig, LocalEnvironment

    class Typo(LocalEnvironment):
        @classmethod
        def missing_capabilities(cls, config: LocalConfig) -> dict[str, str]:
            return {"long_lived_runer": "a typo"}

    with pytest.raises(ValueError, match="long_lived_runer"):
        missing_capabilities(Typo, LocalConfig())
