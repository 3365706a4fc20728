"""The package's version (one place: ``swe_sandbox.__version__`` and the trajectories' ``info``)."""

__version__ = "0.1.0"
