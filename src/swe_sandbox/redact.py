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
- **in URLs**: inside any string, the password of a URL's userinfo (``https://user:PASSWORD@host``
  becomes ``https://user:***@host``) and the value of a query parameter whose name is a secret
  word (``?api_key=...``, ``&access_token=...``, ``X-Amz-Signature=...``; see ``QUERY_SECRET_WORDS``).
  Those values (when long enough) are also masked wherever else they occur.

So an API key echoed in a provider's error message, or an environment secret a command printed,
never reaches a file or a log that went through ``redact``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
#: Shorter values are only masked by key, never searched for in text (too many false hits).
MIN_SECRET_LEN = 8
SECRET_KEY_RE = re.compile(r"key|token|secret|passw|authorization|credential|cookie", re.IGNORECASE)
HEADERS_KEY_RE = re.compile(r"headers$", re.IGNORECASE)
SECRET_ENV_RE = re.compile(r"API_?KEY|_KEY$|_KEY_|TOKEN|SECRET|PASSW|CREDENTIAL|^AWS_", re.IGNORECASE)
PUBLIC_ENV_RE = re.compile(r"^AWS_(DEFAULT_)?REGION$|^AWS_PROFILE$|^AWS_CONFIG_FILE$", re.IGNORECASE)
#: A URL with a scheme, up to the first character that cannot be part of it.
URL_RE = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>`]+")
#: ``scheme://`` then userinfo ``user:password@`` (the last ``@`` before the path, as urlsplit reads it).
USERINFO_RE = re.compile(r"^(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/?#@:]*):(?P<password>[^/?#]*)@")
QUERY_PARAM_RE = re.compile(r"(?P<head>[?&;](?P<name>[^=&;#?/]+)=)(?P<value>[^&;#]*)")
#: A query parameter is secret when one of the words of its name (split at ``_``, ``-``, ``.`` and
#: camelCase) is one of these: ``api_key``, ``apiKey``, ``access_token``, ``client_secret``,
#: ``X-Amz-Signature``... (``keyword`` or ``monkey`` are not).
QUERY_SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "signature", "sig",
    "auth", "authorization", "credential", "credentials", "cookie",
})


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


def is_secret_query_param(name: str) -> bool:
    """True when a URL query parameter ``name`` names a secret (see ``QUERY_SECRET_WORDS``)."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return any(word in QUERY_SECRET_WORDS for word in words)


def _mask_url(url: str, found: set[str] | None = None) -> str:
    """``url`` with its userinfo password and secret query values masked; adds them to ``found``."""

    def userinfo(match: re.Match) -> str:
        password = match.group("password")
        if not password or password == MASK:
            return match.group(0)
        if found is not None:
            found.add(password)
        return f"{match.group('head')}:{MASK}@"

    def query(match: re.Match) -> str:
        value = match.group("value")
        if not value or value == MASK or not is_secret_query_param(match.group("name")):
            return match.group(0)
        if found is not None:
            found.add(value)
        return match.group("head") + MASK

    url = USERINFO_RE.sub(userinfo, url, count=1)
    return QUERY_PARAM_RE.sub(query, url) if ("?" in url or ";" in url) else url


def mask_urls(text: str, found: set[str] | None = None) -> str:
    """``text`` with the credentials of every URL in it masked (userinfo password, secret query values).

    Args:
        text (str): any text.
        found (set[str] | None): when given, the masked values are added to it.
    """
    if "://" not in text:
        return text
    return URL_RE.sub(lambda m: _mask_url(m.group(0), found), text)


def url_secrets(text: str) -> set[str]:
    """Credentials (>= ``MIN_SECRET_LEN`` chars) found in the URLs of ``text`` (see ``mask_urls``)."""
    found: set[str] = set()
    mask_urls(text, found)
    return {value for value in found if len(value) >= MIN_SECRET_LEN}


def find_secrets(obj: Any) -> set[str]:
    """Values (>= ``MIN_SECRET_LEN`` chars) stored under secret-looking keys anywhere in ``obj``,
    and credentials in the URLs of any of its strings (``http://user:PASSWORD@host``)."""
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, str):
            if secret and len(value) >= MIN_SECRET_LEN:
                found.add(value)
            found.update(url_secrets(value))
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
        return mask_urls(obj)
    if isinstance(obj, Mapping):
        return {key: _redact(item, values, secret or is_secret_key(key) or bool(HEADERS_KEY_RE.search(str(key))))
                for key, item in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_redact(item, values, secret) for item in obj)
    return obj
