"""What scaling MNIST's pixels costs N workers that start at once, the old way against orch's, side by side.

Usage: python benchmarks/investigations/data_scaling.py [--workers 3] [--repeats 5]

Every worker draws the same 60,000 images and scales them to float32 in [0, 1] before training. The old way,
``x[pick].astype(np.float32) / 255.0``, makes two arrays of 4 bytes a pixel (188 MB each); orch's trainer then
scaled the first in place (``x /= np.float32(255.0)``), which gives the same bits. (It has since kept the images as
bytes and scales each batch as it takes it: start_ab.py measured that.) For each of orch's images (TensorFlow's
and, when present, PyTorch's), N containers run at once, locked down as orch runs them (read-only
root, a tmpfs /tmp, 2 GiB, no network), each importing its framework, then loading orch's prepared MNIST and
scaling it one way; the ways alternate, repeat after repeat. Prints each way's CPU seconds per container and
the wall time of the slowest, as medians, and writes benchmarks/investigations/results/data_scaling.json and .md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import contract  # noqa: E402
from orchestrator.data.prepare import prepare  # noqa: E402
from orchestrator.paths import default_paths  # noqa: E402
from orchestrator.safetext import one_line  # noqa: E402

RESULTS = HERE / "results"
IMAGES = {"tensorflow": "orch-trainer:0.1.0-multi", "torch": "orch-torch:0.1.0"}
# One worker's load and scaling, as orch_trainer.data does it, timed in the container's own process after its
# framework's import, as in the trainer (the import changes what large allocations cost).
PROBE = """
import importlib, json, sys, time
importlib.import_module(sys.argv[2])  # as in the trainer: the framework first, then the data
import numpy as np
way = sys.argv[1]
wall, cpu = time.perf_counter(), time.process_time()
with np.load("/orch/data/FILE") as f:
    x_all = f["x"]
pick = np.random.default_rng(0).permutation(len(x_all))[:60000]
if way == "old":
    x = x_all[pick].astype(np.float32) / 255.0
else:
    x = x_all[pick].astype(np.float32)
    x /= np.float32(255.0)
bits = int(x.view(np.uint32)[::997].sum())
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "bits": bits}))
"""
WAYS = ("old", "in place")


def _present(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def _container(image: str, framework: str, data: Path, way: str) -> dict:
    argv = ["docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--memory", "2g", "--network", "none",
            "--cap-drop", "ALL",
            "-v", f"{data}:/orch/data:ro", "--entrypoint", "python3", image, "-c",
            PROBE.replace("FILE", contract.MNIST_FILE), "old" if way == "old" else "inplace", framework]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"data_scaling: a container of {image} failed: {one_line(done.stderr.strip()[-300:])}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _round(image: str, framework: str, data: Path, way: str, workers: int) -> dict:
    with ThreadPoolExecutor(workers) as pool:
        runs = list(pool.map(lambda _i: _container(image, framework, data, way), range(workers)))
    return {"cpu": statistics.mean(r["cpu"] for r in runs), "wall": max(r["wall"] for r in runs),
            "bits": runs[0]["bits"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = prepare(default_paths().data, "mnist", say=lambda line: print(line, file=sys.stderr))
    report = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "workers": args.workers,
              "repeats": args.repeats, "frameworks": {}}
    for name, image in IMAGES.items():
        if not _present(image):
            print(f"data_scaling: {image} is absent, {name} skipped (`orch build --framework {name}` adds it)",
                  file=sys.stderr)
            continue
        rounds: dict[str, list[dict]] = {way: [] for way in WAYS}
        for repeat in range(args.repeats):
            for way in (WAYS if repeat % 2 == 0 else WAYS[::-1]):
                rounds[way].append(_round(image, name, data, way, args.workers))
        bits = {r["bits"] for way in WAYS for r in rounds[way]}
        if len(bits) != 1:
            raise SystemExit(f"data_scaling: the two ways gave different pixels on {image}")
        report["frameworks"][name] = {
            "image": image,
            **{way: {"cpu": statistics.median(r["cpu"] for r in rounds[way]),
                     "wall": statistics.median(r["wall"] for r in rounds[way]),
                     "cpu_range": [min(r["cpu"] for r in rounds[way]), max(r["cpu"] for r in rounds[way])]}
               for way in WAYS}}
    lines = ["# Scaling MNIST's pixels in N workers that start at once", "",
             f"`python benchmarks/investigations/data_scaling.py`, {report['when']}, {args.workers} containers "
             "at once, "
             f"{args.repeats} repeats, the ways alternating (medians; CPU range in brackets). Each container imports "
             "its framework, then loads orch's prepared MNIST and scales 60,000 images to float32; both ways give the "
             "same bits.", "",
             "| image | old: CPU s per container | old: slowest wall s | in place: CPU s per container | "
             "in place: slowest wall s | CPU saved per container |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in report["frameworks"].items():
        old, new = r["old"], r["in place"]
        lines.append(f"| {name} ({r['image']}) | {old['cpu']:.2f} ({old['cpu_range'][0]:.2f}–"
                     f"{old['cpu_range'][1]:.2f}) | {old['wall']:.2f} | {new['cpu']:.2f} ({new['cpu_range'][0]:.2f}–"
                     f"{new['cpu_range'][1]:.2f})"
                     f" | {new['wall']:.2f} | {old['cpu'] - new['cpu']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "data_scaling.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "data_scaling.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
