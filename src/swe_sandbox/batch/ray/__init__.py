"""Ray scale-out of a batch (``--ray``; DESIGN.md §7): one Ray task per unit of work.

``settings`` (no Ray import) holds what the driver, the workers and the CLI share; ``executor`` is
the driver's side (``RayExecutor``: the thread pool's interface, ``swe_sandbox.batch.executors``),
``worker`` what one Ray task runs. Importing this package imports nothing.
"""
