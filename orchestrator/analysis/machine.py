"""The machine a measurement was taken on, so that figures from two machines are never quietly compared.

A sweep that is resumed on another host (a new cloud VM of the "same" size, a laptop after a desktop) would
otherwise put repeats measured on different processors in one median. What decides a CPU-bound training
time is the processor, its instruction set and the cores, so those make the identity's digest; memory is
recorded but left out of it (its total moves by megabytes between kernels), as are the host name, the
kernel and the boot (a new VM of the same kind measures alike). Only the vector and matrix extensions of
the flags count: the rest of the list changes with the kernel and the hypervisor.

orch can only look at the machine it runs on. That is where the containers run with the Compose backend
on a local engine; on Swarm or Kubernetes, or a remote engine, the cells record where they ran, unchecked.
"""
from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any, Mapping

from orchestrator.contract import finite

CPUINFO = Path("/proc/cpuinfo")
# The instruction-set extensions that choose a numeric library's kernels (x86 and Arm names).
VECTOR_FLAGS = ("sse", "ssse", "avx", "fma", "f16c", "amx", "asimd", "sve", "neon")


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
    flags = sorted({f for f in (fields.get("flags") or fields.get("Features") or "").split()
                    if f.startswith(VECTOR_FLAGS)})
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


def where_cells_run(backend: str, engine: str) -> dict[str, Any]:
    """The identity of the machine a job's containers run on: this one's (``identity``) for Compose on a
    local engine (a unix socket); otherwise where they ran, marked unchecked, with an ``id`` that stays the
    same for the same backend and engine address."""
    if backend == "compose" and engine.startswith("unix://"):
        return identity()
    found = {"unchecked": "Kubernetes nodes" if backend == "k8s" else
             f"{'Swarm nodes' if backend == 'swarm' else 'the engine'} at {engine}"}
    return {**found, "id": "unchecked-" + fingerprint(found)[:8]}


def fingerprint(found: Mapping[str, Any]) -> str:
    """A short digest of an identity's fields (``id`` and ``memory_gib`` left out)."""
    canonical = json.dumps(finite({k: v for k, v in found.items() if k not in ("id", "memory_gib")}), sort_keys=True,
                           default=str, allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def describe(found: Mapping[str, Any]) -> str:
    """One line: "2 cores, 24 GiB, Intel(R) Xeon(R) Processor (family 6 model 167 stepping 1), machine 36e7...",
    or where unchecked cells ran."""
    if found.get("unchecked"):
        return f"not checked: the containers ran on {found['unchecked']}"
    cpu = found.get("cpu", "unknown CPU") + (f" ({found['cpu_id']})" if found.get("cpu_id") else "")
    return f"{found.get('cores', '?')} cores, {found.get('memory_gib', '?')} GiB, {cpu}, machine {found.get('id', '?')}"
