"""One-line messages for an invalid spec, naming fields as the flags and experiment files do."""
from __future__ import annotations

import re
from typing import Any, Callable

from orchestrator import frameworks


def shown(part: Any) -> str:
    """A name from user input as it may appear in a one-line message: plain if harmless, else repr()."""
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text) else repr(text[:64])


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
    if error.get("type") == "literal_error":
        return f"{loc}: {msg} (got {got})"
    return f"{loc}: {msg.lower()} (got {got})"


def _unknown_framework(name: Any) -> str:
    return f"framework: {shown(name)} is not one orch runs; choose {' or '.join(frameworks.names())}"
