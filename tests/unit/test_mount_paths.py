"""The "path stays under the mount" rule, once for bwrap and ssh's remote bwrap (``base.mount_relative``)."""

from __future__ import annotations

import pytest

from swe_sandbox.environments.base import mount_relative
from swe_sandbox.environments.ssh.environment import SshConfig, SshEnvironment


@pytest.mark.parametrize(("path", "rel"), [
    ("/workspace", ""), ("/workspace/", ""), ("/workspace/a/b", "a/b"), ("/workspace/..foo", "..foo"),
    ("/workspace/a/../..foo/x", "..foo/x"), ("/workspace/...", "..."),
])
def test_paths_under_the_mount_are_relative_to_it(path, rel):
    assert mount_relative(path, "/workspace") == rel


@pytest.mark.parametrize("path", ["/", "/workspace/..", "/workspace/../etc", "/workspacefoo", "/tmp/x"])
def test_paths_outside_the_mount_are_refused(path):
    with pytest.raises(ValueError, match="only paths under /workspace can be copied"):
        mount_relative(path, "/workspace")


def test_ssh_remote_bwrap_accepts_a_file_named_dot_dot_foo():
    env = SshEnvironment(SshConfig(host="example.invalid", remote_sandbox="bwrap", workspace="/srv/ws"))
    assert env._remote("/workspace/..foo") == "/srv/ws/..foo"
    assert env._remote("/workspace") == "/srv/ws"
    with pytest.raises(ValueError, match="only paths under /workspace"):
        env._remote("/workspace/../etc/passwd")


@pytest.mark.parametrize("path", ["/workspace", "/srv/repo", "/tmp/repo", "/var/tmp/a/b", "/home/me/x/"])
def test_bwrap_mount_points_may_lie_below_tmp(path):
    from swe_sandbox.environments.bwrap import BwrapConfig, mount_point_problem

    assert mount_point_problem(path) is None
    assert BwrapConfig(mount_point=path).mount_point == path.rstrip("/")


@pytest.mark.parametrize("path", ["/", "/tmp", "/var/tmp", "/usr/x", "/etc", "/proc/x", "/dev/shm", "relative",
                                  "/a/../b", "/run/x"])
def test_bwrap_mount_points_elsewhere_are_refused(path):
    from swe_sandbox.environments.bwrap import mount_point_problem

    assert mount_point_problem(path).startswith("must be a normalised absolute path outside /, /usr")
