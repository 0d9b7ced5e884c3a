"""Measure the disk watch's own cost: one scan of a run's folders, by how many files the replicas left.

Usage: python benchmarks/disk_watch.py [--files 10 1000 10000 100000] [--repeats 5]

For each count it writes that many 4 KiB files, spread over folders of 1,000, into a temporary run's two
replica folders, then times ``orchestrator.run.disk.measure`` (the runner calls it once every
``disk.EVERY`` seconds while a run is watched, less often where a scan is slow) and reports the median
seconds per scan, the interval the runner then keeps, and the share of one core the watch takes. Writes benchmarks/results/disk-watch.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.run import disk  # noqa: E402


def fill(run: Path, files: int) -> None:
    for i in range(files):
        folder = run / f"worker-{i % 2}" / f"d{i // 1000}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}").write_bytes(b"x" * 4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[10, 1_000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for files in args.files:
        with tempfile.TemporaryDirectory(prefix="orch-disk-bench-") as tmp:
            run = Path(tmp)
            (run / "worker-0").mkdir()
            (run / "worker-1").mkdir()
            (run / "shared").mkdir()
            fill(run, files)
            folders = ["worker-0", "worker-1", "shared"]
            disk.measure(run, folders)  # warm the dentry cache, as every scan after the first finds it
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                use = disk.measure(run, folders)
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            every = disk.interval(median)
            rows.append({"files": files, "entries": use.entries, "seconds_per_scan": median, "interval_s": every,
                         "core_share": median / every})
            print(f"{files:>8} files: {median * 1000:8.2f} ms per scan, one every {every:5.2f} s: "
                  f"{100 * median / every:5.2f} % of a core", flush=True)
    out = ROOT / "benchmarks" / "results"
    (out / "disk-watch.json").write_text(json.dumps({"interval_s": disk.EVERY, "max_entries": disk.MAX_ENTRIES,
                                                     "share": disk.SHARE, "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    lines = ["# The disk watch's cost", "", f"One scan every {disk.EVERY:g} s, or every scan time / {disk.SHARE:g} "
             f"where that is longer; a scan stops at {disk.MAX_ENTRIES:,} entries. "
             "`python benchmarks/disk_watch.py`.", "",
             "| files left by the replicas | ms per scan | seconds between scans | share of one core |",
             "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['files']:,} | {r['seconds_per_scan'] * 1000:.2f} | {r['interval_s']:.2f} | "
              f"{100 * r['core_share']:.2f} % |" for r in rows]
    (out / "disk-watch.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
