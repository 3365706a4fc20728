"""The exception tree drawn in ``swe_sandbox.errors``'s docstring is the real one, and every public
error swe-sandbox raises is defined there and exported by ``swe_sandbox``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import swe_sandbox
from swe_sandbox import errors

#: Roots the drawing hangs from (builtins, not ours).
BUILTIN_ROOTS = {"Exception": Exception, "BaseException": BaseException, "KeyboardInterrupt": KeyboardInterrupt}
#: Modules not imported here: the runner (a program of its own), __main__, and harbor.py (it imports harbor,
#: which needs Python >= 3.12: tests/harbor run it in the Harbor venv).
NOT_IMPORTED = {"swe_sandbox.runner", "swe_sandbox.__main__", "swe_sandbox.harbor"}


def drawn_parents() -> dict[str, str]:
    """``{class name: parent name}`` read from the drawing (indentation gives the depth)."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():
        match = re.match(r"^(\s*(?:[│ ]\s*)*(?:[├└]── )?)([A-Z]\w+)\b", line)
        if not match or not line.startswith("    "):
            continue
        depth, name = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def our_exceptions() -> dict[str, type]:
    """Every public exception class defined anywhere in the package (SDK-free modules and the rest)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(swe_sandbox.__path__, "swe_sandbox."):
        if info.name in NOT_IMPORTED or ".testing." in info.name:
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__.startswith("swe_sandbox")
                    and not name.startswith("_")):
                found[name] = obj
    return found


def test_the_drawing_matches_the_classes() -> None:
    parents = drawn_parents()
    assert len(parents) >= 20
    for name, parent in parents.items():
        if name in BUILTIN_ROOTS:
            continue
        cls = getattr(errors, name, None)
        assert cls is not None, f"{name} is drawn but not defined in swe_sandbox.errors"
        parent_cls = BUILTIN_ROOTS.get(parent) or getattr(errors, parent)
        assert parent_cls in cls.__bases__, f"{name} is drawn under {parent}, but its bases are {cls.__bases__}"


def test_every_error_class_is_drawn_and_exported() -> None:
    parents = drawn_parents()
    defined = {name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__}
    assert defined == {name for name in parents if name not in BUILTIN_ROOTS}
    assert defined <= set(swe_sandbox.__all__)
    for name in defined:
        assert getattr(swe_sandbox, name) is getattr(errors, name)


def test_public_errors_raised_by_the_package_live_in_errors() -> None:
    """A public error class of ours outside ``errors`` must be internal control flow, named here."""
    internal = {  # qualified name: why it is not in swe_sandbox.errors
        "swe_sandbox.runner.BadFrame": "the runner is a stdlib-only program of its own, run in the sandbox",
        "swe_sandbox.environments.bwrap_seccomp.SeccompUnavailable": "caught inside the bwrap backend",
        "swe_sandbox.agent.default.ActionRejected": "raised by a user's approve callback, caught by the agent",
        "swe_sandbox.minisweagent.Submitted": "mini-swe-agent's Submitted and ours at once, for mini's loop",
    }
    outside = {f"{cls.__module__}.{name}" for name, cls in our_exceptions().items() if cls.__module__ != errors.__name__}
    assert outside <= set(internal), f"define these in swe_sandbox.errors: {sorted(outside - set(internal))}"


def drawn_outcomes() -> dict[str, str]:
    """``{class name: outcome}`` from the drawing's outcome column (the last word of a class's line)."""
    found: dict[str, str] = {}
    for line in errors.__doc__.splitlines():
        match = re.match(r"^\s*(?:[│ ]\s*)*(?:[├└]── )?([A-Z]\w+)\b.*\s([a-z]+)$", line)
        if match and line.startswith("    "):
            found[match.group(1)] = match.group(2)
    return found


def sample(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` (its constructor's required arguments filled in)."""
    if cls is errors.DownloadTooLarge:
        return cls(10, "/x")
    if cls is errors.Terminated:
        return cls(15)
    return cls("x")


def test_the_outcome_column_is_each_class_outcome() -> None:
    outcomes = drawn_outcomes()
    assert set(outcomes) >= {name for name in drawn_parents() if name not in ("Exception", "BaseException")}
    for name, outcome in outcomes.items():
        cls = BUILTIN_ROOTS.get(name) or getattr(errors, name)
        if cls in (Exception, BaseException):
            continue
        assert errors.outcome_of(sample(cls)) == errors.Outcome(outcome), name


def test_outcome_of_reads_classes_and_flags_never_text() -> None:
    assert errors.outcome_of(RuntimeError("(gave up after")) is errors.Outcome.INFRASTRUCTURE
    assert errors.outcome_of(errors.ModelError("(gave up after 3 attempt(s)")) is errors.Outcome.INSTANCE
    assert errors.outcome_of(errors.ModelError("x", gave_up=True)) is errors.Outcome.INFRASTRUCTURE
    assert errors.outcome_of(errors.ModelError("x", interrupted=True)) is errors.Outcome.INTERRUPTED

    class Custom(errors.ImagePullError):
        pass

    assert errors.outcome_of(Custom("x")) is errors.Outcome.SANDBOX
    assert [o.done for o in errors.Outcome] == [True, True, True, False, False, False, False]
    assert f"{errors.Outcome.SANDBOX}" == str(errors.Outcome.SANDBOX) == "sandbox" == errors.Outcome.SANDBOX


def test_a_model_error_keeps_its_flags_through_pickle() -> None:
    import pickle

    exc = pickle.loads(pickle.dumps(errors.ModelError("m", gave_up=True)))
    assert (str(exc), exc.gave_up, exc.outcome) == ("m", True, errors.Outcome.INFRASTRUCTURE)
