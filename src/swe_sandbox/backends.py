"""Backend names: the built-in ones and those registered through the entry point (nothing imported).

A ground-floor module (it imports nothing of swe_sandbox): ``config`` asks it whether a name is a
third-party backend, and ``environments`` resolves the names it lists into classes.

Third-party backends register in the entry-point group ``swe_sandbox.environments``::

    [project.entry-points."swe_sandbox.environments"]
    mycloud = "mypkg.env:MyCloudEnvironment"
"""

from __future__ import annotations

#: Built-in backend name -> ``module:Class`` of its Environment.
BACKENDS: dict[str, str] = {
    "local": "swe_sandbox.environments.local:LocalEnvironment",
    "bwrap": "swe_sandbox.environments.bwrap:BwrapEnvironment",
    "docker": "swe_sandbox.environments.container.docker:DockerEnvironment",
    "podman": "swe_sandbox.environments.container.podman:PodmanEnvironment",
    "ssh": "swe_sandbox.environments.ssh.environment:SshEnvironment",
}
ENTRY_POINT_GROUP = "swe_sandbox.environments"


def plugin_backend_names() -> list[str]:
    """Names of the backends registered through the ``swe_sandbox.environments`` entry point.

    Returns:
        list[str]: the third-party names (built-in names excluded), sorted.
    """
    return sorted({ep.name for ep in _entry_points()} - set(BACKENDS))


def backend_names() -> list[str]:
    """Built-in backend names followed by those registered through entry points.

    Returns:
        list[str]: ``BACKENDS``' names in their order, then ``plugin_backend_names()``.
    """
    return [*BACKENDS, *plugin_backend_names()]


def backend_target(name: str) -> str | None:
    """Where backend ``name``'s Environment class lives.

    Args:
        name: a backend name (built-in, or an entry point's name).

    Returns:
        str | None: ``"module:Class"``, or None when no backend has that name.
    """
    target = BACKENDS.get(name)
    if target is None:
        target = next((ep.value for ep in _entry_points() if ep.name == name), None)
    return target


def _entry_points():
    """The ``ENTRY_POINT_GROUP`` entry points; ``importlib.metadata`` imported only when one is
    asked for (~15 ms, which a built-in backend's start does not need)."""
    from importlib.metadata import entry_points

    return entry_points(group=ENTRY_POINT_GROUP)
