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
