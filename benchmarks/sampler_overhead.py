"""Measure the stats sampler's own cost: its CPU use and the samples per second it keeps up with.

Usage: python benchmarks/sampler_overhead.py [--containers 3 8] [--seconds 30]

For each count N it starts N light containers (a Python loop using a few % of a core, from
orch-base:bookworm), samples them with orch's Sampler into a temporary run folder for the given
time, and reports the sampler process's CPU (100 = one core), samples per second against the
N per second asked for, and, for reference, how long one `docker stats --no-stream` call takes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.backends.compose import ComposeBackend  # noqa: E402
from orchestrator.images.builder import DEFAULT_BASE  # noqa: E402
from orchestrator.run.stats import Sampler  # noqa: E402

LABEL = "orch.run=bench-sampler"
LOAD = "import time\nwhile True:\n    sum(range(20000))\n    time.sleep(0.02)\n"


def measure(count: int, seconds: float) -> dict:
    ids = []
    try:
        for i in range(count):
            ids.append(subprocess.run(
                ["docker", "run", "-d", "--label", LABEL, "--label", f"orch.index={i}", DEFAULT_BASE, "python3", "-c",
                 LOAD], capture_output=True, text=True, check=True).stdout.strip())
        backend = ComposeBackend()
        containers = backend.states("bench-sampler")
        me = psutil.Process()
        with tempfile.TemporaryDirectory() as out:
            sampler = Sampler(backend, Path(out), 1.0).start(containers)
            time.sleep(3)  # let every stream deliver its first record
            before_cpu, before_n, t0 = sum(me.cpu_times()[:2]), sampler.samples, time.monotonic()
            time.sleep(seconds)
            cpu, n, wall = sum(me.cpu_times()[:2]) - before_cpu, sampler.samples - before_n, time.monotonic() - t0
            sampler.stop()
        started = time.monotonic()
        subprocess.run(["docker", "stats", "--no-stream", *ids], capture_output=True, check=True)
        cli_seconds = time.monotonic() - started
        return {"containers": count, "seconds": round(wall, 1), "sampler_cpu_percent": round(cpu / wall * 100, 2),
                "samples_per_second": round(n / wall, 2), "asked_per_second": count,
                "docker_stats_cli_seconds_per_call": round(cli_seconds, 2)}
    finally:
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    rows = [measure(n, args.seconds) for n in args.containers]
    report = {"machine": {"cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)},
              "results": rows}
    print(json.dumps(report, indent=2))
    for r in rows:
        print(f"{r['containers']} containers: sampler CPU {r['sampler_cpu_percent']}% of one core, "
              f"{r['samples_per_second']} samples/s (asked {r['asked_per_second']}/s); "
              f"one `docker stats --no-stream` call: {r['docker_stats_cli_seconds_per_call']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
