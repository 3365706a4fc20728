"""The conformance kit: the execute contract, file transfer, hardening and attack suites, runnable
against any backend.

A third-party backend (registered in the ``swe_sandbox.environments`` entry-point group) proves
itself with::

    pytest --pyargs swe_sandbox.testing --swe-sandbox-backend NAME

The backend declares what it lacks, each with a reason (``swe_sandbox.capabilities``, the vocabulary
backends import); those tests are strict xfails. Modules: ``kit`` (the variant
under test and helpers), ``fixtures`` (``env``, ``make_env``, ... from ``backend_under_test``),
``plugin`` (the pytest plugin), ``test_*`` (the suites). Nothing here is imported by
``import swe_sandbox``.
"""
