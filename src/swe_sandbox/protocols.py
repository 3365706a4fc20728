"""What the agent accepts: an ``Environment`` and a ``Model``, as structural types.

Any object with these methods works: every backend of ``swe_sandbox.environments``, every model
of ``swe_sandbox.models``, a mini-swe-agent environment or model, or one of your own. Nothing
has to inherit from these classes (``typing.Protocol``); ``isinstance(obj, Model)`` checks that
the methods are there (``runtime_checkable``), not their signatures.

The agent also uses, when present: ``env.start()`` (start the sandbox before the first step),
``env.config.timeout`` (seconds, the default command timeout), ``model.cost`` (float, USD),
``model.n_calls`` (int) and ``model.tools`` (``None`` for a text model); ``batch.arollout`` uses
``await model.aquery(messages)`` when present (else ``query``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Environment(Protocol):
    """Where the agent's commands run (DESIGN.md §1, the execute contract)."""

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` with ``bash -c`` in ``cwd``.

        Args:
            action (dict): ``{"command": str}`` (other keys ignored).
            cwd (str): working directory; ``""``: the environment's own. Defaults to ``""``.
            timeout (float | None): seconds; None: the environment's default.

        Returns:
            dict: ``{"output": str, "returncode": int, "exception_info": str, "extra": dict}``.

        Raises:
            Submitted: the command printed the submission sentinel and exited 0.
            SandboxError: there is no trustworthy result (the sandbox died, its runner misbehaved).
        """
        ...

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Variables for the agent's templates (the config's fields, facts of the sandbox)."""
        ...

    def serialize(self) -> dict[str, Any]:
        """``{"info": {"config": {"environment": dict, "environment_type": str}}}`` for the trajectory."""
        ...


@runtime_checkable
class Model(Protocol):
    """What the agent queries (the message shapes are in ``swe_sandbox.models``)."""

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """The next assistant message, with ``extra.actions`` (``[{"command", "tool_call_id"}]``).

        Raises:
            FormatError: the reply holds no usable command; its messages go to the history.
            LimitsExceeded: the model cannot go on (a cost or call cap, no reply left).
            ModelError: the provider failed for good.
        """
        ...

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The messages answering the actions of ``message`` with their result dicts (in order)."""
        ...

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Variables for the agent's templates (the config's fields, ``cost``, ``n_calls``...)."""
        ...

    def serialize(self) -> dict[str, Any]:
        """``{"info": {"config": {"model": dict, "model_type": str}}}`` for the trajectory."""
        ...
