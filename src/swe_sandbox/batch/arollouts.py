"""``arollout``: ``rollout`` for asyncio programs, its model calls awaited on the caller's loop.

    result = await arollout(task, run_config, {"backend": "bwrap"})          # a RolloutResult
    results = await asyncio.gather(*(arollout(t, run_config, env) for t in tasks))
    group = await arollout_group(task, 8, run_config, {"backend": "docker"})  # a GroupResult (groups)

The sandbox work (the task's sandbox started and set up, the agent's commands, the evaluation in a
fresh sandbox) is ``rollout`` itself, run in a thread of its own (one per ``arollout``, so N
rollouts run at once whatever the loop's default executor holds). The agent's model calls go the
other way: from that thread, each ``query`` submits ``model.aquery(...)`` to the caller's event
loop (``asyncio.run_coroutine_threadsafe``) and waits for it, so the loop-bound things of a
trainer (its HTTP clients, rate limiters, an in-process inference server) see every call. A model
without ``aquery`` (the scripted test models) is queried in the rollout's thread.

Cancelling the task awaiting ``arollout`` cancels the rollout: its ``Cancellation`` stops the agent
at its next step and closes its sandbox at once, the model call in flight is cancelled on the
loop; ``arollout`` waits for the rollout's thread (at most ``CANCEL_WAIT_S``) and re-raises
``asyncio.CancelledError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from swe_sandbox.batch.control import Cancellation
from swe_sandbox.batch.evaluation import DEFAULT_EVAL_TIMEOUT_S, STRICT
from swe_sandbox.batch.groups import GroupResult, OnSample, rollout_group
from swe_sandbox.batch.rollouts import Progress, RolloutResult, rollout
from swe_sandbox.errors import ModelError

if TYPE_CHECKING:  # pragma: no cover
    from swe_sandbox.batch.control import CostBudget
    from swe_sandbox.batch.tasks import Task

#: Seconds a cancelled ``arollout`` waits for its rollout's thread before re-raising (the thread
#: is then left to finish alone: a command or a sandbox's removal that does not end).
CANCEL_WAIT_S = 10.0
#: Seconds between two looks at whether the caller's loop is closed, while a model call waits on it.
LOOP_CHECK_S = 1.0
#: The exception text of a model call whose event loop was closed before it answered.
LOOP_CLOSED_MESSAGE = "the event loop running the model call was closed before the call ended"

T = TypeVar("T")


async def arollout(task: Task, run_config: dict[str, Any], env_config: dict[str, Any], evaluate: bool = True, *,
                   trajectory_path: str | Path | None = None, cancel: Cancellation | None = None,
                   budget: CostBudget | None = None, progress: Progress | None = None,
                   eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S, grading: str = STRICT,
                   model_wrapper: Callable[[Any], Any] | None = None) -> RolloutResult:
    """``rollout`` awaited: the same arguments, the same ``RolloutResult`` (see ``rollouts.rollout``).

    Args:
        cancel: a batch's ``Cancellation``: cancelling it cancels this rollout too (it gets its
            own besides, which cancelling the awaiting task sets).
        progress: called from the rollout's thread (or an image pull's), not on the loop.
        model_wrapper: applied to the task's model before its calls are routed to the loop.

    Returns:
        RolloutResult: never raises for an agent, model or sandbox failure.

    Raises:
        asyncio.CancelledError: the awaiting task was cancelled (the rollout was stopped, its
            sandbox closed; at most ``CANCEL_WAIT_S`` is spent waiting for its thread).
    """
    keywords: dict[str, Any] = {"trajectory_path": trajectory_path, "budget": budget, "progress": progress,
                "eval_timeout": eval_timeout, "grading": grading}

    def call(own: Cancellation, wrap: Callable[[Any], Any]) -> RolloutResult:
        return rollout(task, run_config, env_config, evaluate, cancel=own, model_wrapper=wrap, **keywords)

    return await _in_thread(task.instance_id, cancel, model_wrapper, call)


async def arollout_group(task: Task, k: int, run_config: dict[str, Any], env_config: dict[str, Any],
                         evaluate: bool = True, *, samples: list[int] | None = None, reuse: bool = False,
                         workers: int | None = None, trajectory_dir: str | Path | None = None,
                         cancel: Cancellation | None = None, budget: CostBudget | None = None,
                         progress: Progress | None = None, eval_timeout: float = DEFAULT_EVAL_TIMEOUT_S,
                         grading: str = STRICT, model_wrapper: Callable[[Any], Any] | None = None,
                         on_sample: OnSample | None = None) -> GroupResult:
    """``groups.rollout_group`` awaited: the same arguments, the same ``GroupResult``; every
    sample's model calls are awaited on the caller's loop, as ``arollout``'s are.

    Args:
        cancel: as for ``arollout`` (cancelling the awaiting task stops every sample).
        progress, on_sample: called from the group's threads, not on the loop.

    Returns:
        GroupResult: never raises for an agent, model or sandbox failure.

    Raises:
        ValueError: as ``rollout_group``.
        asyncio.CancelledError: the awaiting task was cancelled (the samples were stopped, their
            sandboxes closed, the snapshot removed; at most ``CANCEL_WAIT_S`` is spent waiting).
    """
    keywords: dict[str, Any] = {"samples": samples, "reuse": reuse, "workers": workers, "trajectory_dir": trajectory_dir,
                "budget": budget, "progress": progress, "eval_timeout": eval_timeout, "grading": grading,
                "on_sample": on_sample}

    def call(own: Cancellation, wrap: Callable[[Any], Any]) -> GroupResult:
        return rollout_group(task, k, run_config, env_config, evaluate, cancel=own, model_wrapper=wrap, **keywords)

    return await _in_thread(task.instance_id, cancel, model_wrapper, call)


async def _in_thread(name: str, cancel: Cancellation | None, model_wrapper: Callable[[Any], Any] | None,
                     call: Callable[[Cancellation, Callable[[Any], Any]], T]) -> T:
    """``call(own, wrap)`` in a thread of its own, awaited: ``own`` is its cancellation (set by
    ``cancel`` too, and by cancelling the awaiting task), ``wrap`` routes its models' calls to this loop."""
    loop = asyncio.get_running_loop()
    own = Cancellation()
    done: asyncio.Future[T] = loop.create_future()
    wrap = _loop_wrapper(loop, own, model_wrapper)

    def work() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (_linked(own, cancel, lambda: call(own, wrap)), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits it any more
            loop.call_soon_threadsafe(_settle, done, *outcome)

    threading.Thread(target=work, name=f"arollout-{name}").start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        # Closing a sandbox may take a while (a container's removal): not on the loop's thread.
        threading.Thread(target=own.cancel, name=f"arollout-cancel-{name}", daemon=True).start()
        await asyncio.wait({done}, timeout=CANCEL_WAIT_S)
        raise


def _linked(own: Cancellation, cancel: Cancellation | None, run: Callable[[], T]) -> T:
    """``run()`` with ``own`` as its cancellation, which ``cancel`` (if given) also sets."""
    with contextlib.ExitStack() as stack:
        if cancel is not None:
            try:
                stack.enter_context(cancel.calling(own.cancel))
            except KeyboardInterrupt:  # the batch is cancelled already: the rollout ends as interrupted
                own.cancel()
        return run()


def _settle(done: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if done.done():
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)


def _loop_wrapper(loop: asyncio.AbstractEventLoop, cancel: Cancellation,
                  inner: Callable[[Any], Any] | None) -> Callable[[Any], LoopModel]:
    def wrap(model: Any) -> LoopModel:
        return LoopModel(inner(model) if inner is not None else model, loop, cancel)

    return wrap


class LoopModel:
    """A model whose ``query``, called in a rollout's thread, awaits ``model.aquery`` on ``loop``.

    Every other attribute is the wrapped model's (``cost``, ``n_calls``, ``config``, ``serialize``,
    ``interrupt``...). A model without ``aquery`` is queried directly, in the calling thread.

    Args:
        model: the model (``swe_sandbox.models``).
        loop (asyncio.AbstractEventLoop): the running loop the calls are awaited on.
        cancel (Cancellation): the rollout's; cancelling it cancels the call in flight.
    """

    def __init__(self, model: Any, loop: asyncio.AbstractEventLoop, cancel: Cancellation) -> None:
        self.model = model
        self._loop = loop
        self._cancel = cancel

    def __getattr__(self, name: str) -> Any:
        if name == "model":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.model, name)

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """The model's next message (``aquery`` awaited on the loop, or ``query`` here).

        Raises:
            KeyboardInterrupt: the rollout was cancelled (the call in flight is cancelled).
            ModelError: the loop was closed before the call ended.
            FormatError, ModelError, LimitsExceeded: the model's own.
        """
        aquery = getattr(self.model, "aquery", None)
        if aquery is None:
            return self.model.query(messages, **kwargs)
        warm_up = getattr(self.model, "warm_up", None)
        if callable(warm_up):
            warm_up()  # the SDK's first import (seconds of CPU) happens here, not on the loop
        pending: list[cf.Future[dict[str, Any]]] = []
        with self._cancel.calling(lambda: [future.cancel() for future in pending]):
            pending.append(asyncio.run_coroutine_threadsafe(aquery(messages, **kwargs), self._loop))
            if self._cancel.cancelled:  # cancelled between the registration and the submission
                pending[0].cancel()
            return self._wait(pending[0])

    def _wait(self, future: cf.Future[dict[str, Any]]) -> dict[str, Any]:
        while not cf.wait([future], timeout=LOOP_CHECK_S).done:
            if self._loop.is_closed():
                future.cancel()
                raise ModelError(LOOP_CLOSED_MESSAGE)
        if future.cancelled():
            raise KeyboardInterrupt("rollout cancelled")
        return future.result()
