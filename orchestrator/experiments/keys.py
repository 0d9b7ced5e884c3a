"""Cell keys: grid points in the run-id alphabet, without collisions, and the run id of a cell."""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

from orchestrator.jobspec import shown


def _canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces); a tagged repr for what JSON cannot hold."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False,
                          default=lambda o: f"<{type(o).__name__}>{o!r}")
    except (TypeError, ValueError, RecursionError):  # mixed key types, an int too long to print, NaN, ...
        try:
            return f"<{type(value).__name__}>{value!r}"
        except (ValueError, RecursionError):
            return f"<{type(value).__name__}>"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _value_slug(value: Any) -> str:
    """``value`` in the run-id alphabet: itself if a non-negative int below 10**12 or a lowercase word of at
    most 12 letters and digits (lossless, never containing ``_``); else a readable part, ``_`` and a hash of
    its canonical JSON, so that no two values share a slug."""
    if type(value) is int and 0 <= value < 10**12 or type(value) is str and re.fullmatch(r"[a-z][a-z0-9]{0,11}", value):
        return str(value)
    text = _canonical(value)
    if type(value) in (int, float):  # 0.001 -> 0p001, -1 -> m1
        text = text.replace(".", "p").replace("-", "m")
    elif isinstance(value, str):
        text = value
    readable = re.sub(r"[^a-z0-9]+", "", text[:200].lower())[:12] or "x"
    return f"{readable}_{_digest(_canonical(value))}"


def _axis_parts(axis: str, values: list[Any]) -> list[str]:
    """Each value's part of a cell key (``workers3``, ``learningrate0p001_1a2b3c4d``). ValueError if two
    values give the same part: the same value twice."""
    parts = [axis.replace("_", "") + _value_slug(value) for value in values]
    for i, part in enumerate(parts):
        if part in parts[:i]:
            raise ValueError(f"{axis}: the value {shown(values[i])} appears more than once")
    return parts


def setup_key(setup: Mapping[str, Any]) -> str:
    """A setup's part of a cell key: its fields' parts in field order (``strategymirrored-replicas2``)."""
    return "-".join(_axis_parts(k, [v])[0] for k, v in sorted(setup.items()))


def cell_run_id(name: str, key: str, repeat: int, token: str) -> str:
    """The run id of cell ``key`` of experiment ``name``: ``<name>-<key>-<token>``; if that is longer than 63,
    a readable prefix of the key, a hash of the whole key, the repeat and the token, so what tells cells apart
    is never cut."""
    whole = f"{name}-{key}-{token}"
    if len(whole) <= 63:
        return whole
    tail = f"{_digest(key)}-r{repeat}-{token}"
    prefix = key[:max(0, 63 - len(name) - len(tail) - 2)].rstrip("-_")
    return "-".join(p for p in (name, prefix, tail) if p)
