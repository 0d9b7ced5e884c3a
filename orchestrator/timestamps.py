"""RFC 3339 timestamps as the Docker engine writes them, and back."""
from __future__ import annotations

from datetime import datetime, timezone


def parse_timestamp(text: str) -> float:
    """Unix seconds of an RFC 3339 timestamp with nanoseconds, as the engine writes them."""
    text = text.rstrip("Z")
    whole, _, frac = text.partition(".")
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return seconds + (float("0." + frac) if frac else 0.0)


def format_timestamp(t: float) -> str:
    """RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
