"""The ``swe-sandbox`` command line, one module per command family.

=============  ==========================================================================
module         what
=============  ==========================================================================
``app``        the typer app: a group that loads a command's module only when it runs
``exec``       ``exec``: one command in a fresh sandbox
``run``        ``run`` and ``demo``: the agent on a task (``prepare``: the task read;
               ``display``: what it shows)
``batch``      ``batch``, ``eval``, ``report``: many tasks
``check``      ``check``: is each backend usable here? (the table of
               ``swe_sandbox.testing.selfcheck``)
``engines``    ``gc``, ``image build``, ``image pull``: the container engines' housekeeping
               (``pull_display``: the pulls' progress, also for ``exec`` and ``run``)
``exit_codes`` the exit statuses of every command, in one table
``guard``      swe-sandbox's errors as one stderr line and an exit status
``signals``    SIGTERM / SIGHUP handled as Ctrl-C
=============  ==========================================================================

The rules live below: the checks before a run in ``swe_sandbox.preflight``, the task selection in
``swe_sandbox.batch.selection``, the image pulls in ``swe_sandbox.batch.pulls``, the self-check in
``swe_sandbox.testing.selfcheck``. Importing this package imports nothing (not even typer).
"""


def main() -> None:
    """Entry point of the ``swe-sandbox`` script and ``python -m swe_sandbox`` (``app.main``)."""
    from swe_sandbox.cli.app import main as run_app

    run_app()
