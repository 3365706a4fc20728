"""The one jinja2 renderer of the agent's and the models' templates.

Every template (the agent's ``system_template`` / ``instance_template``, a model's
``observation_template`` / ``format_error_template``) is strict: a variable it was not given is an
error, never an empty string. Compiled templates are cached, so rendering one per step costs
little. jinja2 is imported on first use only (``import swe_sandbox`` stays light).
"""

from __future__ import annotations

import functools
from typing import Any

#: How many compiled templates are kept (per ``keep_trailing_newline`` setting).
CACHE_SIZE = 64


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile_template(template: str, keep_trailing_newline: bool = True) -> Any:
    """Compile ``template`` with ``StrictUndefined`` (cached).

    Args:
        template (str): jinja2 source.
        keep_trailing_newline (bool): keep a final newline of the source (jinja2 drops it by
            default). Defaults to True.

    Returns:
        jinja2.Template: the compiled template.

    Raises:
        jinja2.TemplateSyntaxError: the source does not parse.
    """
    import jinja2

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=keep_trailing_newline)
    return environment.from_string(template)


def check_template(template: str) -> str:
    """Return ``template`` if it compiles (a pydantic ``field_validator`` helper).

    Raises:
        ValueError: the template does not parse (the message says where).
    """
    import jinja2

    try:
        compile_template(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"invalid jinja2 template: {exc}") from None
    return template


def render_template(template: str, variables: dict[str, Any], *, where: str,
                    keep_trailing_newline: bool = True) -> str:
    """Render a strict jinja2 template.

    Args:
        template (str): jinja2 source.
        variables (dict): the template's variables.
        where (str): the config field the template comes from (``model.observation_template``,
            ``agent template``), named in the error.
        keep_trailing_newline (bool): see ``compile_template``. Defaults to True.

    Returns:
        str: the rendered text.

    Raises:
        ConfigError: the template does not parse or uses a variable it was not given; the message
            is ``"<where>: <jinja2 error class>: <jinja2 message>"``.
    """
    import jinja2

    from swe_sandbox.errors import ConfigError

    try:
        return compile_template(template, keep_trailing_newline).render(**variables)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"{where}: {type(exc).__name__}: {exc}") from None
