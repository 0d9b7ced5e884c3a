"""The live tier with two test processes and with three, one after the other on the same images: wall time, the
cores the machine kept busy, and the outcome.

Usage: python benchmarks/investigations/test_processes.py [--processes 2 3] [--out FILE]

Each run is `pytest -m "docker or network" -n N --dist loadfile` in this checkout, as tools/test.sh runs the live
tier, with the images already built (run `orch build` for each framework first, so no run pays for a build the other
does not). The busy cores come from the machine's CPU times around the run: the whole machine's, so run it on a quiet one. With
two processes the live tier leaves part of the two cores idle (a test waiting on a timeout, a test holding the
engine alone); a third process can fill some of that, or slow every test by sharing the cores three ways.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"=+ (.*?) in ([0-9.]+)s")


def cpu() -> tuple[float, float]:
    """Busy and all CPU-seconds of the machine so far (psutil's reading of /proc/stat)."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq + t.steal
    return busy, busy + t.idle + t.iowait


def live_tier(processes: int, log: Path) -> dict:
    """One run of the live tier with ``processes`` test processes."""
    busy0, all0 = cpu()
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "docker or network", "-n", str(processes),
                               "--dist", "loadfile", "-p", "no:cacheprovider"], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    busy1, all1 = cpu()
    text = log.read_text(errors="replace")
    found = SUMMARY.findall(text)
    cores = os.cpu_count() or 1
    return {"processes": processes, "seconds": round(seconds, 1), "exit_code": proc.returncode,
            "pytest": found[-1][0] if found else "", "cores": cores,
            "cores_busy": round(cores * (busy1 - busy0) / max(all1 - all0, 1), 2),
            "cpu_seconds": round(busy1 - busy0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "test_processes.json")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    runs = []
    for n in args.processes:
        log = Path(tempfile.gettempdir()) / f"orch-test-processes-{n}.log"
        print(f"test_processes.py: the live tier with {n} processes (output in {log})", file=sys.stderr,
              flush=True)
        runs.append(live_tier(n, log))
        print(f"test_processes.py: {runs[-1]}", file=sys.stderr, flush=True)
    args.out.write_text(json.dumps({"commit": head, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "runs": runs}, indent=1) + "\n")
    print("| processes | seconds | cores busy | CPU-seconds | pytest |\n| ---: | ---: | ---: | ---: | --- |")
    for r in runs:
        print(f"| {r['processes']} | {r['seconds']:.0f} | {r['cores_busy']:.2f} of {r['cores']} | {r['cpu_seconds']} "
              f"| {r['pytest']} |")
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
