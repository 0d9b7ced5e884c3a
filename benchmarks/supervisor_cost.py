"""What a run's own supervisor process costs: the same job supervised in the command's process, as `orch up` once
did (``runner.apply``), and by a supervisor process of its own that the command attaches to (``start.up``), side by
side in rotated order.

Usage: python benchmarks/supervisor_cost.py [--repeats 5] [--workers 2]

For each arm and repeat it runs a small job (synthetic data, 2 epochs) and records its wall seconds (the run's own,
as run.json gives them), its train seconds, wall − train, and the seconds the command took from call to return. It
also times the supervisor's start alone: from spawning it to its holding the run's lease. Writes
benchmarks/results/supervisor.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import backends  # noqa: E402
from orchestrator.analysis import machine  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.plan import plan  # noqa: E402
from orchestrator.run import preflight, runner, start  # noqa: E402
from orchestrator.run.lease import holder  # noqa: E402
from orchestrator.run.supervise import Settings, spawn  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
JOB = {"dataset": "synthetic", "samples": 6000, "epochs": 2, "steps_per_execution": 10}


def one(arm: str, run_id: str, workers: int, paths: Paths) -> dict:
    spec = make_spec(run_id=run_id, workers=workers, **JOB)
    began = time.monotonic()
    if arm == "in-process":
        p = plan(spec, paths, user=runner.container_user(), host_cpus=os.cpu_count() or 1)
        info = runner.apply(p, backends.get(spec.backend), paths)
    else:
        info = start.up(spec, paths=paths)
    took = time.monotonic() - began
    assert info.wall_seconds is not None and info.train_seconds is not None, info
    return {"arm": arm, "wall_seconds": info.wall_seconds, "train_seconds": info.train_seconds,
            "beyond_train": info.wall_seconds - info.train_seconds, "command_seconds": took}


def supervisor_start(paths: Paths, run_id: str) -> float:
    """Seconds from spawning a run's supervisor to its holding the lease; the run is then stopped before it starts."""
    spec = make_spec(run_id=run_id, workers=1, **JOB)
    p = plan(spec, paths, user=runner.container_user(), host_cpus=os.cpu_count() or 1)
    backend = backends.get(spec.backend)
    run, _ = preflight.prepare(p, backend, paths, lambda _m: None)
    began = time.monotonic()
    pid = spawn(run, Settings(paths, p.user, os.cpu_count() or 1, 1.0))
    took = time.monotonic() - began
    os.kill(pid, 15)  # SIGTERM: the supervisor stops the run as `orch down` does
    while holder(run.path) is not None:
        time.sleep(0.1)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    base = default_paths()
    runs = []
    with tempfile.TemporaryDirectory(prefix="orch-supervisor-") as tmp:
        paths = Paths(Path(tmp) / "runs", base.cache, Path(tmp) / "results")
        arms = ["in-process", "supervisor"]
        for i in range(args.repeats):
            for arm in (arms if i % 2 == 0 else arms[::-1]):
                runs.append(one(arm, f"sup-{arm[:2]}-{i}", args.workers, paths))
                print(json.dumps(runs[-1]), flush=True)
        starts = [supervisor_start(paths, f"sup-start-{i}") for i in range(args.repeats)]
    summary = {arm: {k: statistics.median(r[k] for r in runs if r["arm"] == arm)
                     for k in ("wall_seconds", "train_seconds", "beyond_train", "command_seconds")} for arm in arms}
    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine.identity(),
              "workers": args.workers, "job": JOB, "repeats": args.repeats, "runs": runs, "median": summary,
              "supervisor_start_seconds": starts, "supervisor_start_median": statistics.median(starts)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "supervisor.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"median": summary, "supervisor_start_median": result["supervisor_start_median"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
