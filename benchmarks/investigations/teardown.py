"""Where a run's last second goes: floor.py's "results and teardown", split, for 3 containers of each framework.

Usage: python benchmarks/investigations/teardown.py [--frameworks mpi mwms torch] [--workers 3] [--repeats 5]

Each repeat is one orch run of floor.py's workload (the MLP, 60,000 MNIST images, 5 epochs, global batch 96) for
each framework in turn, as floor.py runs it. From the last worker's result ("done" event) to the end of the run's
wall clock:

  exit      until the last worker's container had exited (the engine's FinishedAt): the trainer's leave, the
            framework's and the interpreter's own teardown;
  notice    until orch began saving the logs: the engine's report of the exit, orch's next look at the replicas
            (every 0.25 s), and its listings of them (the look's, and the one its clean-up begins with);
  logs      saving every replica's log from the engine;
  removal   removing the containers and the network (the backend's cancel: `docker compose down`, then any
            container left);
  rest      the run record, the results read back, the checkpoints' folder removed.

And, after the runs, what notice and removal are made of: the same number of containers of the framework's image on
a bridge network made for them, that exit together a second after they start; how long after its FinishedAt the
Engine API first lists each exited, then the containers removed through the Engine API in parallel (as `docker
compose down` removes them), then their network; each part timed, the median of --repeats.

Prints the median of each part and writes benchmarks/investigations/results/teardown.json and
teardown.md.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # floor.py, the suite's, which puts ROOT on the path too

import floor  # noqa: E402 - its workload, run() and split()

from orchestrator import frameworks  # noqa: E402
from orchestrator.backends.compose import ComposeBackend  # noqa: E402
from orchestrator.docker.engine import Engine  # noqa: E402
from orchestrator.run import runner  # noqa: E402
from orchestrator.timestamps import parse_timestamp  # noqa: E402

RESULTS = HERE / "results"
PARTS = ("exit", "notice", "logs", "removal", "rest", "results_and_teardown")


class Stamps:
    """Wall-clock stamps around the teardown's calls, taken by wrapping them for the length of one run."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self.finished: list[float] = []

    def __enter__(self) -> "Stamps":
        self._save, self._cancel = runner.logs.save, ComposeBackend.cancel
        stamps = self

        def save(backend, run, replicas, append=False):
            replicas = list(replicas)
            stamps.marks.setdefault("logs_from", time.time())
            stamps.finished = [r.finished_at for r in replicas if r.finished_at is not None and r.index >= 0]
            try:
                return stamps._save(backend, run, replicas, append=append)
            finally:
                stamps.marks["logs_to"] = time.time()

        def cancel(backend, run_id, artifact, grace, clock=None):
            stamps.marks["removal_from"] = time.time()
            try:
                return stamps._cancel(backend, run_id, artifact, grace, clock)
            finally:
                stamps.marks["removal_to"] = time.time()

        runner.logs.save, ComposeBackend.cancel = save, cancel
        return self

    def __exit__(self, *_exc) -> None:
        runner.logs.save, ComposeBackend.cancel = self._save, self._cancel


def parts(measured: dict, stamps: Stamps) -> dict:
    """The teardown of one run in parts (seconds), from its events and the stamps."""
    done = max(measured["done"])
    end = measured["started"] + measured["wall_seconds"]
    exited = max(stamps.finished) if stamps.finished else None
    m = stamps.marks
    return {"exit": None if exited is None else exited - done,
            "notice": None if exited is None else m["logs_from"] - exited,
            "logs": m["logs_to"] - m["logs_from"], "removal": m["removal_to"] - m["removal_from"],
            "rest": end - m["removal_to"], "results_and_teardown": end - done}


def removal_parts(image: str, n: int) -> dict:
    """Seconds for the engine to report ``n`` containers of ``image`` exited (from their FinishedAt until the Engine
    API first lists them exited, looking every 5 ms; the median of the containers), to remove them from a bridge
    network made for them, through the Engine API in parallel, and then to remove the network; whatever happens,
    nothing is left."""
    api = Engine().client.api
    label = {"orch.benchmark": f"teardown-{os.getpid()}-{time.monotonic_ns()}"}
    network = api.create_network(label["orch.benchmark"], driver="bridge", labels=label)["Id"]
    ids: list[str] = []
    try:
        host = api.create_host_config(network_mode=label["orch.benchmark"])
        for _ in range(n):
            ids.append(api.create_container(image, entrypoint=["sleep", "1"], labels=label, host_config=host)["Id"])
        for i in ids:
            api.start(i)
        reported: dict[str, float] = {}  # each container's exit: when the API first listed it exited, less FinishedAt
        deadline = time.monotonic() + 60
        while len(reported) < n and time.monotonic() < deadline:
            for i in ids:
                state = api.inspect_container(i)["State"] if i not in reported else None
                if state and state["Status"] == "exited":
                    reported[i] = time.time() - parse_timestamp(state["FinishedAt"])
            time.sleep(0.005)
        started = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda i: api.remove_container(i, v=True, force=True), ids))
        containers = time.perf_counter() - started
        ids = []
        started = time.perf_counter()
        api.remove_network(network)
        network = ""
        return {"report": statistics.median(reported.values()) if reported else None, "containers": containers,
                "network": time.perf_counter() - started}
    finally:
        for i in ids:
            api.remove_container(i, v=True, force=True)
        if network:
            api.remove_network(network)


def _cells(values: list) -> tuple[str, str]:
    """The median and the range of ``values`` (None left out), as table cells."""
    values = [v for v in values if v is not None]
    if not values:
        return "–", "–"
    def cell(v: float) -> str:
        return f"{round(v, 2) + 0.0:.2f}"  # no "-0.00" from the clocks' last digits

    return cell(statistics.median(values)), f"{cell(min(values))}–{cell(max(values))}"


def markdown(report: dict) -> str:
    head = ["| framework | exit | notice | logs | removal | rest | results and teardown |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines = [f"# Where a run's last second goes ({report['when']})", "",
             f"{report['workers']} containers of each framework, floor.py's workload, the median of "
             f"{report['repeats']} runs (seconds, from the last worker's result to the end of the run's wall clock; "
             "the ranges under it):", "", *head]
    for name, runs in report["frameworks"].items():
        lines.append(f"| {name} | " + " | ".join(_cells([r[p] for r in runs])[0] for p in PARTS) + " |")
    lines += ["", *(h.replace("---:", "---") for h in head)]
    for name, runs in report["frameworks"].items():
        lines.append(f"| {name} | " + " | ".join(_cells([r[p] for r in runs])[1] for p in PARTS) + " |")
    lines += ["", f"What notice and removal are made of: {report['workers']} containers of each image on a bridge "
              "network made for them, that exit together a second after they start; the engine's report of an exit "
              "(from a container's FinishedAt until the Engine API first lists it exited, looking every 5 ms), then "
              "the containers removed through the Engine API in parallel, then the network (seconds, the median of "
              f"{report['repeats']} and the range):", "",
              "| image | an exit reported | the containers removed | the network removed |",
              "| --- | --- | --- | --- |"]
    for image, rows in report["removal"].items():
        cells = [_cells([r[k] for r in rows]) for k in ("report", "containers", "network")]
        lines.append(f"| {image} | " + " | ".join(f"{m} ({r})" for m, r in cells) + " |")
    return "\n".join(lines) + "\n"


def _interrupted(_signum, _frame) -> None:
    raise KeyboardInterrupt  # apply() removes the run's containers on the way out


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", choices=sorted(floor.FRAMEWORKS), default=list(floor.FRAMEWORKS))
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    report = {"workers": args.workers, "repeats": args.repeats, "workload": floor.WORKLOAD, "frameworks": {},
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="orch-teardown-") as tmp:
        for i in range(args.repeats):
            for name in args.frameworks:  # the frameworks in turn, so a slow minute of the host is shared
                with Stamps() as stamps:
                    measured = floor.run(floor.FRAMEWORKS[name][0] | floor.WORKLOAD, args.workers, Path(tmp))
                row = parts(measured, stamps)
                report["frameworks"].setdefault(name, []).append(row)
                floor.log(f"{name} {i + 1}/{args.repeats}: " + ", ".join(
                    f"{p} {v:.2f}" for p, v in row.items() if v is not None))
    images = sorted({frameworks.get(floor.FRAMEWORKS[name][0]["framework"]).main_image() for name in args.frameworks})
    report["removal"] = {image: [removal_parts(image, args.workers) for _ in range(args.repeats)] for image in images}
    text = markdown(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "teardown.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "teardown.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
