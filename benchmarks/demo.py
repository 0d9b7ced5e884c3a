"""What `make demo` shows, measured: its comparisons' tables and how long each step takes, once the images exist.

Usage: python benchmarks/demo.py [--out benchmarks/results/demo.json]

Runs the steps of `make demo` in order, as `make demo` runs them, into a temporary runs and results folder: TensorFlow
1 worker against 3 on full MNIST and their `orch collect`, the same with MPI, and the container-count experiment's
--quick sweep. Each comparison's `orch collect --format json` is kept, so that README.md and
docs/getting-started.md print the table `make demo` prints from data (tools/figures/ renders it with orch's own
table), with the seconds of every step and of the whole demo.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.analysis import machine  # noqa: E402
from orchestrator.safetext import one_line  # noqa: E402

COMPARISONS = (("tensorflow", ()), ("mpi", ("--framework", "mpi")))


def orch(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run `orch ARGS` as `make demo` does; its seconds and stdout. Exit with its stderr's last line if it fails."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"demo.py: orch {' '.join(args)} failed ({proc.returncode}): {one_line(last)}")
    return time.monotonic() - started, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "demo.json")
    args = parser.parse_args()
    steps: list[list] = []
    comparisons = {}
    with tempfile.TemporaryDirectory(prefix="orch-demo-") as tmp:
        env = dict(os.environ, ORCH_RUNS_DIR=f"{tmp}/runs", ORCH_RESULTS_DIR=f"{tmp}/results", COLUMNS="200")
        started = time.monotonic()
        for name, flags in COMPARISONS:
            ids = [f"demo-{name}-w{n}" for n in (1, 3)]
            for n, run_id in zip((1, 3), ids):
                seconds, _ = orch(["up", *flags, "--workers", str(n), "--run-id", run_id], env)
                steps.append([f"orch up {' '.join(flags)} --workers {n}".replace("  ", " "), seconds])
                print(f"demo.py: {steps[-1][0]}: {seconds:.1f} s", file=sys.stderr)
            seconds, out = orch(["collect", *ids, "--format", "json"], env)
            steps.append([f"orch collect ({name})", seconds])
            comparisons[name] = json.loads(out)
        seconds, _ = orch(["experiment", "run", "experiments/container-count.yaml", "--quick"], env)
        steps.append(["orch experiment run experiments/container-count.yaml --quick", seconds])
        total = time.monotonic() - started
    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine.identity(),
              "seconds": total, "steps": steps, "comparisons": comparisons}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    print(f"demo.py: {total:.0f} s in all; wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
