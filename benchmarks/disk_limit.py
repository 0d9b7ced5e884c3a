"""How far past --disk-limit replicas get, writing at several speeds up to as fast as the disk takes it, and which
limits the kernel could enforce on this engine instead.

Usage: python benchmarks/disk_limit.py [--limit 200] [--speeds 10 50 200 0] [--repeats 3]

For each speed (MB/s per replica; 0 is as fast as the disk takes it) and each shape (one replica writing one file, and
two replicas writing a file after another), in rotated order, one `orch up --script` of writers under
`--disk-limit LIMIT` (MiB): the bytes left in the run's folders (allocated blocks), over the limit as a share of it,
how long from the first byte to the stop, and whether any container of the run is left. Before them it probes what
the kernel could bind instead of orch's guard: a size-limited tmpfs, `--storage-opt size`, project quotas on the runs'
file system and a loop-mounted file system. Writes benchmarks/results/disk_limit.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.analysis import machine  # noqa: E402
from orchestrator.frameworks.tensorflow import image_ref  # noqa: E402
from orchestrator.safetext import one_line  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WRITER = """\
import os, sys, time
speed = float(sys.argv[1]) * 1e6  # MB/s; 0: as fast as the disk takes it
many = sys.argv[2] == "many"  # file after file, or one file
block = os.urandom(1 << 20)
started, written, n = time.monotonic(), 0, 0
with open("started", "w") as f:
    f.write(repr(time.time()))
while True:
    name = f"junk-{n}.bin" if many else "junk.bin"
    with open(name, "ab") as out:
        for _ in range(8):
            out.write(block)
            written += len(block)
            if speed:
                ahead = written / speed - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    n += 1
"""
SHAPES = {"one file": 1, "file after file": 2}  # shape: replicas


def probe_kernel_limits() -> list[dict]:
    """What this engine and host offer to bind a replica's writes in the kernel, each tried."""
    base = "orch-base:bookworm"
    found = []
    tmpfs = subprocess.run(["docker", "run", "--rm", "--user", "1000:1000", "--read-only", "--tmpfs",
                            "/out:size=50m,uid=1000,gid=1000", base, "sh", "-c",
                            "dd if=/dev/zero of=/out/x bs=1M count=100 2>/dev/null; du -m /out/x"],
                           capture_output=True, text=True, timeout=120)
    found.append({"limit": "a size-limited tmpfs (--tmpfs /out:size=50m)", "works": tmpfs.returncode == 0,
                  "seen": one_line(f"100 MiB written, {tmpfs.stdout.split()[0] if tmpfs.stdout.split() else '?'} "
                                   "MiB kept"),
                  "cost": "its bytes are the replica's memory, and a tmpfs goes with its container: orch could not "
                          "read the replica's records as they are written, nor keep its files after it ends"})
    opt = subprocess.run(["docker", "run", "--rm", "--storage-opt", "size=100M", base, "true"], capture_output=True,
                         text=True, timeout=120)
    found.append({"limit": "--storage-opt size=100M", "works": opt.returncode == 0,
                  "seen": one_line((opt.stderr or opt.stdout).strip()[:160]),
                  "cost": "needs overlay2 on XFS with project quotas"})
    options = ""
    runs = ROOT
    with open("/proc/self/mounts") as mounts:
        best = ""
        for line in mounts:
            fields = line.split()
            if len(fields) > 3 and str(runs).startswith(fields[1]) and len(fields[1]) >= len(best):
                best, options = fields[1], f"{fields[2]} ({fields[3]})"
    found.append({"limit": "a project quota on the runs' file system", "works": "prjquota" in options,
                  "seen": one_line(f"the runs' file system: {options}"),
                  "cost": "needs the prjquota mount option and root to set each quota"})
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "disk.img"
        image.write_bytes(b"")
        os.truncate(image, 64 << 20)
        loop = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
        if loop.returncode == 0:
            subprocess.run(["losetup", "--detach", loop.stdout.strip()], capture_output=True)
        found.append({"limit": "a loop-mounted file system per replica", "works": loop.returncode == 0,
                      "seen": one_line(f"losetup as uid {os.getuid()}: "
                                       + ("a loop device" if loop.returncode == 0 else loop.stderr.strip()[:120])),
                      "cost": "needs root on the host to attach and mount it, and to read what the replica wrote"})
    return found


def one_run(limit: int, speed: float, shape: str, run_id: str, env: dict, folder: Path) -> dict:
    """One run of writers; what they left and how fast they were stopped."""
    workers = SHAPES[shape]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "up", "--script", str(folder / "writer.py"),
                           "--workers", str(workers), "--disk-limit", f"{limit}M", "--run-id", run_id, "--quiet",
                           "--", str(speed), "one" if shape == "one file" else "many"],
                          env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    wall = time.monotonic() - started
    run = Path(env["ORCH_RUNS_DIR"]) / run_id
    written = sum(p.stat().st_blocks * 512 for p in run.glob("worker-*/junk*.bin"))
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=orch.run={run_id}"], capture_output=True,
                          text=True).stdout.split()
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if "--disk-limit" not in last:  # the writers failed on their own: nothing was measured
        raise SystemExit(f"disk_limit.py: run {run_id} did not end at the disk limit: {one_line(proc.stderr[-600:])}")
    return {"speed_mb_s": speed, "shape": shape, "replicas": workers, "exit_code": proc.returncode,
            "written_mib": written / 2**20, "over_share": max(written - (limit << 20), 0) / (limit << 20),
            "wall_seconds": wall, "containers_left": len(left), "said": one_line(last[-240:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=200, help="--disk-limit, MiB")
    parser.add_argument("--speeds", type=float, nargs="+", default=[10, 50, 200, 0],
                        help="MB/s per replica; 0: as fast as the disk takes it")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "disk_limit.json")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "orchestrator", "build"], cwd=ROOT, check=True, capture_output=True)
    probes = probe_kernel_limits()
    for p in probes:
        print(f"disk_limit.py: {p['limit']}: {'works' if p['works'] else 'not here'} ({p['seen']})", file=sys.stderr)
    cells = [(speed, shape) for speed in args.speeds for shape in SHAPES]
    runs = []
    with tempfile.TemporaryDirectory(prefix="orch-disk-") as tmp:
        folder = Path(tmp) / "writer"
        folder.mkdir()
        (folder / "writer.py").write_text(WRITER)
        env = dict(os.environ, ORCH_RUNS_DIR=f"{tmp}/runs", ORCH_RESULTS_DIR=f"{tmp}/results")
        for repeat in range(args.repeats):
            for i in range(len(cells)):
                speed, shape = cells[(i + repeat) % len(cells)]
                run_id = f"disk-{int(speed)}-{SHAPES[shape]}-r{repeat}-{os.getpid()}"
                row = one_run(args.limit, speed, shape, run_id, env, folder)
                runs.append({**row, "repeat": repeat})
                print(f"disk_limit.py: {speed:g} MB/s, {shape}: {row['written_mib']:.0f} MiB left "
                      f"({100 * row['over_share']:.0f}% over), {row['containers_left']} containers left",
                      file=sys.stderr)
    rows = []
    for speed, shape in cells:
        mine = [r for r in runs if r["speed_mb_s"] == speed and r["shape"] == shape]
        rows.append({"speed_mb_s": speed, "shape": shape, "replicas": SHAPES[shape],
                     "written_mib": [r["written_mib"] for r in mine], "over_share": [r["over_share"] for r in mine],
                     "wall_seconds": [r["wall_seconds"] for r in mine],
                     "containers_left": max(r["containers_left"] for r in mine),
                     "exit_codes": sorted({r["exit_code"] for r in mine})})
    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine.identity(),
              "limit_mib": args.limit, "repeats": args.repeats, "image": image_ref("single"), "probes": probes,
              "rows": rows, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    lines = [f"# --disk-limit {args.limit} MiB against writers", "", "| MB/s per replica | shape | MiB left "
             "(median, max) | over the limit (max) | containers left |", "| ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        speed = "full" if not r["speed_mb_s"] else f"{r['speed_mb_s']:g}"
        lines.append(f"| {speed} | {r['shape']} | {statistics.median(r['written_mib']):.0f}, {max(r['written_mib']):.0f} | "
                     f"{100 * max(r['over_share']):.0f}% | {r['containers_left']} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"disk_limit.py: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
