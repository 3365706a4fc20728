"""The one retry policy of model calls (litellm's own retries are switched off by the caller).

- Transient provider failures (rate limits, 5xx, connection errors, timeouts) are retried with
  exponential backoff and jitter; a ``Retry-After`` header (seconds or an HTTP-date, also
  ``retry-after-ms``) is honoured: the wait is at least that long.
- A total time cap: no sleep reaches past ``max_total_s`` from the first attempt, so no attempt
  starts after it (a request in flight is bounded by the provider timeout, e.g. ``model_kwargs.timeout``).
- Authentication, not-found, permission-denied, bad-request (unsupported params, context window
  exceeded, content policy) and unprocessable-entity errors get one attempt. So does any other
  error whose message says credentials are missing or wrong (``CREDENTIALS_ERROR_RE``): without
  an API key litellm raises an ``InternalServerError`` (HTTP 500) "Missing credentials. Please
  pass an `api_key`...", which no retry can fix. Rate limits and timeouts are always retried.
- The default total cap is 120 s (``model.retry.max_total_s``), enough to ride out a short
  outage or a rate-limit window without leaving a run hanging for long.
- Either way a provider failure ends as ``ModelError`` naming the exception class and the
  provider's message, redacted. ``KeyboardInterrupt`` passes through at once; exceptions that are
  not provider failures (a bug) propagate unchanged.
- An ``interrupted`` event (a batch's Ctrl-C, set from another thread) ends a wait between
  attempts at once, as ``ModelError``: a cancelled batch does not sit out a provider's outage.

``call_with_retries`` runs a sync call under this policy, ``acall_with_retries`` an async one (an
awaited provider call, tenacity's ``AsyncRetrying``; its waits are ``asyncio`` sleeps that an
``Interruption``, set from any thread, ends at once). Both share every rule above.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import logging
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from swe_sandbox.errors import ModelError
from swe_sandbox.redact import redact

logger = logging.getLogger("swe_sandbox.models")
T = TypeVar("T")
NON_RETRYABLE_STATUS = (400, 401, 403, 404, 422)
#: Statuses retried whatever the message says (a rate limit's message may mention the API key).
ALWAYS_RETRYABLE_STATUS = (408, 429)
#: Messages that mean the credentials are missing or wrong, whatever the class or HTTP status.
CREDENTIALS_ERROR_RE = re.compile(
    r"missing credentials"
    r"|api[_ -]?key client option must be set"
    r"|(no|missing|invalid|incorrect|wrong|bad)\s+(\S+\s+)?(x-)?api[_ -]?key"
    r"|api[_ -]?key\b[^.]{0,40}?\b(is\s+)?(missing|required|not\s+(set|provided|found|valid)|invalid)"
    r"|authentication\s+(failed|error|required|credentials)"
    r"|(invalid|missing|no)\s+(authentication|credentials|auth\s+token|bearer\s+token)"
    r"|unauthori[sz]ed",
    re.IGNORECASE,
)


class RetryConfig(BaseModel):
    """When and how long a failed model call is retried."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=10, ge=1)
    """Attempts in all, the first one included (1: never retry)."""
    max_total_s: float = Field(default=120.0, gt=0)
    """Seconds from the first attempt; no retry sleeps past this, so no attempt starts after it
    (default 120: a short outage or rate-limit window passes, a lasting failure ends the run soon)."""
    backoff_base_s: float = Field(default=1.0, gt=0)
    """Backoff before the first retry, in seconds; it doubles on each retry. The actual wait is
    random in [backoff / 2, backoff] (jitter), and never less than the provider's ``Retry-After``."""
    backoff_max_s: float = Field(default=60.0, gt=0)
    """Upper bound of the backoff, in seconds (``Retry-After`` may ask for more)."""


@functools.cache
def provider_errors() -> tuple[type[BaseException], ...]:
    """Exception classes that mean "the provider call failed" (litellm's derive from openai's)."""
    import openai

    return (openai.OpenAIError, ConnectionError, TimeoutError)


@functools.cache
def non_retryable_errors() -> tuple[type[BaseException], ...]:
    """Provider failures that no retry can fix: authentication, not found, permission denied,
    bad request, unprocessable entity. openai's classes; litellm's derive from them
    (``litellm.ContextWindowExceededError`` and ``UnsupportedParamsError`` from ``BadRequestError``)."""
    import openai

    return (openai.AuthenticationError, openai.NotFoundError, openai.PermissionDeniedError, openai.BadRequestError,
            openai.UnprocessableEntityError)


@functools.cache
def always_retryable_errors() -> tuple[type[BaseException], ...]:
    """Rate limits and timeouts: retried whatever the message says (``litellm.RateLimitError`` and
    ``litellm.Timeout`` derive from these openai classes)."""
    import openai

    return (openai.RateLimitError, openai.APITimeoutError, TimeoutError)


def is_credentials_error(exc: BaseException) -> bool:
    """True when the message of ``exc`` says the credentials are missing or wrong
    (``CREDENTIALS_ERROR_RE``), unless it is a rate limit or a timeout (HTTP 429 / 408)."""
    if getattr(exc, "status_code", None) in ALWAYS_RETRYABLE_STATUS or isinstance(exc, always_retryable_errors()):
        return False
    return bool(CREDENTIALS_ERROR_RE.search(str(getattr(exc, "message", None) or exc or "")))


def is_retryable(exc: BaseException) -> bool:
    """True for a provider failure that may pass on retry (never for ``KeyboardInterrupt``).

    The HTTP status counts too: litellm reports some providers' 403 as a plain ``APIError``; and
    so does the message: a missing API key comes as an HTTP 500 (``is_credentials_error``).
    """
    if not isinstance(exc, provider_errors()) or isinstance(exc, non_retryable_errors()):
        return False
    if getattr(exc, "status_code", None) in NON_RETRYABLE_STATUS:
        return False
    return not is_credentials_error(exc)


def retry_after_s(exc: BaseException, now: datetime | None = None) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` or ``Retry-After``), or None.

    Args:
        exc: a litellm/openai exception; its response headers are read (``litellm_response_headers``,
            else ``exc.response.headers``).
        now (datetime | None): the current time, for an HTTP-date value. Defaults to now (UTC).
    """
    response = getattr(exc, "response", None)
    headers = getattr(exc, "litellm_response_headers", None) or getattr(response, "headers", None)
    if not headers:
        return None
    headers = {str(k).lower(): str(v) for k, v in headers.items()}
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        return max(0.0, float(headers["retry-after"]))
    except KeyError:
        return None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(headers.get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def describe(exc: BaseException) -> str:
    """``"ClassName (HTTP 401) from openai: provider message"``, without litellm's repeated prefixes."""
    name = type(exc).__name__
    message = str(getattr(exc, "message", None) or exc or "")
    message = re.sub(rf"^(litellm\.{name}:\s*)?({name}:\s*)?", "", message)
    status = getattr(exc, "status_code", None)
    provider = getattr(exc, "llm_provider", None)
    return f"{name}{f' (HTTP {status})' if status else ''}{f' from {provider}' if provider else ''}: {message}"


#: The message of a wait between attempts cut short by ``interrupted``.
INTERRUPTED_MESSAGE = "model call interrupted while waiting to retry"


class Interruption(threading.Event):
    """A ``threading.Event`` whose ``set()`` (from any thread) also ends ``wait_async`` calls at
    once, on whatever event loop they run: the interrupt of a model whose calls may be sync or async."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
        self._waiters_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._waiters_lock:
            waiters = list(self._waiters)
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nothing waits there any more
                loop.call_soon_threadsafe(_resolve, waiter)

    async def wait_async(self, seconds: float) -> bool:
        """Sleep ``seconds`` on the running loop or until set, whichever comes first.

        Returns:
            bool: True when set (the sleep was cut short or it was set already).
        """
        loop = asyncio.get_running_loop()
        key = (loop, loop.create_future())
        with self._waiters_lock:
            self._waiters.add(key)
        try:
            if not self.is_set():
                await asyncio.wait({key[1]}, timeout=seconds)
            return self.is_set()
        finally:
            with self._waiters_lock:
                self._waiters.discard(key)
            key[1].cancel()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def call_with_retries(fn: Callable[[], T], config: RetryConfig, *, secrets: Iterable[str] = (),
                      interrupted: threading.Event | None = None) -> T:
    """Call ``fn()`` under the retry policy of the module docstring.

    Args:
        fn: the provider call, without arguments.
        config (RetryConfig): attempts, total cap (seconds) and backoff.
        secrets (Iterable[str]): values to mask in logs and in the error message (e.g. the API key).
        interrupted (threading.Event | None): once set, no further attempt starts and a wait
            between attempts ends at once (default None: waits run their course).

    Returns:
        What ``fn`` returned.

    Raises:
        ModelError: a provider failure that is not retryable, or still failing when the attempts or
            the total time ran out; the message names the class and the provider's message;
            ``interrupted`` set before an attempt or during a wait (``INTERRUPTED_MESSAGE``,
            ``ModelError.interrupted``). ``ModelError.gave_up`` is set when the failure was
            retryable and the budget ran out (an infrastructure outcome, run again by a batch).
        KeyboardInterrupt: at once. Any other exception of ``fn`` (a bug) propagates unchanged.
    """
    import tenacity

    secrets = _check_start(interrupted, secrets)
    retrying = tenacity.Retrying(sleep=functools.partial(_sleep, interrupted or threading.Event()),
                                 **_policy(config, secrets))
    start = time.monotonic()
    try:
        return retrying(fn)
    except _Interrupted:
        raise ModelError(INTERRUPTED_MESSAGE, interrupted=True) from None
    except provider_errors() as exc:
        raise _gave_up(exc, retrying.statistics, start, config, secrets) from None


async def acall_with_retries(fn: Callable[[], Awaitable[T]], config: RetryConfig, *, secrets: Iterable[str] = (),
                             interrupted: Interruption | None = None) -> T:
    """Await ``fn()`` under the same policy as ``call_with_retries`` (tenacity's ``AsyncRetrying``).

    Args:
        fn: returns the awaitable provider call (e.g. ``lambda: litellm.acompletion(**params)``).
        config (RetryConfig): attempts, total cap (seconds) and backoff.
        secrets (Iterable[str]): values to mask in logs and in the error message.
        interrupted (Interruption | None): once set (from any thread), no further attempt starts
            and a wait between attempts ends at once (default None: waits run their course).

    Returns:
        What the awaited call returned.

    Raises:
        ModelError: as ``call_with_retries``.
        asyncio.CancelledError: the awaiting task was cancelled (a request in flight is abandoned).
        KeyboardInterrupt: at once. Any other exception of ``fn`` (a bug) propagates unchanged.
    """
    import tenacity

    secrets = _check_start(interrupted, secrets)
    retrying = tenacity.AsyncRetrying(sleep=functools.partial(_asleep, interrupted), **_policy(config, secrets))

    async def attempt() -> T:  # tenacity awaits only a coroutine function's result
        return await fn()

    start = time.monotonic()
    try:
        return await retrying(attempt)
    except _Interrupted:
        raise ModelError(INTERRUPTED_MESSAGE, interrupted=True) from None
    except provider_errors() as exc:
        raise _gave_up(exc, retrying.statistics, start, config, secrets) from None


def _check_start(interrupted: threading.Event | None, secrets: Iterable[str]) -> list[str]:
    """``secrets`` as a list; raises the interrupted ``ModelError`` when ``interrupted`` is set."""
    if interrupted is not None and interrupted.is_set():
        raise ModelError(INTERRUPTED_MESSAGE, interrupted=True)
    return list(secrets)


def _policy(config: RetryConfig, secrets: list[str]) -> dict[str, Any]:
    """tenacity's arguments of the policy (all but ``sleep``), shared by the sync and async calls."""
    import tenacity

    return {"stop": tenacity.stop_after_attempt(config.max_attempts) | tenacity.stop_before_delay(config.max_total_s),
            "wait": functools.partial(_wait, config), "retry": tenacity.retry_if_exception(is_retryable),
            "before_sleep": functools.partial(_log_retry, secrets), "reraise": True}


def _gave_up(exc: BaseException, statistics: dict[str, Any], start: float, config: RetryConfig,
             secrets: list[str]) -> ModelError:
    attempts = statistics.get("attempt_number", 1)
    message = redact(_give_up_message(exc, attempts, time.monotonic() - start, config), secrets)
    return ModelError(message, gave_up=is_retryable(exc))


class _Interrupted(Exception):
    """A wait between attempts was cut short (never leaves this module)."""


def _sleep(interrupted: threading.Event, seconds: float) -> None:
    if interrupted.wait(seconds):
        raise _Interrupted


async def _asleep(interrupted: Interruption | None, seconds: float) -> None:
    if interrupted is None:
        await asyncio.sleep(seconds)
    elif await interrupted.wait_async(seconds):
        raise _Interrupted


def _wait(config: RetryConfig, state: Any) -> float:
    backoff = min(config.backoff_max_s, config.backoff_base_s * 2 ** (state.attempt_number - 1))
    asked = retry_after_s(state.outcome.exception()) if state.outcome else None
    return max(random.uniform(backoff / 2, backoff), asked or 0.0)


def _log_retry(secrets: list[str], state: Any) -> None:
    exc = state.outcome.exception()
    logger.warning(redact(f"model call failed ({describe(exc)}); retry {state.attempt_number} "
                          f"in {state.upcoming_sleep:.1f} s", secrets))


def _give_up_message(exc: BaseException, attempts: int, elapsed: float, config: RetryConfig) -> str:
    if not is_retryable(exc):
        if is_credentials_error(exc):
            return (f"{describe(exc)} (not retried: the credentials are missing or wrong; set the provider's "
                    "API key, e.g. OPENAI_API_KEY / ANTHROPIC_API_KEY, or model.model_kwargs.api_key)")
        return f"{describe(exc)} (not retried: this error does not pass by retrying)"
    asked = retry_after_s(exc)
    why = ""
    if asked and elapsed + asked >= config.max_total_s:
        why = f"the provider asked to wait {asked:.0f} s (Retry-After); "
    return (f"{describe(exc)} (gave up after {attempts} attempt(s) in {elapsed:.1f} s; {why}limits: "
            f"model.retry.max_attempts={config.max_attempts}, model.retry.max_total_s={config.max_total_s:g})")
