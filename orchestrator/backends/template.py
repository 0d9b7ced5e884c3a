"""Pure renderers: plan data in, text out. Templates hold layout only; every value goes through ``q``."""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jinja2

from orchestrator.paths import resource


def yaml_quote(value: Any) -> str:
    """A YAML double-quoted scalar for ``value`` that Compose reads back verbatim.

    JSON strings are valid YAML and escape quotes, backslashes and newlines; ``$`` is doubled because
    Compose would otherwise interpolate ``${VAR}`` from the host's environment.
    """
    return json.dumps(str(value), ensure_ascii=True, allow_nan=False).replace("$", "$$")


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource("orchestrator.backends", "templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["q"] = yaml_quote
    return env


def render_template(name: str, context: dict[str, Any]) -> str:
    """Render template ``name`` of the backends' templates/ with ``context``."""
    return _environment().get_template(name).render(**context)
