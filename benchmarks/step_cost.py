"""Where a TensorFlow training step's time goes on N workers, against the floor floor.py draws for it.

Usage: python benchmarks/step_cost.py [--workers 2 3 4] [--repeats 2] [--calls 8]

For each N, in one run and in turn:
  in place: benchmarks/probes/step.py in N trainer containers (bridge network, pinned as orch pins workers),
            at the global batch of 96, 50 steps to a tf.function call, timing
              bare:    forward, backward, one all-reduce of the gradients and Adam, in a custom loop;
              compute: the same step without its all-reduce;
              reduce:  the gradients' all-reduce alone, as the optimizer issues it;
              keras:   the same model compiled as orch's trainer compiles it, with Keras' own steps
                       (and once more without accuracy);
              orch:    the trainer's own model, whose steps read the metrics only once per epoch;
  alone:    the same probe in one container at the per-rank batch (96 / N), pinned to the cores a rank gets:
            its compute step, times the ranks that share a core, is floor.py's compute floor per step;
  bench:    TensorFlow's ring all-reduce of the gradients at N ranks, as `orch bench allreduce` measures it:
            floor.py's transport floor per step.
So a step splits into what the floor counts, what the same pieces cost in place, and what TensorFlow's step
adds around them. Writes benchmarks/results/step_cost.json and .md (or into --out).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from allreduce_latency import run_probe  # noqa: E402

from orchestrator import bench  # noqa: E402
from orchestrator.experiments.floor import ITERATIONS, WARMUP, parameters  # noqa: E402
from orchestrator.plan import rank_cores  # noqa: E402

PROBE = ROOT / "benchmarks/probes/step.py"
RESULTS = ROOT / "benchmarks" / "results"
GLOBAL = 96
GRADIENTS = 4 * parameters("mlp")
FIELDS = ("bare", "compute", "reduce", "keras", "keras_no_metrics", "orch")


def one(workers: int, calls: int, host_cpus: int) -> dict:
    """One repeat at ``workers``: the probe in place, alone, and the transport's p50 (ms)."""
    here = run_probe(PROBE, workers, "bridge", 0, calls, pinned=True)
    cores, share = rank_cores(workers, host_cpus)
    alone = run_probe(PROBE, 1, "bridge", 0, calls, env={"PROBE_GLOBAL": str(GLOBAL // workers)},
                      cpus="0" if cores == 1 else f"0-{cores - 1}")
    rows = [r for r in bench.run([GRADIENTS], [workers], ["tf-ring-bridge"], ITERATIONS, WARMUP, host=False)
            if r.placement == "containers"]
    if not rows or rows[0].p50_us is None:
        raise SystemExit(f"the ring all-reduce at {workers} ranks was not measured: {rows[0].note if rows else ''}")
    return {**{f"{k}_ms": here[f"{k}_ms_per_step"] for k in FIELDS}, "alone_compute_ms": alone["compute_ms_per_step"],
            "ranks_per_core": share, "allreduce_p50_ms": rows[0].p50_us / 1000}


def summary(repeats: list[dict]) -> dict:
    out = {key: statistics.median(r[key] for r in repeats) for key in repeats[0]}
    out["compute_floor_ms"] = out["alone_compute_ms"] * out["ranks_per_core"]
    out["floor_ms"] = out["compute_floor_ms"] + out["allreduce_p50_ms"]
    return out


def table(results: dict[int, dict]) -> str:
    lines = ["| N | compute floor | transport floor | floor | compute in place | all-reduce in place | their sum | "
             "bare step | bare / floor | orch's step | orch / bare |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, s in results.items():
        lines.append(f"| {n} | {s['compute_floor_ms']:.2f} | {s['allreduce_p50_ms']:.2f} | {s['floor_ms']:.2f} | "
                     f"{s['compute_ms']:.2f} | {s['reduce_ms']:.2f} | {s['compute_ms'] + s['reduce_ms']:.2f} | "
                     f"{s['bare_ms']:.2f} | {s['bare_ms'] / s['floor_ms']:.2f} | {s['orch_ms']:.2f} | "
                     f"{s['orch_ms'] / s['bare_ms']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    host_cpus = os.cpu_count() or 1
    raw: dict[int, list[dict]] = {n: [] for n in args.workers}
    for r in range(args.repeats):
        for n in args.workers if r % 2 == 0 else list(reversed(args.workers)):
            raw[n].append(one(n, args.calls, host_cpus))
            row = raw[n][-1]
            print(f"repeat {r + 1}/{args.repeats}, {n} workers: bare {row['bare_ms']:.2f} ms, compute "
                  f"{row['compute_ms']:.2f}, reduce {row['reduce_ms']:.2f}, orch {row['orch_ms']:.2f}; alone "
                  f"{row['alone_compute_ms']:.2f} x {row['ranks_per_core']}, ring p50 {row['allreduce_p50_ms']:.2f}",
                  file=sys.stderr, flush=True)
    results = {n: summary(rows) for n, rows in raw.items()}
    text = table(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_cost.json").write_text(json.dumps(
        {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host_cpus": host_cpus, "global_batch": GLOBAL,
         "gradient_bytes": GRADIENTS, "repeats": raw, "medians": results}, indent=2) + "\n")
    (args.out / "step_cost.md").write_text(
        f"`python benchmarks/step_cost.py --workers {' '.join(map(str, args.workers))} --repeats {args.repeats}`, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {host_cpus} cores; milliseconds per step, medians of "
        f"{args.repeats} repeats.\n\n{text}\n")


if __name__ == "__main__":
    main()
