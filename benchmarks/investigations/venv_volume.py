"""A start-up lever, measured: the image's Python environment read from a volume instead of the image's layers.

Usage: python benchmarks/investigations/venv_volume.py [--frameworks mpi mwms torch] [--workers 3] [--repeats 3]

For each framework, in alternating order, one run of floor.py's workload (the MLP, 60,000 MNIST images, 5 epochs,
global batch 96) with the replicas' /opt/venv mounted from the volume orch makes (images/venv_volume.py), and one
with it read from the image's layers as before; then the start floor both ways (the containers only import the
framework). The stages come from the runs' own events, as floor.py splits them. Also times the copy itself: the
volume removed and made again. Prints the medians and writes
benchmarks/investigations/results/venv_volume.json and .md.
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
sys.path.insert(0, str(ROOT / "benchmarks"))  # floor.py, the suite's, which puts ROOT on the path too

import floor  # noqa: E402 - its run(), split() and start_floor()

from orchestrator import frameworks  # noqa: E402
from orchestrator.docker.engine import Engine  # noqa: E402
from orchestrator.images import venv_volume  # noqa: E402

STAGES = ("create_and_start", "import", "connect_and_load", "results_and_teardown", "beyond_train")
WAYS = ("volume", "layers")


def measure(name: str, workers: int, repeats: int, runs: Path) -> dict:
    fields, _, module = floor.FRAMEWORKS[name]
    image = frameworks.get(fields["framework"]).main_image()
    volume = venv_volume.volume_name(image)
    engine = Engine()
    engine.remove_volume(volume + venv_volume.DONE)  # the next ensure copies again: the copy's own time
    started = time.monotonic()
    venv_volume.ensure(engine, volume, image, runs, floor.log)
    copy_seconds = time.monotonic() - started
    splits: dict[str, list[dict]] = {way: [] for way in WAYS}
    starts: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    for r in range(repeats):
        for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
            measured = floor.run({**floor.WORKLOAD, **fields}, workers, runs, venv=way == "volume")
            splits[way].append(floor.split(measured))
            starts[way].append(floor.start_floor(image, module, workers, volume if way == "volume" else ""))
            floor.log(f"{name}, {way}, repeat {r + 1}/{repeats}: wall − train {splits[way][-1]['beyond_train']:.2f} s,"
                      f" start floor {starts[way][-1][0]:.2f} s")
    return {"image": image, "volume": volume, "copy_seconds": copy_seconds,
            **{way: {**{k: statistics.median(s[k] for s in splits[way]) for k in STAGES},
                     "start_floor": statistics.median(w for w, _ in starts[way]),
                     "start_floor_cpu": statistics.median(c for _, c in starts[way]),
                     "beyond_train_all": [s["beyond_train"] for s in splits[way]]}
               for way in WAYS}}


def markdown(report: dict) -> str:
    n = report["workers"]
    lines = ["# The Python environment from a volume, against the image's layers", "",
             f"`python benchmarks/investigations/venv_volume.py`, {report['when']}, {floor.CORES} cores, "
             f"storage driver {report['driver']}, {report['repeats']} repeat(s) of each way, alternating (medians). {n} containers "
             "of floor.py's workload; the stages from the runs' own events (seconds). The start floor is "
             f"{n} containers of the image started at once that each import the framework and exit, read the same "
             "way.", "",
             "| framework | environment read from | create and start | import | connect and load data | results and "
             "teardown | wall − train | start floor | (wall − train) / start floor | the copy, once per build s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, result in report["frameworks"].items():
        for way in WAYS:
            m = result[way]
            lines.append(f"| {name} | {'a volume (orch now)' if way == 'volume' else 'the image (before)'} | "
                         + " | ".join(f"{m[k]:.2f}" for k in STAGES)
                         + f" | {m['start_floor']:.2f} | {m['beyond_train'] / m['start_floor']:.2f} | "
                         + (f"{result['copy_seconds']:.1f} |" if way == "volume" else "— |"))
    return "\n".join(lines) + "\n"


def main() -> int:
    signal.signal(signal.SIGTERM, floor._interrupted)  # a killed benchmark leaves no containers behind
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", choices=sorted(floor.FRAMEWORKS), default=list(floor.FRAMEWORKS))
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    report = {"workers": args.workers, "repeats": args.repeats, "frameworks": {},
              "driver": Engine().client.info().get("Driver", "?"),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="orch-venv-") as tmp:
        for name in args.frameworks:
            report["frameworks"][name] = measure(name, args.workers, args.repeats, Path(tmp))
    text = markdown(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "venv_volume.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "venv_volume.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
