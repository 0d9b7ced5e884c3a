"""A start-up lever, measured: the 3-container start-up split of the trainer at a git revision against this tree's.

Usage: python benchmarks/investigations/start_ab.py --before REV [--label TEXT] [--framework torch] [--workers 3]
                                                    [--repeats 4]

REV is named by its commit in the results, so HEAD stays meaningful after the next commit.

For each repeat, in alternating order, the framework's image is built (`orch build`, which re-lays only the
trainer's code) with every source of the trainer's code (what `orch build` copies into the image) as it is at
REV, then as it is in this working tree, and one run of floor.py's workload (the MLP, 60,000 MNIST images, 5
epochs, global batch 96) is timed with each. The stages come from the runs' own events, as floor.py splits
them. The working tree's trainer code is put back afterwards, whatever happens. Prints the median of each
stage for both, and writes benchmarks/investigations/results/start_ab-<framework>-<label>.json and .md.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # floor.py, the suite's, which puts ROOT on the path too

import floor  # noqa: E402 - its run() and split()

from orchestrator import frameworks  # noqa: E402
from orchestrator.images.builder import SHARED_WITH_TRAINER  # noqa: E402
from orchestrator.paths import trainer_dir  # noqa: E402

RESULTS = HERE / "results"
FOLDERS = {"mpi": "mpi", "mwms": "tensorflow", "torch": "torch"}  # floor.py's names -> orch's framework folders
STAGES = ("create", "start", "import", "data", "rendezvous", "results_and_teardown", "beyond_train", "cpu_data",
          "cpu_rendezvous", "cpu_to_train", "train")


def _trainer_sources() -> list[str]:
    """Every source of the images' trainer code, as orchestrator/images/builder.py's trainer_files reads them:
    the trainer package, the modules it shares with the host, sitecustomize.py and each framework's trainer folder
    (repository paths; folders whole, so that a file one version adds or removes is swapped too)."""
    package = ROOT / "orchestrator"
    paths = [trainer_dir().resolve(), *(package / name for name in SHARED_WITH_TRAINER),
             package / "images" / "sitecustomize.py"]
    paths += sorted({f.resolve().parent for name in frameworks.names() for f in frameworks.get(name).trainer_files()})
    return [p.relative_to(ROOT).as_posix() for p in paths]


def _commit(rev: str) -> str:
    """``rev``'s commit, abbreviated: what the table names as the baseline, since a name such as HEAD moves on."""
    found = subprocess.run(["git", "rev-parse", "--short", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                           capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        raise SystemExit(f"start_ab: {rev!r} is not a commit of this repository (`git log --oneline` lists them)")
    return found.stdout.strip()


def _files_at(rev: str, paths: list[str]) -> dict[str, bytes]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", *paths], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, check=True, capture_output=True).stdout
            for n in names}


def _files_now(paths: list[str]) -> dict[str, bytes]:
    files = [f for p in paths for f in ((ROOT / p).rglob("*.py") if (ROOT / p).is_dir() else [ROOT / p])]
    return {f.relative_to(ROOT).as_posix(): f.read_bytes() for f in files if f.is_file()}


def _put(paths: list[str], files: dict[str, bytes]) -> None:
    for path in paths:
        if (ROOT / path).is_dir():
            shutil.rmtree(ROOT / path)
        else:
            (ROOT / path).unlink(missing_ok=True)
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
    args.before = _commit(args.before)
    sources = _trainer_sources()
    print("start_ab: the trainer's files in this tree are swapped for each arm until the end; an edit made to them "
          "meanwhile is lost", file=sys.stderr)
    before, now = _files_at(args.before, sources), _files_now(sources)
    arms = {args.before: before, args.label: now}
    splits: dict[str, list[dict]] = {name: [] for name in arms}
    fields = {**floor.WORKLOAD, **floor.FRAMEWORKS[args.framework][0]}
    try:
        with tempfile.TemporaryDirectory(prefix="orch-start-ab-runs-") as runs:
            for repeat in range(args.repeats):
                order = list(arms) if repeat % 2 == 0 else list(arms)[::-1]
                for name in order:
                    _put(sources, arms[name])
                    _build(args.framework)
                    measured = floor.run(fields, args.workers, Path(runs))
                    splits[name].append(floor.split(measured))
                    floor.log(f"{name}, repeat {repeat + 1}/{args.repeats}: "
                              + ", ".join(f"{k} {v:.2f}" for k, v in splits[name][-1].items() if v is not None))
    finally:
        _put(sources, now)
        _build(args.framework)
    report = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "framework": args.framework,
              "workers": args.workers, "repeats": args.repeats, "before": args.before, "workload": floor.WORKLOAD,
              "medians": {name: {k: floor._median(s.get(k) for s in splits[name]) for k in STAGES} for name in arms},
              "runs": splits}
    lines = [f"# Start-up of {args.workers} {args.framework} containers: the trainer at {args.before} against "
             f"{args.label}", "",
             f"`python benchmarks/investigations/start_ab.py {shlex.join(sys.argv[1:])}`, {report['when']}, "
             f"{args.repeats} repeats in alternating order (medians, seconds; each stage ends when the last worker "
             "leaves it, as in floor.py).", "",
             "| trainer | create | start | import | data | rendezvous | results and teardown | wall − train | "
             "CPU of the data, all workers | CPU of the rendezvous, all workers | CPU to training, all workers | "
             "train |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, m in report["medians"].items():
        lines.append(f"| {name} | " + " | ".join("—" if m[k] is None else f"{m[k]:.2f}" for k in STAGES) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"start_ab-{args.framework}-" + (re.sub(r"[^a-z0-9]+", "-", args.label.lower()).strip("-") or "tree")
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
