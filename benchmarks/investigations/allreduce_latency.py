"""What bounds a training step on N workers: the latency of the all-reduce alone, with no model.

Usage: python benchmarks/investigations/allreduce_latency.py [--workers 2 3] [--calls 20]

Starts N trainer containers that do nothing but all-reduce an 80 KB tensor (the MLP's gradients)
with MultiWorkerMirroredStrategy, on the bridge network and in one shared network namespace, with
TensorFlow's default threads and with one thread, unpinned and pinned to the cores orch gives each
worker. If a step at N workers costs about what one all-reduce costs, the collective, not the
model, is what bounds the step time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.frameworks.tensorflow import image_ref  # noqa: E402
from orchestrator.plan import cpuset  # noqa: E402
from orchestrator.safetext import printable  # noqa: E402

PROBE = HERE / "probes" / "allreduce.py"


def measure(workers: int, network: str, threads: int, calls: int, pinned: bool = False) -> float:
    """ms per all-reduce of the gradients alone."""
    return run_probe(PROBE, workers, network, threads, calls, pinned)["ms_per_allreduce"]


def run_probe(probe: Path, workers: int, network: str, threads: int, calls: int, pinned: bool = False,
              env: dict[str, str] | None = None, cpus: str | None = None, image: str | None = None) -> dict:
    """Run ``probe`` in N trainer containers forming one cluster; return worker 0's JSON line. ``env`` adds to
    each container's environment; ``cpus`` pins every container to those cores instead of orch's share;
    ``image`` is TensorFlow's multi-worker image unless given."""
    tag = f"probe-{int(time.time() * 1000) % 10**8}"
    ids: list[str] = []
    net = tag
    try:
        subprocess.run(["docker", "network", "create", "--internal", net], check=True, capture_output=True)
        for i in range(workers):
            if network == "shared":
                hosts = [f"localhost:{13000 + k}" for k in range(workers)]
                where = ["--network", net] if i == 0 else ["--network", f"container:{ids[0]}"]
            else:
                hosts = [f"{tag}-{k}:12345" for k in range(workers)]
                where = ["--network", net, "--hostname", f"{tag}-{i}", "--name", f"{tag}-{i}"]
            tf_config = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}})
            ids.append(subprocess.run(
                ["docker", "run", "-d", *where, "--label", f"orch.run={tag}", "-e", f"TF_CONFIG={tf_config}",
                 "-e", f"PROBE_THREADS={threads}", "-e", f"PROBE_CALLS={calls}", "-e", "TF_CPP_MIN_LOG_LEVEL=2",
                 *[arg for key, value in (env or {}).items() for arg in ("-e", f"{key}={value}")],
                 *(["--cpuset-cpus", cpus] if cpus else
                   ["--cpuset-cpus", cpuset(i, workers, os.cpu_count() or 1)] if pinned else []),
                 "-v", f"{probe}:/probe.py:ro", "--entrypoint", "python3", image or image_ref("multi"), "/probe.py"],
                check=True, capture_output=True, text=True).stdout.strip())
        codes = subprocess.run(["docker", "wait", *ids], check=True, capture_output=True, text=True,
                               timeout=600).stdout.split()
        for cid, code in zip(ids, codes):
            if code != "0":
                tail = subprocess.run(["docker", "logs", "--tail", "3", cid], capture_output=True,
                                      text=True, errors="replace").stderr.strip().splitlines()
                raise SystemExit(f"{probe.name} exited with {code} in a container: "
                                 f"{printable(tail[-1]) if tail else 'no output'}")
        out = subprocess.run(["docker", "logs", ids[0]], capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        subprocess.run(["docker", "network", "rm", net], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    rows = []
    for workers in args.workers:
        for network in ("bridge", "shared"):
            for threads in (0, 1):
                for pinned in (False, True):
                    ms = measure(workers, network, threads, args.calls, pinned)
                    rows.append({"workers": workers, "network": network, "threads": threads, "pinned": pinned,
                                 "ms_per_allreduce": ms})
                    print(f"{workers} workers, {network}, threads {threads or 'default'}, "
                          f"{'pinned as orch pins' if pinned else 'unpinned'}: {ms:.2f} ms per all-reduce",
                          file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
