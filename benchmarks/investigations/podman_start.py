"""On Podman, does `docker compose` cost a run more than orch starting the containers itself through the Engine API?

Usage: python benchmarks/investigations/podman_start.py [--engine podman] [--workers 3] [--repeats 5]

Each repeat starts the same group of replicas both ways, in turn (the order alternates): as a Compose project
(`docker compose up -d` of a file with orch's lock-down: read-only root, no capabilities, no new privileges,
memory and process limits, a tmpfs, an internal network, labels), and as the same containers made one call at a
time through the Docker SDK (network, then create and start each). Each replica runs `sleep 60` on orch's base
image, with the process limits orch gives a replica on that engine. "up" is from the first call until every replica is running; "down" is from the first call of the teardown
until no container and no network of the group is left (`compose down -t 0` against removing each container and the
network). Needs orch's base image on the engine (`orch build --engine podman --bootstrap-base`, or `orch push
--to-engine podman`) and, for Podman, its service (`orch doctor --engine podman --fix`).

Writes results/podman_start-<engine>.json and .md beside this script.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.docker import engines  # noqa: E402

IMAGE = "orch-base:bookworm"
LOCKED = {"read_only": True, "cap_drop": ["ALL"], "security_opt": ["no-new-privileges:true"], "mem_limit": "512m",
          "pids_limit": 256}


def compose_file(project: str, workers: int, limits: dict[str, int]) -> str:
    services = {
        f"worker-{i}": {
            "image": IMAGE, "hostname": f"worker-{i}", "command": ["sleep", "60"], "networks": ["cluster"],
            "user": "1000:1000", "labels": {"orch.bench": project}, "tmpfs": ["/tmp:size=64m"], **LOCKED,
            **({"ulimits": limits} if limits else {}),
        }
        for i in range(workers)
    }
    return json.dumps({"name": project, "services": services, "networks": {"cluster": {"internal": True}}})


def _running(client, project: str, workers: int) -> bool:
    found = client.containers.list(filters={"label": f"orch.bench={project}", "status": "running"})
    return len(found) == workers


def _wait(condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the group did not reach the state in time")
        time.sleep(0.05)


def by_compose(client, host: str, project: str, workers: int, folder: Path,
               limits: dict[str, int]) -> tuple[float, float]:
    path = folder / f"{project}.json"
    path.write_text(compose_file(project, workers, limits))
    compose = ["docker", "--host", host, "compose", "-p", project, "-f", str(path)]
    started = time.monotonic()
    subprocess.run([*compose, "up", "-d", "--quiet-pull"], check=True, capture_output=True)
    _wait(lambda: _running(client, project, workers))
    up = time.monotonic() - started
    started = time.monotonic()
    subprocess.run([*compose, "down", "-t", "0"], check=True, capture_output=True)
    _wait(lambda: _gone(client, project))
    return up, time.monotonic() - started


def by_api(client, project: str, workers: int, limits: dict[str, int]) -> tuple[float, float]:
    import docker

    ulimits = [docker.types.Ulimit(name=name, soft=value, hard=value) for name, value in limits.items()]
    started = time.monotonic()
    network = client.networks.create(f"{project}_cluster", internal=True, labels={"orch.bench": project})
    containers = []
    for i in range(workers):
        container = client.containers.create(
            IMAGE, ["sleep", "60"], name=f"{project}-worker-{i}", hostname=f"worker-{i}", user="1000:1000",
            labels={"orch.bench": project}, tmpfs={"/tmp": "size=64m"}, network=network.name, ulimits=ulimits,
            **LOCKED)
        container.start()
        containers.append(container)
    _wait(lambda: _running(client, project, workers))
    up = time.monotonic() - started
    started = time.monotonic()
    for container in containers:
        container.remove(force=True)
    network.remove()
    _wait(lambda: _gone(client, project))
    return up, time.monotonic() - started


def _gone(client, project: str) -> bool:
    return not client.containers.list(all=True, filters={"label": f"orch.bench={project}"}) and not [
        n for n in client.networks.list() if n.name.startswith(project)]


def _remove(client, project: str) -> None:
    """Whatever of the group is left, after a failure too."""
    for container in client.containers.list(all=True, filters={"label": f"orch.bench={project}"}):
        container.remove(force=True)
    for network in client.networks.list():
        if network.name.startswith(project):
            network.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="podman", choices=["podman", "docker"])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import docker

    kind = engines.get(args.engine)
    host, limits = kind.address(), kind.ulimits()  # orch's own limits for the engine (Podman's: this host's)
    client = docker.DockerClient(base_url=host, timeout=120)
    client.images.get(IMAGE)  # fails at once, naming it, where the image is missing
    rows: dict[str, list[tuple[float, float]]] = {"compose": [], "api": []}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            order = ("compose", "api") if repeat % 2 == 0 else ("api", "compose")
            for way in order:
                project = f"orchbench{os.getpid()}{repeat}{way}"
                try:
                    rows[way].append(by_compose(client, host, project, args.workers, Path(folder), limits)
                                     if way == "compose" else by_api(client, project, args.workers, limits))
                finally:
                    _remove(client, project)
                print(f"repeat {repeat + 1} {way}: up {rows[way][-1][0]:.2f} s, down {rows[way][-1][1]:.2f} s",
                      flush=True)
    version = client.version().get("Version", "?")
    out = Path(__file__).resolve().parent / "results"
    stem = f"podman_start-{args.engine}"
    (out / f"{stem}.json").write_text(json.dumps(
        {"engine": args.engine, "version": version, "workers": args.workers, "repeats": args.repeats,
         "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": rows}, indent=1) + "\n")
    lines = [f"# Starting {args.workers} replicas on {args.engine} {version}: Compose against the Engine API",
             "", f"`python benchmarks/investigations/podman_start.py --engine {args.engine}`, {args.repeats} repeats "
             "in turn; medians, range in brackets.", "", "| way | up s | down s | up + down s |",
             "| --- | ---: | ---: | ---: |"]
    for way, runs in rows.items():
        ups, downs = [u for u, _ in runs], [d for _, d in runs]
        both = [u + d for u, d in runs]
        lines.append(f"| {way} | {statistics.median(ups):.2f} ({min(ups):.2f}–{max(ups):.2f}) | "
                     f"{statistics.median(downs):.2f} ({min(downs):.2f}–{max(downs):.2f}) | "
                     f"{statistics.median(both):.2f} |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
