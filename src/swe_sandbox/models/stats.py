"""Process-wide model cost and call counters, with caps from the environment.

``SWE_SANDBOX_GLOBAL_COST_LIMIT`` (USD) and ``SWE_SANDBOX_GLOBAL_CALL_LIMIT`` (calls) cap every
model of the process together (e.g. many agents in threads); ``0`` or unset: no limit. They are
read at each call, so a running process picks up a change.
"""

from __future__ import annotations

import os
import threading

from swe_sandbox.errors import ConfigError, LimitsExceeded

COST_LIMIT_ENV = "SWE_SANDBOX_GLOBAL_COST_LIMIT"
CALL_LIMIT_ENV = "SWE_SANDBOX_GLOBAL_CALL_LIMIT"


def _env_number(name: str, kind: type) -> float:
    raw = os.environ.get(name, "").strip() or "0"
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a {kind.__name__} >= 0, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"{name}: expected a {kind.__name__} >= 0, got {raw!r}")
    return value


class GlobalStats:
    """Thread-safe totals of every model call of this process.

    Attributes:
        cost (float): USD spent so far.
        n_calls (int): model calls started so far (failed ones included).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cost = 0.0
        self.n_calls = 0

    def start_call(self) -> None:
        """Count one more call, or refuse it when a cap is reached (atomic across threads).

        Raises:
            LimitsExceeded: the call cap is reached, or the cost spent is at or above the cost cap.
                Its one message is ``{"role": "exit", "content": why, "extra": {"exit_status":
                "LimitsExceeded", "submission": ""}}``.
            ConfigError: a limit variable is not a number >= 0.
        """
        cost_limit = _env_number(COST_LIMIT_ENV, float)
        call_limit = int(_env_number(CALL_LIMIT_ENV, int))
        with self._lock:
            if call_limit and self.n_calls >= call_limit:
                why = f"global model call limit reached: {self.n_calls} calls ({CALL_LIMIT_ENV}={call_limit})"
            elif cost_limit and self.cost >= cost_limit:
                why = f"global model cost limit reached: ${self.cost:.4f} ({COST_LIMIT_ENV}={cost_limit:g})"
            else:
                self.n_calls += 1
                return
        raise LimitsExceeded({"role": "exit", "content": why,
                              "extra": {"exit_status": "LimitsExceeded", "submission": ""}})

    def add_cost(self, cost: float) -> None:
        """Add the cost (USD) of a finished call."""
        with self._lock:
            self.cost += cost

    def reset(self) -> None:
        """Zero the counters (for tests)."""
        with self._lock:
            self.cost = 0.0
            self.n_calls = 0


GLOBAL_STATS = GlobalStats()
