"""Prints the rewards: 1.0 when calc.add is fixed (run in the task's workdir, with its variables)."""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import calc  # noqa: E402

fixed = calc.add(2, 3) == int(os.environ["EXPECTED_SUM"])
in_workdir = os.getcwd() == "/srv/project" and os.environ.get("PROJECT_NAME") == "calc"
print(json.dumps({"reward": float(fixed and in_workdir), "workdir": float(in_workdir)}))
