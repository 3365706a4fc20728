"""The shipped presets (``environments/*.yaml``) list only what differs from their backend's
config defaults, under a comment saying what the preset is; they stay valid configs."""

from __future__ import annotations

import pytest

from swe_sandbox.backends import BACKENDS
from swe_sandbox.config import data_dir, load_yaml, preset_names, validate
from swe_sandbox.environments import environment_class


def test_every_builtin_backend_has_a_preset():
    assert set(BACKENDS) <= set(preset_names())


#: Presets named after what they are for, not after their backend.
PURPOSES = {"swebench": "docker", "swebench-podman": "podman"}


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_lists_only_what_differs_from_the_defaults(name):
    data = load_yaml(data_dir("environments") / f"{name}.yaml")
    backend = PURPOSES.get(name, name)
    assert data.get("backend") == backend
    config_class = environment_class(backend).config_class
    defaults = validate(config_class, {"backend": backend}, section="environment")
    preset = validate(config_class, data, section="environment")
    same = [key for key in data if key != "backend" and getattr(preset, key) == getattr(defaults, key)]
    assert name in BACKENDS or same != list(data)  # a purpose's preset changes something
    assert not same, f"environments/{name}.yaml: {same} equal {config_class.__name__}'s defaults; drop them"


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_says_what_it_is(name):
    first = (data_dir("environments") / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0]
    says = f'# Backend "{name}": ' if name in BACKENDS else f'# Preset "{name}" (backend "{PURPOSES[name]}"): '
    assert first.startswith(says)
