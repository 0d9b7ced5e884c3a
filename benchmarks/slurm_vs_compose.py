"""What a run costs beyond training on Slurm against Compose: the same 3-worker job, side by side, in turn.

On the two-node cluster of benchmarks/slurm_cluster.py (this machine's cores shared by both nodes), each repeat runs
the job on Compose, on Slurm across both nodes, and on Slurm on one node, in turn, so that a drift of the machine
hits all three alike. Each run's wall time (`orch up`'s, from the plan to the record) and its train time (the
slowest worker's) are orch's own figures; wall − train is what the backend and orch add: starting the replicas,
the rendezvous, the test pass, the results and the teardown. The image's folder for Charliecloud is made before
the first timed run (once per image build: the unpack is timed on its own).

    python benchmarks/slurm_vs_compose.py [--repeats 5] [--samples 60000] [--epochs 1]

Writes benchmarks/results/slurm.json and slurm.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_cluster import Cluster  # noqa: E402
from wall_train import summary, up, write  # noqa: E402

SETUPS = {  # name -> the flags of `orch up` beyond the job's
    "compose": ["--backend", "compose"],
    "slurm, 2 nodes": ["--backend", "slurm", "--slurm-nodes", "2"],
    "slurm, 1 node": ["--backend", "slurm", "--slurm-partition", "head"],
}


def unpack_seconds(cache: Path) -> float:
    """Seconds to make Charliecloud's folder of TensorFlow's image from scratch, into a cache of its own."""
    sys.path.insert(0, str(ROOT))
    from orchestrator.backends.slurm import images
    from orchestrator.docker.engine import Engine
    from orchestrator.frameworks import get

    image = get("tensorflow").image_refs()[-1]
    started = time.monotonic()
    images.ensure(Engine(), image, "charliecloud", cache, [], lambda _line: None)
    return time.monotonic() - started


def markdown(report: dict) -> str:
    w = report["workload"]
    lines = ["# wall − train on Slurm against Compose", "",
             f"`python benchmarks/slurm_vs_compose.py`, {report['when']}, {report['repeats']} repeats in turn, "
             f"{w['workers']} workers, {w['samples']} samples, {w['epochs']} epoch(s); medians, range in brackets.",
             "", "| setup | wall s | train s | wall − train s | test accuracy |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in report["setups"].items():
        lines.append(f"| {name} | {r['wall_p50']:.1f} | {r['train_p50']:.1f} | {r['overhead_p50']:.1f} "
                     f"({r['overhead_min']:.1f}–{r['overhead_max']:.1f}) | {r['accuracy']:.4f} |")
    lines += ["", f"Charliecloud's folder of the image, made once per build: {report['stage_seconds']:.1f} s.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    why = Cluster.available()
    if why:
        print(f"slurm_vs_compose: {why}", file=sys.stderr)
        return 2
    job = ["--workers", str(args.workers), "--samples", str(args.samples), "--epochs", str(args.epochs)]
    runs: dict[str, list[dict]] = {name: [] for name in SETUPS}
    with tempfile.TemporaryDirectory(prefix="orch-bench-slurm-") as tmp, Cluster(nodes=2) as cluster:
        env = {**os.environ, **cluster.env, "ORCH_RUNS_DIR": str(Path(tmp) / "runs")}
        stage = unpack_seconds(Path(tmp) / "cache")
        up(env, "stage", ["--backend", "slurm", "--workers", "1", "--samples", "1000", "--epochs", "1"])  # warm
        for repeat in range(args.repeats):
            for i, (name, flags) in enumerate(SETUPS.items()):
                runs[name].append(up(env, f"r{repeat}-{i}", [*flags, *job]))
                print(f"repeat {repeat + 1}, {name}: {runs[name][-1]}", file=sys.stderr)
    report = {"workload": {"workers": args.workers, "samples": args.samples, "epochs": args.epochs},
              "repeats": args.repeats, "stage_seconds": stage, "cores": os.cpu_count(),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs, "setups": {}}
    for name, rows in runs.items():
        report["setups"][name] = summary(rows)
    write("slurm", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
