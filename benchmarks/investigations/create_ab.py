"""Two start-up levers, measured before building them: creating every container at once, and a network shared
by a sweep's cells.

Usage: python benchmarks/investigations/create_ab.py [--workers 3 8] [--repeats 5]

orch renders an MPI job's ranks into rank 0's IPC and PID namespaces (MPICH's shared memory and its
cross-memory copies need both), so Compose creates and starts rank 0 first and the other ranks after it. And
every run, so every cell of a sweep, makes its own network and removes it at the end. This takes the Compose
file orch renders for an MPI job and brings it up and down through orch's own engine calls, three ways, in
alternating order:

- as orch renders it;
- every container created at once: the ranks' shared IPC and PID namespaces taken out;
- the same, on a network made beforehand, as a sweep could share between its cells (made and removed
  outside the timing).

Each container runs a Python that sleeps instead of the trainer (rank 0's namespaces must outlive the ranks'
creation), so what is timed is only creating and starting the containers, and killing and removing them.
The difference between the arms is the most each lever could save a run.
Writes benchmarks/investigations/results/create_ab.json and .md.
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

import yaml

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.backends.compose import ComposeBackend  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.plan import plan  # noqa: E402
from orchestrator.run.rundir import RunDir  # noqa: E402
from orchestrator.run.runner import container_user  # noqa: E402

RESULTS = HERE / "results"
ARMS = {
    "as rendered": "as orch renders it (rank 0 first, then the others)",
    "all at once": "every container created at once",
    "shared network": "every container at once, on a network made beforehand",
}


def rendered(workers: int, run_id: str, paths: Paths) -> dict:
    """The Compose file orch renders for ``workers`` MPI ranks, each running a Python that sleeps."""
    p = plan(make_spec(framework="mpi", workers=workers, dataset="synthetic", run_id=run_id), paths,
             user=container_user(), host_cpus=os.cpu_count() or 1)
    ComposeBackend().stage(p, print)  # the volume the replicas' Python environment comes from, as orch makes it
    RunDir(p.run_dir).create(p)
    doc = yaml.safe_load(p.artifact_file.read_text())
    for service in doc["services"].values():
        service["entrypoint"] = ["python3", "-c", "import time; time.sleep(600)"]  # until removed
    return doc


def variant(doc: dict, arm: str, network: str) -> dict:
    doc = json.loads(json.dumps(doc))
    if arm == "as rendered":
        return doc
    for service in doc["services"].values():
        for key in ("ipc", "pid", "depends_on"):
            service.pop(key, None)
    if arm == "shared network":
        doc["networks"] = {"cluster": {"external": True, "name": network}}
    return doc


def once(engine, doc: dict, arm: str, folder: Path, project: str, network: str) -> dict:
    artifact = folder / f"{project}.yml"
    artifact.write_text(yaml.safe_dump(variant(doc, arm, network)))
    started = time.monotonic()
    engine.compose_up(artifact, project)
    up = time.monotonic() - started
    started = time.monotonic()
    engine.compose_down(artifact, project, timeout=0)
    return {"up": up, "down": time.monotonic() - started}


def measure(workers: int, repeats: int, paths: Paths, folder: Path) -> dict:
    engine = ComposeBackend().engine
    doc = rendered(workers, f"create-ab-{workers}", paths)
    network = f"orch-create-ab-{os.getpid()}"
    subprocess.run(["docker", "network", "create", network], check=True, capture_output=True)
    times: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    try:
        for r in range(repeats):
            arms = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))
            for arm in arms:
                times[arm].append(once(engine, doc, arm, folder, f"orch-create-ab-{workers}-{r}", network))
            print(f"{workers} containers, repeat {r + 1}/{repeats}: " + ", ".join(
                f"{arm} up {times[arm][-1]['up']:.2f} s down {times[arm][-1]['down']:.2f} s" for arm in ARMS),
                file=sys.stderr, flush=True)
    finally:
        subprocess.run(["docker", "network", "rm", network], capture_output=True)
    return {arm: {"up": [t["up"] for t in rows], "down": [t["down"] for t in rows]} for arm, rows in times.items()}


def table(results: dict) -> str:
    lines = ["| containers | how | create and start s | remove s | up and down s |",
             "| ---: | --- | ---: | ---: | ---: |"]
    for workers, arms in results.items():
        for arm, t in arms.items():
            both = [u + d for u, d in zip(t["up"], t["down"])]
            lines.append(f"| {workers} | {ARMS[arm]} | {statistics.median(t['up']):.2f} "
                         f"({min(t['up']):.2f}–{max(t['up']):.2f}) | {statistics.median(t['down']):.2f} | "
                         f"{statistics.median(both):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(runs=Path(tmp) / "runs", cache=default_paths().cache)
        results = {workers: measure(workers, args.repeats, paths, Path(tmp)) for workers in args.workers}
    text = table(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "create_ab.json").write_text(json.dumps({"repeats": args.repeats, "results": results}, indent=2) + "\n")
    (args.out / "create_ab.md").write_text(
        f"`python benchmarks/investigations/create_ab.py --repeats {args.repeats}`, medians (range), "
        f"seconds.\n\n{text}\n")


if __name__ == "__main__":
    main()
