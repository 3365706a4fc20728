"""What the model sees of a command's output, and what the trajectory keeps of it.

A command may print megabytes (the runner caps it at ``max_output_bytes``, 10 MiB by default).
The model sees at most ``AgentConfig.observation_limit`` characters of it: the first and the last
half of that, and between them a note of how many characters were elided, as mini-swe-agent's
``action_observation_template`` does (``src/minisweagent/config/default.yaml``: whole below 10 000
characters, else ``output[:5000]``, ``N characters elided``, ``output[-5000:]``).

The trajectory holds what the model saw, and, for an output that was cut, the output itself up to
``AgentConfig.trajectory_output_limit`` characters (head and tail again) in the observation's
``extra.raw_output``. So each step adds a bounded amount to the trajectory, and rewriting it whole
(atomically, after every step) stays cheap: 25 steps of 10 MiB each write a trajectory of about
1.5 MB, not 262 MB, and the agent holds no more than that.
"""

from __future__ import annotations

from typing import Any

#: mini-swe-agent's bound on the output the model sees, characters.
OBSERVATION_LIMIT = 10_000
#: What the trajectory keeps of an output that was cut for the model, characters.
TRAJECTORY_OUTPUT_LIMIT = 50_000


def head_and_tail(text: str, limit: int) -> tuple[str, str, int]:
    """The first and last ``limit // 2`` characters of ``text`` and how many lie between them;
    ``(text, "", 0)`` when ``text`` has at most ``limit`` characters."""
    if len(text) <= limit:
        return text, "", 0
    half = limit // 2
    return text[:half], text[len(text) - half:] if half else "", len(text) - 2 * half


def elided_note(count: int) -> str:
    """The note that stands for ``count`` elided characters of an output."""
    return (f"\n<elided_chars>{count} characters elided: the output was too long. Narrow the command "
            "(grep, head, tail, sed -n), or send its output to a file and search that.</elided_chars>\n")


def bounded(result: dict[str, Any], limit: int = OBSERVATION_LIMIT,
            keep: int = TRAJECTORY_OUTPUT_LIMIT) -> dict[str, Any]:
    """``result`` (an ``execute`` result dict) with its ``output`` cut for the model.

    Args:
        result: the result dict; not changed.
        limit: characters of output the model sees at most (head and tail, plus the note); 0: no bound.
        keep: characters of the original output kept in ``extra.raw_output`` (head and tail, plus
            the note) when it was cut; 0: none.

    Returns:
        dict: ``result`` itself when its output fits, else a copy whose ``output`` is head, note
        and tail, and whose ``extra`` also holds ``elided_chars`` (int) and ``raw_output``.
    """
    output = result.get("output")
    if not limit or not isinstance(output, str) or len(output) <= limit:
        return result
    head, tail, elided = head_and_tail(output, limit)
    extra = {**(result.get("extra") or {}), "elided_chars": elided}
    if keep:
        raw_head, raw_tail, raw_elided = head_and_tail(output, keep)
        extra["raw_output"] = raw_head + (elided_note(raw_elided) + raw_tail if raw_elided else "")
    return {**result, "output": head + elided_note(elided) + tail, "extra": extra}
