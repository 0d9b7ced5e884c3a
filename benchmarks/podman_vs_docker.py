"""The same job on Docker and on Podman (its rootful API service), side by side, in turn.

Each repeat runs the job on 1 worker and on 3, on Docker then on Podman, so that a drift of the machine hits both
engines alike. Each run's wall time (`orch up`'s, from the plan to the record) and train time (the slowest worker's)
are orch's own figures; wall − train is what the engine and orch add (starting the containers, the rendezvous, the
test pass, the results, the teardown), and T(3)/T(1) is the train time's ratio at the same global batch. Before the
first timed run, `orch doctor --engine podman --fix` starts Podman's service and `orch push --to-engine podman`
copies the images (timed on its own, once per image build: run it after `podman rmi` of orch's images, or after a
build, to time the copy).

    python benchmarks/podman_vs_docker.py [--repeats 3] [--samples 60000] [--epochs 1]

Writes benchmarks/results/podman.json and podman.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wall_train import summary, up, write  # noqa: E402

ENGINES = ("docker", "podman")
WORKERS = (1, 3)


def orch(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def up_on(env: dict[str, str], engine: str, run_id: str, job: list[str]) -> dict:
    return up(env, run_id, ["--engine", engine, *job])


def _service_pids() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


@contextlib.contextmanager
def _leaving(services: set[int], ruled: bool) -> Iterator[None]:
    """Stop the Podman service the benchmark started, and take away the firewall rule it added, whatever happens."""
    try:
        yield
    finally:
        from orchestrator.docker import podman_net

        for pid in _service_pids() - services:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        if not ruled:
            podman_net.remove()


def markdown(report: dict) -> str:
    w = report["workload"]
    lines = ["# The same job on Docker and on Podman", "",
             f"`python benchmarks/podman_vs_docker.py`, {report['when']}, {report['repeats']} repeats in turn, "
             f"{w['samples']} samples, {w['epochs']} epoch(s); medians, range in brackets.", "",
             "| engine | workers | wall s | train s | wall − train s | test accuracy |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for key, r in report["setups"].items():
        lines.append(f"| {r['engine']} | {r['workers']} | {r['wall_p50']:.1f} | {r['train_p50']:.1f} | "
                     f"{r['overhead_p50']:.1f} ({r['overhead_min']:.1f}–{r['overhead_max']:.1f}) | "
                     f"{r['accuracy']:.4f} |")
    lines += [""] + [f"T(3)/T(1) on {e}: {report['ratios'][e]:.2f}" for e in ENGINES]
    lines += ["", f"Copying {len(report['pushed'])} images to Podman, once per build: {report['push_seconds']:.0f} s.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    job = ["--samples", str(args.samples), "--epochs", str(args.epochs)]
    runs: dict[str, list[dict]] = {f"{e}-{n}": [] for e in ENGINES for n in WORKERS}
    sys.path.insert(0, str(ROOT))
    from orchestrator.docker import podman_net

    services, ruled = _service_pids(), podman_net.blocked() is None
    with tempfile.TemporaryDirectory(prefix="orch-bench-podman-") as tmp, _leaving(services, ruled):
        env = {**os.environ, "ORCH_RUNS_DIR": str(Path(tmp) / "runs"), "ORCH_RESULTS_DIR": str(Path(tmp) / "res")}
        orch(env, "doctor", "--engine", "podman", "--fix")  # its images are missing until the push: exit 2
        started = time.monotonic()
        pushed = orch(env, "push", "--to-engine", "podman", "--framework", "tensorflow", "--format", "json")
        if pushed.returncode != 0:
            raise SystemExit(f"push failed: {pushed.stderr[-2000:]}")
        push_seconds = time.monotonic() - started
        copied = [p["image"] for p in json.loads(pushed.stdout) if p["copied"]]
        for engine in ENGINES:  # warm: each engine's venv volume, and the data set's page cache
            up_on(env, engine, f"warm-{engine}", ["--workers", "1", "--samples", "1000", "--epochs", "1"])
        for repeat in range(args.repeats):
            for key in runs:
                engine, workers = key.rsplit("-", 1)
                runs[key].append(up_on(env, engine, f"r{repeat}-{key}", ["--workers", workers, *job]))
                print(f"repeat {repeat + 1}, {key}: {runs[key][-1]}", file=sys.stderr)
    report: dict = {"workload": {"samples": args.samples, "epochs": args.epochs}, "repeats": args.repeats,
                    "push_seconds": push_seconds, "pushed": copied, "cores": os.cpu_count(),
                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs, "setups": {},
                    "ratios": {}}
    for key, rows in runs.items():
        engine, workers = key.rsplit("-", 1)
        report["setups"][key] = {"engine": engine, "workers": int(workers), **summary(rows)}
    for engine in ENGINES:
        report["ratios"][engine] = (report["setups"][f"{engine}-3"]["train_p50"]
                                    / report["setups"][f"{engine}-1"]["train_p50"])
    write("podman", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
