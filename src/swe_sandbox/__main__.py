"""``python -m swe_sandbox``: the same as the ``swe-sandbox`` command."""

from swe_sandbox.cli import main

if __name__ == "__main__":
    main()
