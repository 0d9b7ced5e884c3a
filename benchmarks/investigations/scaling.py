"""Pairs of runs in one invocation: 1 worker vs N workers under each setting, and setting A vs B.

Usage: python benchmarks/investigations/scaling.py [--workers 3] [--samples 60000] [--epochs 5] [--only NAME ...]
       python benchmarks/investigations/scaling.py --tiny      (tiny synthetic data, two settings: checks it runs)

Every setting runs a 1-worker and an N-worker job of the same workload (global batch, epochs,
data) back to back, so T(N)/T(1) compares equal work on the same machine state. It also
reports the per-step synchronisation cost, (T(N) - T(1)) / steps, and orch's orchestration
overhead, the wall time of `orch up` minus the slowest worker's train time. Results go to
benchmarks/investigations/results/scaling.json and a markdown table to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import contract  # noqa: E402
from orchestrator.errors import OrchError  # noqa: E402
from orchestrator.run.start import up  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402

# Each setting is a set of spec fields over orch's defaults. "naive" is what a hand-written
# Compose file gets: TensorFlow's defaults everywhere.
NAIVE = {"collective": "auto", "bytes_per_pack": 0, "steps_per_execution": 1, "network": "bridge", "threads": 0,
         "pin_cpus": False, "log_reduction": "sum"}
SETTINGS = {
    "naive (TF defaults, bridge)": NAIVE,
    "steps_per_execution 50": {**NAIVE, "steps_per_execution": 50},
    "+ ring, 32 MiB packs": {**NAIVE, "steps_per_execution": 50, "collective": "ring", "bytes_per_pack": 32 << 20},
    "orch 0.1 before tuning": {"pin_cpus": False, "log_reduction": "sum"},
    "+ logs reduced locally": {"pin_cpus": False, "log_reduction": "first"},
    "+ pinned (orch 0.1 defaults)": {"log_reduction": "first"},
    "orch defaults (+ metrics read once per epoch)": {},
    "+ threads 1": {"threads": 1},
    "+ shared network namespace": {"network": "shared"},
    "+ host network": {"network": "host", "expose_ports_on_host": True},
    "+ shared + threads 1": {"network": "shared", "threads": 1},
    "+ pinned": {"pin_cpus": True},
    "+ threads 1 + pinned": {"threads": 1, "pin_cpus": True},
    "+ shared + threads 1 + pinned": {"network": "shared", "threads": 1, "pin_cpus": True},
    "+ shared + threads 1 + cpus 2/N": {"network": "shared", "threads": 1, "cpus": "share"},
    "+ shared + threads 1 + steps_per_execution 200": {"network": "shared", "threads": 1, "steps_per_execution": 200},
    "+ no tf.data cache": {"cache": False},
    "+ no prefetch": {"prefetch": 0},
    "+ prefetch 2": {"prefetch": 2},
    "+ shuffle buffer 1024": {"shuffle_buffer": 1024},
}


def run_one(fields: dict, workers: int, tag: str) -> dict:
    fields = dict(fields, workers=workers)
    if fields.get("cpus") == "share":
        fields["cpus"] = round((os.cpu_count() or 1) / workers, 2)
    spec = make_spec(**fields, run_id=f"bench-{tag}-w{workers}-{int(time.time() * 1000) % 10**8}")
    try:
        info = up(spec, stats_interval=None)
    except OrchError as exc:
        return {"workers": workers, "error": exc.message}
    steps = (info.workers[0].get("steps_per_epoch") or 0) * spec.epochs
    return {"workers": workers, "run_id": spec.run_id, "train_seconds": info.train_seconds,
            "wall_seconds": info.wall_seconds, "overhead_seconds": info.wall_seconds - info.train_seconds,
            "test_accuracy": info.test_accuracy, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, nargs="+", default=[96])
    parser.add_argument("--only", nargs="*", help="run only settings whose name contains one of these")
    parser.add_argument("--tiny", action="store_true", help="synthetic data, 2 settings: for CI")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scaling.json")
    args = parser.parse_args()
    base = {"dataset": "mnist", "samples": args.samples, "epochs": args.epochs}
    settings = SETTINGS
    if args.tiny:
        base = {"dataset": "synthetic", "samples": 3000, "epochs": 1}
        settings = {k: SETTINGS[k] for k in ("naive (TF defaults, bridge)", "orch defaults (+ metrics read once per epoch)")}
    if args.only:
        settings = {k: v for k, v in settings.items() if any(o in k for o in args.only)}
    rows = []
    for batch in args.batch:
        for i, (name, fields) in enumerate(settings.items()):
            # Larger batches are reported with the learning rate scaled linearly from 96.
            extra = {"global_batch": batch, "learning_rate": 1e-3 * batch / 96}
            one = run_one({**base, **extra, **fields}, 1, f"s{i}b{batch}")
            many = run_one({**base, **extra, **fields}, args.workers, f"s{i}b{batch}")
            row = {"setting": name, "global_batch": batch, "fields": fields, "one": one, "many": many}
            if "error" not in one and "error" not in many:
                row["ratio"] = many["train_seconds"] / one["train_seconds"]
                row["sync_ms_per_step"] = (many["train_seconds"] - one["train_seconds"]) / many["steps"] * 1000
            rows.append(row)
            print(f"{name} (batch {batch}): " + (f"T(1) {one.get('train_seconds', 0):.2f} s, T({args.workers}) "
                  f"{many.get('train_seconds', 0):.2f} s, ratio {row.get('ratio', float('nan')):.2f}"),
                  file=sys.stderr, flush=True)
    report = {"machine": {"cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
                          "platform": platform.platform()},
              "workload": {**base, "workers": args.workers, "model": "mlp 784-25-15-10",
                           "train_samples": contract.split_sizes(base["samples"])[0]},
              "results": rows}
    if not args.tiny:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"| setting | global batch | T(1) s | T({args.workers}) s | T({args.workers})/T(1) | sync ms/step | "
          f"overhead s (1 / {args.workers}) | test acc (1 / {args.workers}) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        one, many = r["one"], r["many"]
        if "ratio" not in r:
            print(f"| {r['setting']} | {r['global_batch']} | failed: {one.get('error') or many.get('error')} |||||")
            continue
        print(f"| {r['setting']} | {r['global_batch']} | {one['train_seconds']:.2f} | {many['train_seconds']:.2f} | "
              f"{r['ratio']:.2f} | {r['sync_ms_per_step']:.1f} | {one['overhead_seconds']:.1f} / "
              f"{many['overhead_seconds']:.1f} | {one['test_accuracy']:.4f} / {many['test_accuracy']:.4f} |")


if __name__ == "__main__":
    main()
