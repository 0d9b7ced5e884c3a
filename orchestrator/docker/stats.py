"""The Engine API's stats JSON (cgroup v1 or v2) read into orch's ``Usage``."""
from __future__ import annotations

from typing import Any, Optional

from orchestrator.usage import Usage


def usage_of(raw: dict[str, Any]) -> Optional[Usage]:
    """A container's use from one Engine API stats record, or None if it holds no figures yet.

    CPU follows the docker CLI: the container's share of the host's CPU time since the previous record,
    times the number of CPUs. Memory used excludes the inactive page cache, as `docker stats` does.
    """
    cpu, pre = raw.get("cpu_stats") or {}, raw.get("precpu_stats") or {}
    system, pre_system = cpu.get("system_cpu_usage"), pre.get("system_cpu_usage")
    memory = raw.get("memory_stats") or {}
    if system is None or not memory.get("usage"):
        return None  # the first record of a stream, or a container that has stopped
    total = (cpu.get("cpu_usage") or {}).get("total_usage", 0)
    pre_total = (pre.get("cpu_usage") or {}).get("total_usage", 0)
    online = cpu.get("online_cpus") or len((cpu.get("cpu_usage") or {}).get("percpu_usage") or []) or 1
    cpu_percent = 0.0
    if pre_system is not None and system > pre_system and total >= pre_total:
        cpu_percent = (total - pre_total) / (system - pre_system) * online * 100.0
    extra = memory.get("stats") or {}
    cache = extra.get("total_inactive_file", extra.get("inactive_file", 0))
    networks = raw.get("networks") or {}
    blk = (raw.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []
    return Usage(
        cpu_percent=round(cpu_percent, 3),
        mem_used_bytes=int(memory["usage"] - cache),
        mem_limit_bytes=int(memory.get("limit", 0)),
        mem_charged_bytes=int(memory["usage"]),
        net_rx_bytes=sum(int(n.get("rx_bytes", 0)) for n in networks.values()),
        net_tx_bytes=sum(int(n.get("tx_bytes", 0)) for n in networks.values()),
        blk_read_bytes=sum(int(e.get("value", 0)) for e in blk if str(e.get("op", "")).lower() == "read"),
        blk_write_bytes=sum(int(e.get("value", 0)) for e in blk if str(e.get("op", "")).lower() == "write"),
        pids=int((raw.get("pids_stats") or {}).get("current", 0)),
    )
