"""The transport floor as measured, against the same all-reduce with its ranks pinned as a training run's are.

Usage: python benchmarks/investigations/pinned_transport.py [--transports tf-ring-bridge gloo mpi-shm] [--ranks 3]
                                                            [--repeats 2]

benchmarks/floor.py measures each framework's all-reduce as `orch bench allreduce` does: its ranks' processes
free to run on any core. A training run pins each rank (orch's pinning: with 3 ranks on 2 cores, two share
core 0). This times, side by side and in alternating order, the same harness and probe at the MLP's gradient
size both ways: the second arm's ranks pin themselves to the cores orch gives them (ORCH_CPUS) before they
import their framework, as the trainer's ranks are pinned. The difference, times a run's steps, is what the
pinning adds to the transport beyond its floor. Writes benchmarks/investigations/results/pinned_transport.json
and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import bench  # noqa: E402
from orchestrator.experiments.floor import parameters  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.run.start import up  # noqa: E402
from orchestrator.safeio import read_json_bounded  # noqa: E402

RESULTS = HERE / "results"
SIZE = 4 * parameters("mlp")  # the MLP's gradients, as floor.py's transport floor uses
# Run in place of the harness: pin this process (and so every thread it starts) to the cores orch gave the
# replica, with the trainer's own pin() (the images carry orch_trainer), then run the harness as its own main.
PINNED = '''import os, runpy, sys
from orch_trainer.worker import pin
pin(os.environ.get("ORCH_CPUS"))
sys.argv[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allreduce.py")
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def pinned_folder(framework: str, paths: Paths) -> Path:
    """A folder with the harness, the framework's probe and the pinning wrapper: the wrapper's path."""
    harness = bench.probe_script(framework, paths)
    folder = paths.cache / "bench-probe-pinned" / framework
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("allreduce.py", "probe.py"):
        (folder / name).write_bytes((harness.parent / name).read_bytes())
    (folder / "pinned.py").write_text(PINNED)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder / "pinned.py"


def measure(transport: bench.Transport, ranks: int, iterations: int, warmup: int, paths: Paths,
            pinned: bool) -> float:
    """The p50 in microseconds of ``transport``'s all-reduce of SIZE bytes on ``ranks`` ranks."""
    if not pinned:
        samples = bench.in_containers(transport, ranks, [SIZE], iterations, warmup, paths, lambda _l: None)[SIZE]
        return bench.summarize(samples, SIZE, ranks)[0]
    spec = bench.job_spec(transport, ranks, [SIZE], iterations, warmup, pinned_folder(transport.framework, paths))
    with tempfile.TemporaryDirectory(prefix="orch-pinned-") as runs:
        up(spec, paths=Paths(runs=Path(runs), cache=paths.cache, results=paths.results), stats_interval=None)
        raw = read_json_bounded(Path(runs) / spec.run_id / "worker-0" / "allreduce.json", bench.RESULT_LIMIT)
    return bench.summarize(bench.parse_measurement(raw, ranks, [SIZE])[SIZE], SIZE, ranks)[0]


def _interrupted(_signum, _frame) -> None:
    raise KeyboardInterrupt  # orch's runner removes the run's containers, then re-raises


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transports", nargs="+", default=["tf-ring-bridge", "gloo", "mpi-shm"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[3])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    paths = default_paths()
    known = {t.name: t for t in bench.known_transports()}
    rows = []
    for name in args.transports:
        for n in args.ranks:
            got: dict[str, list[float]] = {"free": [], "pinned": []}
            for r in range(args.repeats):
                for arm in (("free", "pinned") if r % 2 == 0 else ("pinned", "free")):
                    got[arm].append(measure(known[name], n, args.iterations, args.iterations // 10, paths,
                                            arm == "pinned"))
                    print(f"{name}, {n} ranks, {arm}, repeat {r + 1}: p50 {got[arm][-1]:.0f} µs", file=sys.stderr,
                          flush=True)
            rows.append({"transport": name, "ranks": n, **{arm: v for arm, v in got.items()},
                         "free_p50_us": statistics.median(got["free"]),
                         "pinned_p50_us": statistics.median(got["pinned"])})
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = ["# The transport floor, free and pinned", "",
             f"`python benchmarks/investigations/pinned_transport.py`, {when}, {os.cpu_count()} cores, "
             f"{args.repeats} repeats in alternating order, {args.iterations} all-reduces of {SIZE:,} bytes each "
             "(medians of the p50s; each repeat's p50 in brackets).", "",
             "| transport | ranks | p50 µs, ranks free (floor.py's) | p50 µs, ranks pinned as in training | "
             "pinned / free |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['transport']} | {r['ranks']} | {r['free_p50_us']:.0f} "
                     f"({', '.join(f'{v:.0f}' for v in r['free'])}) | {r['pinned_p50_us']:.0f} "
                     f"({', '.join(f'{v:.0f}' for v in r['pinned'])}) | "
                     f"{r['pinned_p50_us'] / r['free_p50_us']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pinned_transport.json").write_text(json.dumps({"when": when, "rows": rows}, indent=2) + "\n")
    (RESULTS / "pinned_transport.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
