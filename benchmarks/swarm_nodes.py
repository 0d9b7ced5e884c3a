"""A multi-node Docker Swarm on this one machine, and one orch job across it, with the time of every step.

Usage: python benchmarks/swarm_nodes.py [--workers 3] [--dataset mnist]  (as root)

The second node is a Docker engine in a network namespace of its own, joined by a veth pair (at this
machine's interface MTU of 1400) to this engine, which initialises the swarm as its manager. The nodes share
nothing but that network: each holds its own images (copied with `orch push`) and data (inside the image).
The job's replicas are spread over both nodes by the scheduler, and the script records where each ran. (A
third node would need a bridge between the veth pairs and a forwarding rule past Docker's own; two nodes
already put replicas on engines that share only the network.) Everything is restored afterwards, even on failure: the engines leave the swarm, stop, and their
namespaces, contexts and files are removed. tests/test_runs_swarm_nodes.py uses the same `Nodes`.

Writes benchmarks/results/swarm-nodes.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNDERLAY_MTU = 1400  # this machine's eth0: the default overlay (1450 + VXLAN's 50) does not fit it


def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def quietly(*argv: str) -> None:
    try:
        run(*argv, check=False)
    except subprocess.TimeoutExpired:
        pass


class Nodes:
    """A second Docker engine in its own network namespace, joined to this engine's swarm, and a context naming
    it (``contexts``). Use as a context manager; ``steps`` holds the seconds each setup step took."""

    def __init__(self, prefix: str = "orch-node") -> None:
        self.extra, self.prefix = 1, prefix
        self.folder = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        self.contexts: list[str] = []
        self.steps: list[tuple[str, float]] = []
        self._daemons: list[subprocess.Popen] = []
        self._socks: list[str] = []
        self._had_gwbridge = False

    @staticmethod
    def available() -> str:
        """Why this machine cannot make the nodes, or "" if it can."""
        if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "nsenter", "dockerd")):
            return "a second engine needs root, ip, nsenter and dockerd"
        if run("docker", "info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip() != "inactive":
            return "this engine is already in a swarm"
        return ""

    def _step(self, name: str, started: float) -> None:
        self.steps.append((name, round(time.monotonic() - started, 2)))

    def __enter__(self) -> "Nodes":
        self._had_gwbridge = bool(run("docker", "network", "ls", "-q", "--filter", "name=^docker_gwbridge$").stdout)
        try:
            for n in range(1, self.extra + 1):
                started = time.monotonic()
                self._engine(n)
                self._step(f"engine {n + 1} in its network namespace, started", started)
            started = time.monotonic()
            run("docker", "swarm", "init", "--advertise-addr", self._ip(n=1, host=True))
            token = run("docker", "swarm", "join-token", "-q", "worker").stdout.strip()
            for sock in self._socks:
                run("docker", "-H", sock, "swarm", "join", "--token", token, f"{self._ip(n=1, host=True)}:2377")
            self._step(f"swarm of {self.extra + 1} nodes formed", started)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _ip(self, n: int, host: bool) -> str:
        return f"10.231.{70 + n}.{1 if host else 2}"

    def _engine(self, n: int) -> None:
        netns, host_if, node_if = f"{self.prefix}{n}", f"orchv{n}a", f"orchv{n}b"
        run("ip", "netns", "add", netns)
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if)
        run("ip", "link", "set", node_if, "netns", netns)
        run("ip", "addr", "add", f"{self._ip(n, True)}/24", "dev", host_if)
        run("ip", "link", "set", host_if, "mtu", str(UNDERLAY_MTU), "up")
        for args in (("addr", "add", f"{self._ip(n, False)}/24", "dev", node_if),
                     ("link", "set", node_if, "mtu", str(UNDERLAY_MTU), "up"), ("link", "set", "lo", "up")):
            run("ip", "netns", "exec", netns, "ip", *args)
        home = self.folder / f"node{n}"
        home.mkdir()
        (home / "daemon.json").write_text("{}\n")  # not the host's: its data root and storage driver are its own
        sock = f"unix://{home}/docker.sock"
        # nsenter, not `ip netns exec`, which remounts /sys, after which dockerd finds no devices cgroup.
        self._daemons.append(subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{netns}", "dockerd", "--config-file", str(home / "daemon.json"),
             "--data-root", str(home / "data"), "--exec-root", str(home / "exec"), "-H", sock,
             "--pidfile", str(home / "docker.pid"), "--storage-driver", "vfs", "--iptables=false",
             "--bip", f"172.31.{240 + n}.1/24"], stdout=open(home / "dockerd.log", "w"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while run("docker", "-H", sock, "info", check=False).returncode != 0:
            if time.monotonic() > deadline or self._daemons[-1].poll() is not None:
                raise RuntimeError(f"engine {n + 1} did not start: {(home / 'dockerd.log').read_text()[-1000:]}")
            time.sleep(0.5)
        self._socks.append(sock)
        context = f"{self.prefix}{n}"
        quietly("docker", "context", "rm", "--force", context)
        run("docker", "context", "create", context, "--docker", f"host={sock}")
        self.contexts.append(context)

    def __exit__(self, *exc: object) -> None:
        for sock in self._socks:
            quietly("docker", "-H", sock, "swarm", "leave", "--force")
        quietly("docker", "swarm", "leave", "--force")
        for context in self.contexts:
            quietly("docker", "context", "rm", "--force", context)
        for daemon in self._daemons:
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
        for n in range(1, self.extra + 1):
            quietly("ip", "netns", "del", f"{self.prefix}{n}")  # and with it the veth pair
            quietly("ip", "link", "del", f"orchv{n}a")
        if not self._had_gwbridge:
            quietly("docker", "network", "rm", "docker_gwbridge")
        shutil.rmtree(self.folder, ignore_errors=True)


def placements(run_id: str, workers: int, seen: dict[str, str], stop: threading.Event) -> None:
    """Record on which node each replica's task runs (hostname of the node's engine), until ``stop``."""
    while not stop.is_set():
        for i in range(workers):
            tasks = run("docker", "service", "ps", "-q", f"orch-{run_id}_worker-{i}", check=False).stdout.split()
            if tasks:
                node = run("docker", "inspect", "--format", "{{.NodeID}}", tasks[0], check=False).stdout.strip()
                if node:
                    seen[f"worker-{i}"] = node
        time.sleep(0.5)


def orch(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--dataset", default="mnist")
    args = parser.parse_args()
    why = Nodes.available()
    if why:
        print(f"swarm_nodes: {why}", file=sys.stderr)
        return 2
    run_id = f"bench-nodes-{int(time.time())}"
    report: dict = {"nodes": 2, "workers": args.workers, "dataset": args.dataset, "steps": []}
    with Nodes() as nodes:
        started = time.monotonic()
        pushed = orch("push", *[a for c in nodes.contexts for a in ("--context", c)], "--dataset", args.dataset)
        assert pushed.returncode == 0, pushed.stderr
        nodes._step(f"orch push of the image with {args.dataset} to {len(nodes.contexts)} node(s)", started)
        seen: dict[str, str] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=placements, args=(run_id, args.workers, seen, stop), daemon=True)
        watcher.start()
        started = time.monotonic()
        try:
            up = orch("up", "--backend", "swarm", "--workers", str(args.workers), "--dataset", args.dataset,
                      "--samples", "6000", "--epochs", "2", "--overlay-mtu", str(UNDERLAY_MTU - 50), "--run-id",
                      run_id, "--format", "json")
        finally:
            stop.set()
            watcher.join(timeout=10)
        nodes._step(f"orch up --backend swarm --workers {args.workers} (6,000 samples, 2 epochs)", started)
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        report.update(steps=nodes.steps, placement=seen, distinct_nodes=len(set(seen.values())),
                      state=info["state"], train_seconds=info.get("train_seconds"), wall_seconds=info["wall_seconds"],
                      test_accuracy=[w["test_accuracy"] for w in info["workers"]],
                      samples_per_epoch=[w["samples_per_epoch"] for w in info["workers"]], output=up.stderr)
        orch("down", run_id)
        teardown = time.monotonic()
    report["steps"].append(("teardown: both engines left the swarm, the second stopped, its namespace removed",
                            round(time.monotonic() - teardown, 2)))
    out = ROOT / "benchmarks" / "results"
    (out / "swarm-nodes.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# One orch job across a two-node Docker Swarm on one machine", "",
             f"`python benchmarks/swarm_nodes.py --workers {args.workers} --dataset {args.dataset}`", "", "| step | seconds |", "| --- | --- |",
             *[f"| {name} | {seconds} |" for name, seconds in report["steps"]], "",
             f"State {report['state']}; replicas on {report['distinct_nodes']} distinct nodes: "
             + ", ".join(f"{k} on node {v[:8]}" for k, v in sorted(seen.items())) + ".",
             f"Test accuracy per worker {report['test_accuracy']}; samples per epoch {report['samples_per_epoch']}.",
             "", "orch's output:", "", "```", up.stderr.strip(), "```", ""]
    (out / "swarm-nodes.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
