"""How an MPI rank waits for the all-reduce, when ranks share cores: the levers tried, measured side by side.

Usage: python benchmarks/investigations/mpi_wait.py [--workers 3 8] [--repeats 2]

With more ranks than cores, a rank that reaches the all-reduce first waits while a rank on its core still
computes. MPICH waits by polling, which holds the core its neighbour needs. Each way of waiting
(probes/mpi_wait.py) runs orch's own MPI trainer as a `--script` job on seed 000's workload (the MLP,
60,000 MNIST images drawn, global batch 96, 5 epochs), every way once per repeat, back to back. Prints a Markdown
table of the slowest worker's train seconds (median and range); writes
benchmarks/investigations/results/mpi_wait.json.
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.jobspec import make_spec  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.run.start import up  # noqa: E402

PROBE = HERE / "probes" / "mpi_wait.py"
WORKLOAD = {"dataset": "mnist", "samples": 60_000, "epochs": 5, "global_batch": 96, "model": "mlp"}
WAYS = {
    "block": "the all-reduce op in the graph: a blocking MPI_Allreduce, polled by MPICH (orch's)",
    "numpy": "out of the graph (tf.numpy_function) to mpi4py's blocking Allreduce (orch's before the op)",
    "sleep:50": "out of the graph, Iallreduce tested every 50 µs with a sleep between",
    "yield": "out of the graph, Iallreduce tested with sched_yield between",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE=1,MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT=64":
        "the op, with MPICH's progress throttle: usleep(1) after 64 idle polls",
    "MPIR_CVAR_POSIX_POLL_FREQUENCY=1": "the op, with MPICH yielding the core at every poll of shared memory",
}


def _interrupted(_signum, _frame) -> None:
    raise KeyboardInterrupt  # orch's runner stops and removes the run's containers, then re-raises


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)  # a killed benchmark leaves no containers behind
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", nargs="+", type=int, default=[3, 8])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    measured: dict[str, dict[int, list[float]]] = {way: {n: [] for n in args.workers} for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="orch-mpi-wait-") as tmp:
        paths = Paths(runs=Path(tmp), cache=default_paths().cache)
        for r in range(args.repeats):
            for n in args.workers:
                for way in WAYS:
                    spec = make_spec(framework="mpi", workers=n, script=str(PROBE), script_args=(way,), **WORKLOAD,
                                     run_id=f"wait-{int(time.time() * 1000) % 10**10}-{n}")
                    info = up(spec, paths=paths, stats_interval=None)
                    if info.state != "succeeded":
                        raise SystemExit(f"{way} with {n} ranks {info.state}: {info.error}")
                    measured[way][n].append(info.train_seconds)
                    print(f"repeat {r + 1}: {n} ranks, {way}: {info.train_seconds:.2f} s", file=sys.stderr, flush=True)
    lines = [f"`python benchmarks/investigations/mpi_wait.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{args.repeats} repeats; train seconds, median (range):", "",
             "| how a rank waits | " + " | ".join(f"{n} ranks" for n in args.workers) + " |",
             "| --- |" + " ---: |" * len(args.workers)]
    for way, what in WAYS.items():
        cells = [f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" for v in measured[way].values()]
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    (HERE / "results" / "mpi_wait.json").write_text(
        json.dumps({"workload": WORKLOAD, "ways": WAYS, "train_seconds": measured}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
