"""Resource use of one replica in orch's own shape, which every engine's adapter fills in.

Neutral ground: the Docker adapter (``docker/``) makes it from the Engine API's JSON, the backends hand it
on, and the sampler (``run/stats.py``) records it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """One replica's resource use at one moment, in orch's shape whatever the engine. CPU is in percent of
    one core (200 = two cores busy); memory used is the working set (as `docker stats` shows it), memory
    charged adds the page cache; the counters are totals since the replica started."""

    cpu_percent: float
    mem_used_bytes: int
    mem_limit_bytes: int
    mem_charged_bytes: int
    net_rx_bytes: int
    net_tx_bytes: int
    blk_read_bytes: int
    blk_write_bytes: int
    pids: int
