"""Sizes as Docker writes them (``512m``, ``2g``, ``200M``, ``1.5GiB``), read as whole MiB.

Docker's own parser (go-units ``RAMInBytes``) takes a number, an optional space, one of ``b k m g t p`` in
either case, and an optional ``i`` and ``b`` after it; every unit is a power of 1024. One difference: a number
alone is MiB here, as orch's size flags and fields have always read it (``--memory 2048``), where Docker
reads bytes. Every size flag and field of the spec goes through ``mib``; `orch bench allreduce --sizes`, whose
sizes are messages' bytes, through ``size_bytes``.
"""
from __future__ import annotations

import re
from typing import Any

_SIZE = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,15})?) ?([bkmgtp])?(?:i?b)?", re.IGNORECASE)
_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
EXAMPLES = "512m, 2g or 2048 (MiB)"


class Size:
    """The marker of a spec field that holds a size in MiB and takes Docker's units (``Annotated[int, SIZE]``):
    the CLI reads its flag as text, and the typed API takes a number or a string."""

    def __repr__(self) -> str:
        return "SIZE"


SIZE = Size()


def _scaled(text: str, bare: int, hint: str) -> tuple[int, int]:
    """A size string as (bytes times ``scale``, ``scale``), exactly: 1.5g is 1536 MiB, never a float's rounding."""
    found = _SIZE.fullmatch(text)
    if found is None:
        raise ValueError(f"{text[:40]!r} is not a size; {hint}")
    number, unit = found.group(1), found.group(2)
    whole, _, fraction = number.partition(".")
    return int(whole + fraction) * (_UNITS[unit.lower()] if unit else bare), 10 ** len(fraction)


def size_bytes(text: str, bare: int = 1) -> int:
    """A size string in bytes, a number alone taken as ``bare`` bytes. ValueError (one line) for no size, or one
    that is not a whole number of bytes."""
    scaled, scale = _scaled(text.strip(), bare, "e.g. 4K, 80K, 1M or 16M")
    if scaled % scale:
        raise ValueError(f"{text.strip()[:40]!r} is not a whole number of bytes")
    return scaled // scale


def mib(value: Any) -> Any:
    """``value`` in MiB: a size string (``2g``, ``512m``, ``1.5GiB``, ``2048``) as a whole number of MiB. Any other
    value is returned as it is, for the field's own check. ValueError (one line) for a string that is no size
    or no whole number of MiB."""
    if not isinstance(value, str):
        return value
    scaled, scale = _scaled(value.strip(), 1 << 20, f"give MiB or a size as Docker writes it, e.g. {EXAMPLES}")
    if scaled % (scale << 20):
        raise ValueError(f"{value.strip()[:40]!r} is not a whole number of MiB; e.g. {EXAMPLES}")
    return scaled // (scale << 20)


def shown(megabytes: int) -> str:
    """A size in MiB as Docker writes it, in the largest unit that keeps it whole: 2048 -> 2g, 200 -> 200m."""
    for unit, shift in (("t", 20), ("g", 10)):
        if megabytes and megabytes % (1 << shift) == 0:
            return f"{megabytes >> shift}{unit}"
    return f"{megabytes}m"
