"""The machine a measurement was taken on, so that figures from two machines are never quietly compared.

A sweep that is resumed on another host (a new cloud VM of the "same" size, a laptop after a desktop) would
otherwise put repeats measured on different processors in one median. What decides a CPU-bound training
time is the processor and its instruction set, the cores and the memory, so those make the identity;
the host name, the kernel and the boot do not (a new VM of the same kind measures alike).
"""
from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any, Mapping

CPUINFO = Path("/proc/cpuinfo")


def _cpu() -> tuple[str, str, list[str]]:
    """(model name, "family F model M stepping S", instruction-set flags) of the first processor."""
    fields: dict[str, str] = {}
    try:
        for line in CPUINFO.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                if fields:
                    break  # the first processor's block is enough
                continue
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown"
    ident = " ".join(f"{label} {fields[key]}" for label, key in (("family", "cpu family"), ("model", "model"),
                                                                 ("stepping", "stepping")) if key in fields)
    flags = sorted(set((fields.get("flags") or fields.get("Features") or "").split()))
    return name, ident, flags


def identity() -> dict[str, Any]:
    """This machine's processor, instruction set, cores and memory, with ``id``: a digest of them."""
    import psutil

    name, ident, flags = _cpu()
    found = {
        "cpu": name,
        "cpu_id": ident,
        "cpu_flags": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12],
        "cores": psutil.cpu_count() or 0,
        "memory_gib": round(psutil.virtual_memory().total / 2**30),
    }
    return {**found, "id": fingerprint(found)}


def fingerprint(found: Mapping[str, Any]) -> str:
    """A short digest of an identity's fields (``id`` itself left out)."""
    canonical = json.dumps({k: v for k, v in found.items() if k != "id"}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def describe(found: Mapping[str, Any]) -> str:
    """One line: "2 cores, 24 GiB, Intel(R) Xeon(R) Processor (family 6 model 167 stepping 1), id 3f...".
    """
    cpu = found.get("cpu", "unknown CPU") + (f" ({found['cpu_id']})" if found.get("cpu_id") else "")
    return f"{found.get('cores', '?')} cores, {found.get('memory_gib', '?')} GiB, {cpu}, machine {found.get('id', '?')}"
