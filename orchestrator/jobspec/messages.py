"""One-line messages for an invalid spec, naming fields as the flags and experiment files do."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from orchestrator import frameworks


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: the field (as the spec names it), what is wrong and allowed, and an example
    of a good value. The CLI names the field by its flag, an experiment file by its own name (``say``)."""

    field: str
    text: str
    example: Optional[str] = None


def say(problems: Iterable[Problem], name: Callable[[str], Optional[str]], flags: bool = False) -> str:
    """The problems as one line. ``name`` gives the name the user typed for a field (None: the field itself);
    with ``flags`` the names are flags (``--memory``) and examples are command-line words."""
    parts = []
    for p in problems:
        shown_name = name(p.field) or p.field
        if p.field == "spec":
            parts.append(p.text)
            continue
        example = (f"; e.g. {shown_name} {p.example}" if flags else f"; e.g. {shown_name}: {p.example}") \
            if p.example else ""
        # A text that begins with the flag already (``--strategy is an option of ...``) is not prefixed again.
        parts.append(f"{p.text}{example}" if p.text.startswith(f"{shown_name} ") else
                     f"{shown_name}: {p.text}{example}")
    return "; ".join(parts)


def shown(part: Any) -> str:
    """A name from user input as it may appear in a one-line message: plain if harmless, else repr()."""
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text) else repr(text[:64])


def describe_all(exc: Any, field_names: Callable[[], list[str]],
                 example: Callable[[str], Optional[str]] = lambda field: None) -> list[Problem]:
    """A pydantic ValidationError as problems, each with ``example(field)`` where one helps. The roles follow from
    ``workers``: where it is wrong, theirs is the same error said again, so it is left out."""
    errors = exc.errors(include_url=False)
    if any(e.get("loc", ())[:1] == ("workers",) for e in errors):
        errors = [e for e in errors if e.get("loc", ())[:1] != ("roles",)]
    return [_describe(e, field_names, example) for e in errors]


def problem(message: str, example: Callable[[str], Optional[str]] = lambda field: None) -> Problem:
    """A validator's message ``field: text`` as a problem (a message naming no field is the spec's)."""
    field, sep, text = message.partition(": ")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", field):
        return Problem("spec", message)
    return Problem(field, text)


def _describe(error: dict[str, Any], field_names: Callable[[], list[str]],
              example: Callable[[str], Optional[str]]) -> Problem:
    """One pydantic error; ``field_names`` lists the allowed fields for an unknown one (JobSpec's, which this
    module cannot import: the spec package imports it)."""
    loc = ".".join(shown(part) for part in error.get("loc", ())) or "spec"
    loc = loc.removeprefix("framework.").removeprefix("backend_options.")  # flat fields to the user
    msg = error.get("msg", "invalid")
    kind = error.get("type")
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        return problem(msg) if loc == "spec" or msg.startswith(f"{loc}:") else Problem(loc, msg)
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(loc, field_names(), n=1)
        hint = f"did you mean {close[0]}?" if close else "help(orchestrator.up) and `orch up --help` list the fields"
        return Problem(loc, f"unknown field; {hint}")
    got = repr(error.get("input"))[:80]
    ctx = error.get("ctx") or {}
    if kind == "literal_error":
        return Problem(loc, f"must be {ctx.get('expected', 'one of the choices')} (got {got})")
    if kind in BOUNDS:
        return Problem(loc, f"must be {BOUNDS[kind]} {_number(next(iter(ctx.values()), '?'))} (got {got})",
                       example(loc))
    if kind == "finite_number":
        return Problem(loc, f"must be a finite number (got {got})", example(loc))
    if kind == "string_pattern_mismatch":
        return Problem(loc, f"must be {PATTERNS.get(str(ctx.get('pattern')), 'of the allowed characters')} (got {got})")
    return Problem(loc, f"{msg.lower()} (got {got})", example(loc))


BOUNDS = {"greater_than_equal": "at least", "less_than_equal": "at most", "greater_than": "more than",
          "less_than": "less than"}
# What a field's pattern allows, in words, by the pattern (jobspec.fields' patterns).
PATTERNS = {
    r"^[a-z0-9][a-z0-9_-]{0,62}$": "lowercase letters, digits, - and _, starting with a letter or digit, at most "
                                   "63 characters, e.g. exp-1",
    r"^[a-z][a-z0-9]{0,15}$": "lowercase letters and digits, starting with a letter, at most 16 characters",
    r"^[a-z0-9][a-z0-9-]{0,23}$": "lowercase letters, digits and -, starting with a letter or digit, at most 24 "
                                  "characters, e.g. my-sweep",  # an experiment's name
}


def _number(value: Any) -> str:
    """A bound as a person writes it: 256, not 256.0."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _unknown_framework(name: Any) -> str:
    return f"framework: {shown(name)} is not one orch runs; choose {' or '.join(frameworks.names())}"
