"""RFC 3339 timestamps as the Docker engine and Kubernetes write them, and back."""
from __future__ import annotations

import re
from datetime import datetime, timezone

# The engines write UTC with "Z"; a client that read a time into a datetime writes it back as "+00:00" (the
# kubernetes client does); a time without a zone is read as UTC, as orch's own older files wrote it.
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)?", re.IGNORECASE)


def parse_timestamp(text: str) -> float:
    """Unix seconds of an RFC 3339 timestamp (up to nanoseconds, ``Z`` or an offset). Raises ValueError."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"{text[:40]!r} is not an RFC 3339 time")
    whole, frac, zone = match.groups()
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    if zone and zone.upper() != "Z":
        sign = -1 if zone[0] == "-" else 1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds + (float("0." + frac) if frac else 0.0)


def format_timestamp(t: float) -> str:
    """RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
