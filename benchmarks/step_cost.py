"""Where a training step's time goes on N workers: the collective, or Keras' fit() around it.

Usage: python benchmarks/step_cost.py [--workers 1 3] [--calls 8]

Runs benchmarks/probes/step.py in N trainer containers (bridge network, pinned as orch pins
workers). It times, at the same global batch of 96, 50 steps to a tf.function call:
  bare:  forward, backward, one all-reduce of the gradients and Adam, in a custom loop;
  keras: the same model compiled as orch's trainer compiles it, with Keras' own train_step, which
         reads every metric across workers after each step (and once more without accuracy);
  orch:  the trainer's own model, whose steps read the metrics only once per epoch.
With allreduce_latency.py (the all-reduce alone) this splits a step into compute, collective and
framework cost. Results to stdout as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from allreduce_latency import run_probe  # noqa: E402

PROBE = ROOT / "benchmarks/probes/step.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    rows = []
    for workers in args.workers:
        row = run_probe(PROBE, workers, "bridge", 0, args.calls, pinned=True)
        rows.append(row)
        print(f"{workers} worker(s): bare loop {row['bare_ms_per_step']:.2f} ms per step, "
              f"Keras' steps {row['keras_ms_per_step']:.2f} ms ({row['keras_no_metrics_ms_per_step']:.2f} without "
              f"accuracy), orch's steps {row['orch_ms_per_step']:.2f} ms per step", file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
