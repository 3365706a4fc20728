"""Keep secrets out of trajectories, templates, logs and error messages.

``redact(obj)`` returns a deep copy of ``obj`` (dicts, lists, tuples, strings; anything else is
kept as is) where secrets are replaced by ``"***"``:

- **by key**: the string value of any key whose name contains ``key``, ``token``, ``secret``,
  ``passw``, ``authorization``, ``credential`` or ``cookie`` (``api_key``, ``x-api-key``,
  ``aws_secret_access_key``...), and every string inside a ``*headers`` mapping
  (``extra_headers``, ``default_headers``). Numbers are kept (``max_tokens: 1000`` is no secret).
- **by value**: every occurrence, inside any string, of a secret at least ``MIN_SECRET_LEN``
  characters long: the values found by key above, the values of environment variables whose
  names look secret (``*_API_KEY``, ``*_KEY``, ``*TOKEN*``, ``*SECRET*``, ``*PASSW*``,
  ``*CREDENTIAL*``, ``AWS_*`` but the region and profile), and any ``secrets`` passed in.

So an API key echoed in a provider's error message, or an environment secret a command printed,
never reaches a file or a log that went through ``redact``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

MASK = "***"
#: Shorter values are only masked by key, never searched for in text (too many false hits).
MIN_SECRET_LEN = 8
SECRET_KEY_RE = re.compile(r"key|token|secret|passw|authorization|credential|cookie", re.IGNORECASE)
HEADERS_KEY_RE = re.compile(r"headers$", re.IGNORECASE)
SECRET_ENV_RE = re.compile(r"API_?KEY|_KEY$|_KEY_|TOKEN|SECRET|PASSW|CREDENTIAL|^AWS_", re.IGNORECASE)
PUBLIC_ENV_RE = re.compile(r"^AWS_(DEFAULT_)?REGION$|^AWS_PROFILE$|^AWS_CONFIG_FILE$", re.IGNORECASE)


def is_secret_key(name: Any) -> bool:
    """True when a mapping key ``name`` names a secret (``api_key``, ``Authorization``...)."""
    return isinstance(name, str) and bool(SECRET_KEY_RE.search(name))


def env_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values (>= ``MIN_SECRET_LEN`` chars) of the environment variables whose names look secret.

    Args:
        environ (Mapping[str, str] | None): the environment to scan. Defaults to ``os.environ``.
    """
    environ = os.environ if environ is None else environ
    return {value for name, value in environ.items()
            if len(value) >= MIN_SECRET_LEN and SECRET_ENV_RE.search(name) and not PUBLIC_ENV_RE.search(name)}


def find_secrets(obj: Any) -> set[str]:
    """Values (>= ``MIN_SECRET_LEN`` chars) stored under secret-looking keys anywhere in ``obj``."""
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, str):
            if secret and len(value) >= MIN_SECRET_LEN:
                found.add(value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, secret or is_secret_key(key) or bool(HEADERS_KEY_RE.search(str(key))))
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, secret)

    walk(obj, False)
    return found


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``obj`` with every secret replaced by ``"***"`` (see the module docstring).

    Args:
        obj: a str, or a JSON-like structure of dicts, lists and tuples.
        secrets (Iterable[str]): more values to mask wherever they occur (short ones are ignored).

    Returns:
        The redacted copy (same container types; non-string leaves unchanged).
    """
    values = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LEN}
    values |= env_secrets() | find_secrets(obj)
    return _redact(obj, sorted(values, key=len, reverse=True), False)


def _redact(obj: Any, values: list[str], secret: bool) -> Any:
    if isinstance(obj, str):
        if secret and obj:
            return MASK
        for value in values:
            if value in obj:
                obj = obj.replace(value, MASK)
        return obj
    if isinstance(obj, Mapping):
        return {key: _redact(item, values, secret or is_secret_key(key) or bool(HEADERS_KEY_RE.search(str(key))))
                for key, item in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_redact(item, values, secret) for item in obj)
    return obj
