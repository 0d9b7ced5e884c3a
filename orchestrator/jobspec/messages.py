"""One-line messages for an invalid spec, naming fields as the flags and experiment files do."""
from __future__ import annotations

import re
from typing import Any, Callable

from orchestrator import frameworks


def shown(part: Any) -> str:
    """A name from user input as it may appear in a one-line message: plain if harmless, else repr()."""
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text) else repr(text[:64])


def describe_all(exc: Any, field_names: Callable[[], list[str]]) -> str:
    """A pydantic ValidationError as one line. The roles follow from ``workers``: where it is wrong, theirs is
    the same error said again, so it is left out."""
    errors = exc.errors(include_url=False)
    if any(e.get("loc", ())[:1] == ("workers",) for e in errors):
        errors = [e for e in errors if e.get("loc", ())[:1] != ("roles",)]
    return "; ".join(_describe(e, field_names) for e in errors)


def _describe(error: dict[str, Any], field_names: Callable[[], list[str]]) -> str:
    """One pydantic error as a line; ``field_names`` lists the allowed fields for an unknown one (JobSpec's, which
    this module cannot import: the spec package imports it)."""
    loc = ".".join(shown(part) for part in error.get("loc", ())) or "spec"
    loc = loc.removeprefix("framework.").removeprefix("backend_options.")  # flat fields to the user
    msg = error.get("msg", "invalid")
    if error.get("type") == "value_error":
        msg = msg.removeprefix("Value error, ")
        return msg if loc == "spec" or msg.startswith(f"{loc}:") else f"{loc}: {msg}"
    if error.get("type") == "extra_forbidden":
        return f"{loc}: unknown field; allowed fields are {', '.join(field_names())}"
    got = repr(error.get("input"))[:80]
    ctx = error.get("ctx") or {}
    kind = error.get("type")
    if kind == "literal_error":
        return f"{loc}: {msg} (got {got})"
    if kind in BOUNDS:
        return f"{loc}: must be {BOUNDS[kind]} {_number(next(iter(ctx.values()), '?'))} (got {got})"
    if kind == "finite_number":
        return f"{loc}: must be a finite number (got {got})"
    if kind == "string_pattern_mismatch":
        return f"{loc}: must be {PATTERNS.get(str(ctx.get('pattern')), 'of the allowed characters')} (got {got})"
    return f"{loc}: {msg.lower()} (got {got})"


BOUNDS = {"greater_than_equal": "at least", "less_than_equal": "at most", "greater_than": "more than",
          "less_than": "less than"}
# What a field's pattern allows, in words, by the pattern (jobspec.fields' patterns).
PATTERNS = {
    r"^[a-z0-9][a-z0-9_-]{0,62}$": "lowercase letters, digits, - and _, starting with a letter or digit, at most "
                                   "63 characters, e.g. exp-1",
    r"^[a-z][a-z0-9]{0,15}$": "lowercase letters and digits, starting with a letter, at most 16 characters",
}


def _number(value: Any) -> str:
    """A bound as a person writes it: 256, not 256.0."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _unknown_framework(name: Any) -> str:
    return f"framework: {shown(name)} is not one orch runs; choose {' or '.join(frameworks.names())}"
