"""The container family: the ``docker`` and ``podman`` backends and what they share.

- ``environment``: ``ContainerEnvironment``, one container per environment, the runner attached;
- ``engine``: the engine interface (labels, ``gc``) the two SDK-specific engines implement;
- ``docker``, ``podman``: the two backends (each one engine and one environment class);
- ``archive``: files in and out through the engines' archive API;
- ``pulling``, ``pull_child``, ``pull_progress``, ``pull_errors``, ``image_ref``: image pulls
  (shared by every sandbox of a process, run in a child process) and image references.

Nothing is imported here: importing a module of this package never imports an SDK by itself.
"""
