"""A start-up lever, measured: the 3-container start-up split of the trainer at a git revision against this tree's.

Usage: python benchmarks/start_ab.py --before REV [--label TEXT] [--framework torch] [--workers 3] [--repeats 4]

For each repeat, in alternating order, the framework's image is built (`orch build`, which re-lays only the
trainer's code) with the trainer's code (orchestrator/trainer and the framework's trainer folder) as it is at
REV, then as it is in this working tree, and one run of floor.py's workload (the MLP, 60,000 MNIST images, 5
epochs, global batch 96) is timed with each. The stages come from the runs' own events, as floor.py splits
them. The working tree's trainer code is put back afterwards, whatever happens. Prints the median of each
stage for both, and writes benchmarks/results/start_ab-<framework>-<label>.json and .md.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import floor  # noqa: E402 - its run() and split()

RESULTS = ROOT / "benchmarks" / "results"
FOLDERS = {"mpi": "mpi", "mwms": "tensorflow", "torch": "torch"}  # floor.py's names -> orch's framework folders
STAGES = ("create_and_start", "import", "connect_and_load", "results_and_teardown", "beyond_train")


def _trainer_dirs(framework: str) -> list[str]:
    return ["orchestrator/trainer", f"orchestrator/frameworks/{FOLDERS[framework]}/trainer"]


def _files_at(rev: str, folders: list[str]) -> dict[str, bytes]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", *folders], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, check=True, capture_output=True).stdout
            for n in names}


def _put(folders: list[str], files: dict[str, bytes]) -> None:
    for folder in folders:
        shutil.rmtree(ROOT / folder, ignore_errors=True)
    for name, data in files.items():
        (ROOT / name).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / name).write_bytes(data)


def _build(framework: str) -> None:
    subprocess.run([sys.executable, "-m", "orchestrator", "build", "--framework", FOLDERS[framework]], cwd=ROOT,
                   check=True, capture_output=True)


def main() -> int:
    signal.signal(signal.SIGTERM, floor._interrupted)  # stopped like orch up: no containers left, the tree put back
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="The git revision whose trainer code is the baseline.")
    parser.add_argument("--framework", choices=sorted(FOLDERS), default="torch")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--label", default="this tree", help="What the working tree's trainer changes, for the table.")
    args = parser.parse_args()
    folders = _trainer_dirs(args.framework)
    before = _files_at(args.before, folders)
    saved = Path(tempfile.mkdtemp(prefix="orch-start-ab-"))
    for folder in folders:
        shutil.copytree(ROOT / folder, saved / folder, ignore=shutil.ignore_patterns("__pycache__"))
    now = {str(p.relative_to(saved)): p.read_bytes() for p in saved.rglob("*") if p.is_file()}
    arms = {args.before: before, args.label: now}
    splits: dict[str, list[dict]] = {name: [] for name in arms}
    fields = {**floor.WORKLOAD, **floor.FRAMEWORKS[args.framework][0]}
    try:
        with tempfile.TemporaryDirectory(prefix="orch-start-ab-runs-") as runs:
            for repeat in range(args.repeats):
                order = list(arms) if repeat % 2 == 0 else list(arms)[::-1]
                for name in order:
                    _put(folders, arms[name])
                    _build(args.framework)
                    measured = floor.run(fields, args.workers, Path(runs))
                    splits[name].append(floor.split(measured))
                    floor.log(f"{name}, repeat {repeat + 1}/{args.repeats}: "
                              + ", ".join(f"{k} {v:.2f}" for k, v in splits[name][-1].items()))
    finally:
        _put(folders, now)
        shutil.rmtree(saved, ignore_errors=True)
        _build(args.framework)
    report = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "framework": args.framework,
              "workers": args.workers, "repeats": args.repeats, "before": args.before, "workload": floor.WORKLOAD,
              "medians": {name: {k: statistics.median(s[k] for s in splits[name]) for k in STAGES} for name in arms},
              "runs": splits}
    lines = [f"# Start-up of {args.workers} {args.framework} containers: the trainer at {args.before} against "
             f"{args.label}", "",
             f"`python benchmarks/start_ab.py --before {args.before} --label '{args.label}' --framework "
             f"{args.framework}`, {report['when']}, "
             f"{args.repeats} repeats in alternating order (medians, seconds; each stage ends when the last worker "
             "leaves it, as in floor.py).", "",
             "| trainer | create and start | import | connect and load data | results and teardown | wall − train |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, m in report["medians"].items():
        lines.append(f"| {name} | " + " | ".join(f"{m[k]:.2f}" for k in STAGES) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"start_ab-{args.framework}-" + (re.sub(r"[^a-z0-9]+", "-", args.label.lower()).strip("-") or "tree")
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
