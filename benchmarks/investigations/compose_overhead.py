"""orch's own time over a bare `docker compose up` of the same rendered file.

Usage: python benchmarks/investigations/compose_overhead.py [--workers 3] [--repeats 3] [--dataset synthetic --samples 12000]

Each repeat renders one job twice (two run ids, same spec). One copy runs with a bare
`docker compose up` (attached, so it returns when every container has exited) followed by
`docker compose down`. The other runs with `orch up`, which also checks the engine, image
and data, watches events, samples stats, saves logs and collects results. The difference
is what orch adds. The order alternates between repeats.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.paths import default_paths  # noqa: E402
from orchestrator.plan import plan  # noqa: E402
from orchestrator.run.rundir import RunDir  # noqa: E402
from orchestrator.run.runner import container_user
from orchestrator.run.start import up  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402


def bare(fields: dict, run_id: str) -> float:
    p = plan(make_spec(**fields, run_id=run_id), default_paths(), user=container_user(), host_cpus=os.cpu_count() or 1)
    RunDir(p.run_dir).create(p)
    cmd = ["docker", "compose", "-f", str(p.artifact_file), "-p", p.engine_name]
    started = time.monotonic()
    subprocess.run([*cmd, "up"], check=True, capture_output=True)
    subprocess.run([*cmd, "down", "--remove-orphans"], check=True, capture_output=True)
    return time.monotonic() - started


def with_orch(fields: dict, run_id: str) -> float:
    started = time.monotonic()
    up(make_spec(**fields, run_id=run_id))
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--samples", type=int, default=12000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    fields = {"workers": args.workers, "dataset": args.dataset, "samples": args.samples, "epochs": args.epochs}
    print(json.dumps(compare(fields, args.repeats, f"overhead-{int(time.time())}"), indent=2))


def compare(fields: dict, repeats: int, prefix: str) -> dict:
    """``repeats`` pairs of bare compose and orch up, alternating which goes first; run ids start with
    ``prefix``. Returns each pair's seconds and the median and range of what orch adds."""
    rows = []
    for r in range(repeats):
        order = [("bare", bare), ("orch", with_orch)] if r % 2 == 0 else [("orch", with_orch), ("bare", bare)]
        times = {name: fn(fields, f"{prefix}-{r}-{name}") for name, fn in order}
        rows.append(times)
        print(f"repeat {r}: bare compose {times['bare']:.2f} s, orch up {times['orch']:.2f} s, "
              f"orch adds {times['orch'] - times['bare']:.2f} s", file=sys.stderr, flush=True)
    extra = [t["orch"] - t["bare"] for t in rows]
    return {"workload": fields, "repeats": rows, "orch_extra_seconds_median": statistics.median(extra),
            "orch_extra_seconds_range": [min(extra), max(extra)]}


if __name__ == "__main__":
    main()
