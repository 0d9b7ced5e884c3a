"""Where a training step's time goes on N workers, against the floor floor.py draws for it.

Usage: python benchmarks/investigations/step_cost.py [--framework tensorflow|torch] [--workers 2 3 4] [--repeats 2]
                                                     [--calls 8]

For each N, in one run and in turn:
  in place: the framework's probe in N trainer containers on a bridge network, at the global batch of 96.
            TensorFlow (probes/step.py), pinned as orch pins workers, 50 steps to a tf.function call:
              bare:    forward, backward, one all-reduce of the gradients and Adam, in a custom loop;
              compute: the same step without its all-reduce;
              reduce:  the gradients' all-reduce alone, as the optimizer issues it;
              keras:   the same model compiled as orch's trainer compiles it, with Keras' own steps
                       (and once more without accuracy);
              orch:    the trainer's own model, whose steps read the metrics only once per epoch.
            PyTorch (probes/torch_step.py), the trainer's MLP and step, each arm twice: with every
            thread of a rank pinned to its cores, and with gloo's threads free on every core (as the trainer now):
              compute: the step without any all-reduce;
              reduce:  the gradients' all-reduce alone, back to back; aligned: each after a barrier, as the
                       bench times it;
              manual:  the step, then its gradients' all-reduce in the step's own thread (no DDP);
              ddp:     DistributedDataParallel's own all-reduce; view: with gradient_as_bucket_view;
              orch:    DDP with orch's timing hook, as the trainer runs;
  alone:    the same probe in one container at the per-rank batch (96 / N), pinned to the cores a rank gets:
            its compute step, times the ranks that share a core, is floor.py's compute floor per step;
  bench:    the framework's all-reduce of the gradients at N ranks, as `orch bench allreduce` measures it
            (TensorFlow's ring, gloo): floor.py's transport floor per step.
So a step splits into what the floor counts, what the same pieces cost in place, and what the framework's step
adds around them. Writes benchmarks/investigations/results/step_cost.json and .md (torch_step_cost.* for
PyTorch), or into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from allreduce_latency import run_probe  # noqa: E402

from orchestrator import bench  # noqa: E402
from orchestrator.experiments.floor import ITERATIONS, WARMUP, parameters  # noqa: E402
from orchestrator.frameworks import tensorflow as tf_framework  # noqa: E402
from orchestrator.frameworks import torch as torch_framework  # noqa: E402
from orchestrator.plan import rank_cores  # noqa: E402

RESULTS = HERE / "results"
GLOBAL = 96
GRADIENTS = 4 * parameters("mlp")


TORCH_ARMS = ("compute", "reduce", "aligned", "manual", "ddp", "view", "orch")


class Probe(NamedTuple):
    path: Path
    image: str
    transport: str  # the bench's transport: floor.py's transport floor for this framework
    fields: tuple[str, ...]  # the probe's arms, each printed as <arm>_ms_per_step
    stem: str  # the results' file name
    pins_itself: bool  # its containers run unpinned, and it places its own threads


PROBES = {
    "tensorflow": Probe(HERE / "probes" / "step.py", tf_framework.image_ref("multi"), "tf-ring-bridge",
                        ("bare", "compute", "reduce", "keras", "keras_no_metrics", "orch"), "step_cost", False),
    "torch": Probe(HERE / "probes" / "torch_step.py", torch_framework.image_ref(), "gloo",
                   tuple(f"{arm}{pinning}" for pinning in ("", "_step_pinned") for arm in TORCH_ARMS),
                   "torch_step_cost", True),
}


def one(probe: Probe, workers: int, calls: int, host_cpus: int) -> dict:
    """One repeat at ``workers``: the probe in place, alone, and the transport's p50 (ms)."""
    here = run_probe(probe.path, workers, "bridge", 0, calls, pinned=not probe.pins_itself, image=probe.image)
    cores, share = rank_cores(workers, host_cpus)
    alone = run_probe(probe.path, 1, "bridge", 0, calls, env={"PROBE_GLOBAL": str(GLOBAL // workers)},
                      cpus="0" if cores == 1 else f"0-{cores - 1}", image=probe.image)
    rows = [r for r in bench.run([GRADIENTS], [workers], [probe.transport], ITERATIONS, WARMUP, host=False)
            if r.placement == "containers"]
    if not rows or rows[0].p50_us is None:
        raise SystemExit(f"the {probe.transport} all-reduce at {workers} ranks was not measured: "
                         f"{rows[0].note if rows else ''}")
    return {**{f"{k}_ms": here[f"{k}_ms_per_step"] for k in probe.fields},
            "alone_compute_ms": alone["compute_ms_per_step"], "ranks_per_core": share,
            "allreduce_p50_ms": rows[0].p50_us / 1000}


def summary(repeats: list[dict]) -> dict:
    out = {key: statistics.median(r[key] for r in repeats) for key in repeats[0]}
    out["compute_floor_ms"] = out["alone_compute_ms"] * out["ranks_per_core"]
    out["floor_ms"] = out["compute_floor_ms"] + out["allreduce_p50_ms"]
    return out


def table(results: dict[int, dict]) -> str:
    """TensorFlow's table: the floor, the pieces in place, the bare step and orch's."""
    lines = ["| N | compute floor | transport floor | floor | compute in place | all-reduce in place | their sum | "
             "bare step | bare / floor | orch's step | orch / bare |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, s in results.items():
        lines.append(f"| {n} | {s['compute_floor_ms']:.2f} | {s['allreduce_p50_ms']:.2f} | {s['floor_ms']:.2f} | "
                     f"{s['compute_ms']:.2f} | {s['reduce_ms']:.2f} | {s['compute_ms'] + s['reduce_ms']:.2f} | "
                     f"{s['bare_ms']:.2f} | {s['bare_ms'] / s['floor_ms']:.2f} | {s['orch_ms']:.2f} | "
                     f"{s['orch_ms'] / s['bare_ms']:.2f} |")
    return "\n".join(lines)


def torch_table(results: dict[int, dict]) -> str:
    """PyTorch's table: the floor, then each piece in place, with every thread of a rank pinned to its cores and
    with gloo's threads free."""
    lines = ["| N | pinning | compute floor | transport floor | floor | compute in place | all-reduce back to back | "
             "all-reduce after a barrier | step, all-reduce by hand | DDP | DDP, bucket view | orch's DDP | "
             "DDP / floor | orch / DDP |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, s in results.items():
        for pinning, suffix in (("every thread", ""), ("all but gloo's", "_step_pinned")):
            m = {arm: s[f"{arm}{suffix}_ms"] for arm in TORCH_ARMS}
            lines.append(f"| {n} | {pinning} | {s['compute_floor_ms']:.2f} | {s['allreduce_p50_ms']:.2f} | "
                         f"{s['floor_ms']:.2f} | {m['compute']:.2f} | {m['reduce']:.2f} | {m['aligned']:.2f} | "
                         f"{m['manual']:.2f} | {m['ddp']:.2f} | {m['view']:.2f} | {m['orch']:.2f} | "
                         f"{m['ddp'] / s['floor_ms']:.2f} | {m['orch'] / m['ddp']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(PROBES), default="tensorflow")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--calls", type=int, default=8, help="TensorFlow: tf.function calls of 50 steps per arm")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    probe = PROBES[args.framework]
    host_cpus = os.cpu_count() or 1
    raw: dict[int, list[dict]] = {n: [] for n in args.workers}
    for r in range(args.repeats):
        for n in args.workers if r % 2 == 0 else list(reversed(args.workers)):
            raw[n].append(one(probe, n, args.calls, host_cpus))
            row = raw[n][-1]
            pieces = ", ".join(f"{k} {row[k + '_ms']:.2f}" for k in probe.fields)
            print(f"repeat {r + 1}/{args.repeats}, {n} workers: {pieces} ms; alone {row['alone_compute_ms']:.2f} x "
                  f"{row['ranks_per_core']}, {probe.transport} p50 {row['allreduce_p50_ms']:.2f}",
                  file=sys.stderr, flush=True)
    results = {n: summary(rows) for n, rows in raw.items()}
    text = (torch_table if args.framework == "torch" else table)(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{probe.stem}.json").write_text(json.dumps(
        {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "framework": args.framework,
         "host_cpus": host_cpus, "global_batch": GLOBAL, "gradient_bytes": GRADIENTS, "repeats": raw,
         "medians": results}, indent=2) + "\n")
    (args.out / f"{probe.stem}.md").write_text(
        f"`python benchmarks/investigations/step_cost.py --framework {args.framework} "
        f"--workers {' '.join(map(str, args.workers))} "
        f"--repeats {args.repeats}`, {time.strftime('%Y-%m-%d', time.gmtime())}, {host_cpus} cores; milliseconds "
        f"per step, medians of {args.repeats} repeats.\n\n{text}\n")


if __name__ == "__main__":
    main()
