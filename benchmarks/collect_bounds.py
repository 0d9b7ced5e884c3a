"""What a hostile replica's records cost `orch collect`: its time and peak memory as the replica writes more.

Usage: python benchmarks/collect_bounds.py [--sizes 0 4 400] [--repeats 3] [--workers 3]

For each size S (MiB) it makes a run folder by hand, as the runner leaves one: a job of --workers workers and 5
epochs, every worker with its events, result, predictions and stats, and the last worker's events.jsonl holding S
MiB of distinct epoch records (epochs 1, 2, 3, ... each once: nothing a summary could fold away by epoch). Size 0
is the run with no hostile worker. It then times `python -m orchestrator collect` on that run as a whole process,
--repeats times, and reads the process's own peak resident memory and CPU from the kernel (wait4's rusage), so the
figures hold every import, the reading, the plots and the reports. No Docker is needed.

Results: a Markdown table on stdout, benchmarks/results/collect_bounds.json and collect_bounds.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from orchestrator import contract  # noqa: E402
from orchestrator.analysis import machine  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402
from orchestrator.run.records import MAX_EPOCHS  # noqa: E402
from orchestrator.run.rundir import EVENTS_LIMIT, RunDir, RunInfo, RunState, size_text  # noqa: E402
from orchestrator.run.stats import STATS_FIELDS  # noqa: E402
from orchestrator.safeio import dumps  # noqa: E402

EPOCHS = 5
RUN_ID = "collect-bounds"
V = contract.CONTRACT_VERSION


def _event(worker: int, kind: str, when: float, **fields) -> str:
    return json.dumps({"v": V, "event": kind, "worker": worker, "time": when, **fields})


def _make_run(runs: Path, workers: int, hostile_mib: int) -> RunDir:
    """The run folder: ``workers`` honest workers, the last one also writing ``hostile_mib`` MiB of epoch records."""
    spec = make_spec(workers=workers, dataset="synthetic", samples=6000, epochs=EPOCHS, run_id=RUN_ID)
    run = RunDir(runs / RUN_ID)
    for key in spec.replica_keys():
        folder = run.replica_dir(key)
        folder.mkdir(parents=True)
        i = key[1]
        lines = [_event(i, "start", 100.0, stage="training")]
        lines += [_event(i, "epoch", 100.0 + 10 * n, epoch=n, epochs=EPOCHS, loss=1.0 / n, accuracy=0.5 + n / 100,
                         seconds=10.0, samples=1900) for n in range(1, EPOCHS + 1)]
        lines.append(_event(i, "done", 151.0, train_seconds=50.0 + i, test_accuracy=0.8))
        (folder / contract.EVENTS_FILE).write_text("\n".join(lines) + "\n")
        (folder / contract.RESULT_FILE).write_text(dumps({
            "v": V, "worker": i, "replicas": workers, "global_batch": 96, "steps_per_epoch": 40,
            "samples_per_epoch": [1900] * EPOCHS, "train_seconds": 50.0 + i, "test_accuracy": 0.8}))
        np.savez(run.predictions(key), x=np.zeros((25, 784), dtype=np.uint8), y_true=np.arange(25) % 10,
                 y_pred=np.arange(25) % 10)
    if hostile_mib:
        _flood(run.replica_dir(spec.replica_keys()[-1]) / contract.EVENTS_FILE, workers - 1, hostile_mib << 20)
    with open(run.path / "stats.csv", "w") as f:
        f.write(",".join(STATS_FIELDS) + "\n")
        for t in range(60):
            for i in range(workers):
                row = [100 + t, i, f"{RUN_ID}-worker-{i}", 90, 10**8, 2**31, 10**6 * t, 2 * 10**6 * t, 0, 0, 9,
                       "worker", 2 * 10**8]
                f.write(",".join(map(str, row)) + "\n")
    run.write_record(RunInfo(run_id=RUN_ID, state=RunState.SUCCEEDED, spec=spec, started=99.0, wall_seconds=60.0,
                             workers=[{"worker": i, "exit_code": 0} for i in range(workers)]))
    return run


def _flood(path: Path, worker: int, size: int) -> None:
    """Append ``size`` bytes of valid epoch records to ``path``, each of another epoch (past the job's from the 6th
    on) and time, the epochs counting round again past the contract's largest."""
    template = ('{{"v": %d, "event": "epoch", "worker": %d, "time": {t:.3f}, "epoch": {n}, "loss": {loss:.6f}, '
                '"accuracy": 0.5, "seconds": 1.0, "samples": 1900}}\n') % (V, worker)
    written, n = 0, 0
    with open(path, "a") as f:
        while written < size:
            block = []
            for _ in range(10_000):
                n += 1
                block.append(template.format(t=200.0 + n * 1e-3, n=n % MAX_EPOCHS + 1, loss=1.0 / n))
            text = "".join(block)
            f.write(text)
            written += len(text)


def _collect_once(runs: Path, out: Path) -> dict:
    """One `orch collect` as its own process: wall seconds, CPU seconds and peak RSS from its rusage."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "ORCH_RUNS_DIR": str(runs), "PYTHONPATH": str(ROOT), "DOCKER_HOST": "unix:///nonexistent"}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "collect", RUN_ID, "--out", str(out)], env=env,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"orch collect failed ({proc.returncode}): {stderr.strip()[-500:]}")
    warning = next((line.split(": ", 2)[-1] for line in stderr.splitlines() if "dropped" in line or "limit" in line), "")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
            "warning": warning}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 4, 400], help="MiB the hostile worker writes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/collect_bounds.json")
    args = parser.parse_args()
    rows = []
    for mib in args.sizes:
        with tempfile.TemporaryDirectory(prefix="orch-collect-bounds-") as tmp:
            runs = Path(tmp) / "runs"
            _make_run(runs, args.workers, mib)
            size = (runs / RUN_ID / f"worker-{args.workers - 1}" / contract.EVENTS_FILE).stat().st_size
            times = [_collect_once(runs, Path(tmp) / "results") for _ in range(args.repeats)]
        wall, cpu, rss = ([t[k] for t in times] for k in ("wall_s", "cpu_s", "peak_rss_mb"))
        rows.append({"hostile_mib": mib, "events_bytes": size, "runs": args.repeats,
                     "wall_s_median": round(statistics.median(wall), 2), "wall_s_max": round(max(wall), 2),
                     "cpu_s_median": round(statistics.median(cpu), 2),
                     "peak_rss_mb_median": round(statistics.median(rss), 1), "peak_rss_mb_max": round(max(rss), 1),
                     "collect_says": times[0]["warning"]})
        print(f"{mib} MiB: {rows[-1]}", file=sys.stderr)
    table = ["| hostile worker's events | wall s (median) | wall s (max) | CPU s (median) | peak RSS MB (median) "
             "| peak RSS MB (max) | collect says |", "| ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    table += [f"| {r['hostile_mib']} MiB | {r['wall_s_median']:.2f} | {r['wall_s_max']:.2f} | {r['cpu_s_median']:.2f} "
              f"| {r['peak_rss_mb_median']:.0f} | {r['peak_rss_mb_max']:.0f} | {r['collect_says'] or '-'} |"
              for r in rows]
    print("\n".join(table))
    result = {"benchmark": "collect_bounds", "python": platform.python_version(), "machine": machine.identity(),
              "cores": os.cpu_count(), "workers": args.workers, "epochs": EPOCHS, "repeats": args.repeats,
              "events_limit": size_text(EVENTS_LIMIT), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(
        "# orch collect of a run with a hostile worker\n\n"
        f"`python benchmarks/collect_bounds.py --repeats {args.repeats}`: `orch collect` of a {args.workers}-worker, "
        f"{EPOCHS}-epoch run whose last worker wrote the given MiB of distinct epoch records, as a whole process "
        f"(wall and CPU seconds, peak resident memory from its rusage); orch reads at most "
        f"{size_text(EVENTS_LIMIT)} of a worker's events. {os.cpu_count()} cores, Python "
        f"{platform.python_version()}.\n\n" + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()
