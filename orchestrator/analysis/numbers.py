"""The one way orch writes a measured number: to significant digits, in report.md, report.html and the docs' tables.

A measurement is known to a few digits, so ``sig`` keeps three significant ones (never rounding away a whole
digit: 1234.5 is 1235, 72.9 stays 72.9, not 72.9000); a whole number stays whole; a float keeps its digits even
where it happens to be whole (1.0 beside 1.0029 is 1.00 beside 1.00, not 1 beside 1.0029).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

DIGITS = 3
NONE = "-"  # where there is no figure


def sig(value: Any, digits: int = DIGITS, none: str = NONE) -> str:
    """``value`` to ``digits`` significant digits (whole digits kept); an int as it is; ``none`` for None or a
    non-finite float; anything else as text."""
    if value is None:
        return none
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if not math.isfinite(value):
        return none
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    if decimals > 8:  # smaller than a thousandth of a millionth of the unit: as a power of ten
        return f"{value:.{digits - 1}e}"
    rounded = round(value, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals = max(0, decimals - 1)  # 9.996 rounds to 10.0, three digits, not 10.00
    return f"{value:,.{decimals}f}" if abs(value) >= 10_000 else f"{value:.{decimals}f}"


def median_range(value: Optional[Sequence[float]], scale: float = 1.0, digits: int = DIGITS, none: str = NONE,
                 suffix: str = "") -> str:
    """A (median, min, max) as "median (min–max)", the range left out where its ends read the same; each end
    times ``scale``."""
    if not value:
        return none
    med, lo, hi = (v * scale for v in value)
    low, high = sig(lo, digits), sig(hi, digits)
    text = sig(med, digits) + suffix
    return text if low == high else f"{text} ({low}–{high}{suffix})"


def with_unit(value: Any, suffix: str, digits: int = DIGITS, none: str = NONE) -> str:
    """``sig`` with a unit after it (``1.90x``, ``2.4 s``), ``none`` alone where there is no figure."""
    return none if value is None else sig(value, digits, none) + suffix
