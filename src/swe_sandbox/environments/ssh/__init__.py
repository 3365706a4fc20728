"""The ``ssh`` backend: commands on a remote host over one SSH connection (paramiko).

- ``environment``: ``SshEnvironment`` and its config;
- ``link``: one connection (host keys, keepalives, I/O);
- ``streams``: the runner's channel and the exec fallback's processes over that connection;
- ``files``: uploads and downloads over SFTP;
- ``remote_bwrap``: ``remote_sandbox: bwrap``, the bwrap backend's policy on the remote host.

Nothing is imported here: paramiko is imported only when a connection is opened.
"""
