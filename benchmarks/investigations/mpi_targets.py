"""Issue 14's targets in one run: N containers against one with MPI (orch's fastest framework) and with
MultiWorkerMirroredStrategy, the MPI all-reduce between containers against bare host processes, and where a
MultiWorkerMirroredStrategy run's time goes beyond its all-reduces.

Usage: python benchmarks/investigations/mpi_targets.py [--repeats 3]
       python benchmarks/investigations/mpi_targets.py --tiny     (tiny data, one repeat: checks that it runs)

Seed 000's workload: the MLP, 60,000 MNIST images drawn (38,400 to train), 5 epochs, global batch 96. Every
training run goes through orch's Python API exactly as `orch up` would run it, one at a time, the cells of a
repeat side by side (1, 2, 3 containers of one framework, then the other), so a drift of this machine's speed
hits them alike. Figures are medians over repeats with their range. Writes benchmarks/investigations/results/mpi-targets.json
and mpi-targets.md (not with --tiny).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import bench  # noqa: E402
from orchestrator.bench import report as bench_report  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.run.rundir import RunDir  # noqa: E402
from orchestrator.run.start import up  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402

RESULTS = HERE / "results"
WORKLOAD = {"dataset": "mnist", "samples": 60_000, "epochs": 5, "global_batch": 96, "model": "mlp"}
TINY = {"dataset": "synthetic", "samples": 3_000, "epochs": 2, "global_batch": 96, "model": "mlp"}
FRAMEWORKS = {"mpi": {"framework": "mpi"}, "mwms": {"strategy": "auto"}}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def train(fields: dict, workers: int, runs: Path) -> dict:
    """One run; its slowest worker's train time, test accuracies, and worker 0's epoch seconds."""
    spec = make_spec(**fields, workers=workers, run_id=f"t-{int(time.time() * 1000) % 10**10}-{workers}")
    paths = Paths(runs=runs, cache=default_paths().cache)
    info = up(spec, paths=paths, stats_interval=None)
    events = RunDir.of(paths, spec.run_id).events([("worker", 0)]).read()
    epochs = [e.model_dump() for _key, e in events if getattr(e, "event", "") == "epoch"]
    steps = info.workers[0].get("steps_per_epoch") or 0
    return {"train_seconds": info.train_seconds, "accuracies": [w["test_accuracy"] for w in info.workers],
            "epoch_seconds": epochs, "steps_per_epoch": steps, "wall_seconds": info.wall_seconds}


def median_range(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    workload = TINY if args.tiny else WORKLOAD
    repeats = 1 if args.tiny else args.repeats
    counts = {"mpi": (1, 2, 3), "mwms": (1, 3)}
    measured: dict[str, dict[int, list[dict]]] = {f: {n: [] for n in counts[f]} for f in FRAMEWORKS}
    with tempfile.TemporaryDirectory(prefix="orch-targets-") as tmp:
        for r in range(repeats):
            for name, extra in FRAMEWORKS.items():
                for n in counts[name]:
                    got = train({**workload, **extra}, n, Path(tmp))
                    measured[name][n].append(got)
                    log(f"repeat {r + 1}/{repeats}: {name}, {n} container(s): {got['train_seconds']:.2f} s, "
                        f"accuracy {got['accuracies'][0]:.4f}")
    sizes = [4 << 10] if args.tiny else [80 << 10]
    rows = bench.run(sizes, [3], ["mpi-shm", "tf-ring-bridge"], 30 if args.tiny else 500, 5 if args.tiny else 50,
                     say=log)
    allreduce = {(row.transport, row.placement): row for row in rows}

    def ratio(name: str, n: int) -> dict:
        pairs = zip(measured[name][n], measured[name][1])
        return median_range([a["train_seconds"] / b["train_seconds"] for a, b in pairs])

    def accuracy_gap(name: str) -> float:
        base = measured[name][1][0]["accuracies"][0]
        return max(abs(a - base) * 100 for n in counts[name] for run in measured[name][n] for a in run["accuracies"])

    mpi_c, mpi_h = allreduce[("mpi-shm", "containers")], allreduce[("mpi-host", "host")]
    targets = [
        ("T(3)/T(1), MPI (orch's fastest)", "seed 000's workload", "<= 1.5", ratio("mpi", 3)),
        ("T(2)/T(1), MPI", "same workload", "<= 1.2", ratio("mpi", 2)),
        ("T(3)/T(1), MultiWorkerMirroredStrategy", "same workload", "<= 4.0", ratio("mwms", 3)),
        ("MPI all-reduce, containers / host", f"3 ranks, {bench_report.human_size(sizes[0])}, p50", "<= 1.5",
         {"median": mpi_c.p50_us / mpi_h.p50_us, "min": None, "max": None,
          "detail": f"{mpi_c.p50_us:.0f} µs / {mpi_h.p50_us:.0f} µs"}),
        ("test accuracy, largest gap to 1 container", "every framework, same workload", "<= 0.5 points",
         {"median": max(accuracy_gap(f) for f in FRAMEWORKS), "min": None, "max": None}),
    ]
    # Where a MultiWorkerMirroredStrategy run's time goes: the first epoch (tracing, connecting the collectives)
    # over a steady one, and in each steady epoch its validation, the metrics read across workers, the
    # checkpoint and what is left for the training steps, beside one all-reduce alone.
    mwms3 = measured["mwms"][3]
    steps = mwms3[0]["steps_per_epoch"] or 1

    def part(name: str, epochs: slice) -> float:
        return statistics.median(statistics.median((e.get(name) or 0.0) for e in r["epoch_seconds"][epochs])
                                 for r in mwms3)

    steady = slice(1, None) if len(mwms3[0]["epoch_seconds"]) > 1 else slice(0, None)
    epoch = part("seconds", steady)
    other = {name: part(f"{name}_seconds", steady) for name in ("validation", "reduction", "checkpoint")}
    tf_ring = allreduce[("tf-ring-bridge", "containers")].p50_us
    breakdown = {"first_epoch_seconds": part("seconds", slice(0, 1)), "steady_epoch_seconds": epoch,
                 **{f"{k}_seconds": v for k, v in other.items()}, "steps_per_epoch": steps,
                 "ms_per_step": (epoch - sum(other.values())) / steps * 1000, "allreduce_ms": tf_ring / 1000,
                 "train_seconds": statistics.median(r["train_seconds"] for r in mwms3)}
    report = {"machine": f"{platform.machine()}, {platform.node() and 'this host'}", "workload": workload,
              "repeats": repeats, "measured": measured, "targets": targets, "mwms_breakdown": breakdown,
              "allreduce": bench.to_json(rows), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    lines = ["# Issue 14's targets: N containers close to the cost of one", "",
             f"`python benchmarks/investigations/mpi_targets.py`, {report['when']}, 2 cores. Workload: "
             f"{json.dumps(workload)}; {repeats} repeats, medians with the range.", "",
             "| figure | condition | target | measured |", "| --- | --- | --- | --- |"]
    for figure, condition, target, value in targets:
        shown = f"{value['median']:.2f}"
        if value.get("min") is not None:
            shown += f" ({value['min']:.2f}–{value['max']:.2f})"
        if value.get("detail"):
            shown += f" ({value['detail']})"
        lines.append(f"| {figure} | {condition} | {target} | {shown} |")
    lines += ["", "Train seconds (median of the slowest worker's):", "",
              "| framework | containers | train s | test accuracy |", "| --- | --- | --- | --- |"]
    for name in FRAMEWORKS:
        for n in counts[name]:
            runs = measured[name][n]
            times = median_range([x["train_seconds"] for x in runs])
            lines.append(f"| {name} | {n} | {times['median']:.2f} ({times['min']:.2f}–{times['max']:.2f}) | "
                         f"{runs[0]['accuracies'][0]:.4f} |")
    b = breakdown
    lines += ["", f"Where a 3-container MultiWorkerMirroredStrategy run's time goes (medians; train "
              f"{b['train_seconds']:.2f} s):", "",
              f"- the first epoch (tracing the step, connecting the collectives, then training): "
              f"{b['first_epoch_seconds']:.2f} s, against {b['steady_epoch_seconds']:.2f} s for each later one",
              f"- of a later epoch: validation {b['validation_seconds']:.2f} s, reading the metrics across workers "
              f"{b['reduction_seconds']:.3f} s, the checkpoint {b['checkpoint_seconds']:.3f} s, and "
              f"{b['steps_per_epoch']} training steps of {b['ms_per_step']:.2f} ms each",
              f"- one all-reduce of the gradients alone (tf-ring-bridge, p50): {b['allreduce_ms']:.2f} ms",
              "", bench_report.markdown(rows, "One all-reduce, measured in the same run:")]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.tiny:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "mpi-targets.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (RESULTS / "mpi-targets.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
