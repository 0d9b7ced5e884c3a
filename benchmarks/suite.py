"""orch's benchmark suite: every benchmark whose results the README and the manual draw their figures from.

Usage: python benchmarks/suite.py [NAME ...]      run these entries (default: all, in order), rewriting their results
       python benchmarks/suite.py --list          the entries, their commands and result files

`make bench` runs it all: several hours on a 2-core host, most of it the DDP study and floor.py. Each entry rewrites
its result files; then `make figures` redraws the pages from them. benchmarks/README.md is generated from this list
(tools/figures/), with the figures of the docs each entry feeds; `make docs` fails on a figure that reads a file
no entry writes. One-off investigations are not here: benchmarks/investigations/ holds them with their notes.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORCH = (sys.executable, "-m", "orchestrator")
PY = (sys.executable,)


@dataclass(frozen=True)
class Bench:
    """One entry: what it answers, the command that measures it, the files it writes (a folder ends in /)."""

    name: str
    question: str
    command: tuple[str, ...]
    writes: tuple[str, ...]
    minutes: int  # about how long it takes on the 2-core development machine
    root: bool = False  # needs root (debootstrap, network namespaces)

    def shown(self) -> str:
        """The command as a user types it."""
        argv = ["orch", *self.command[3:]] if self.command[:3] == ORCH else ["python", *self.command[1:]]
        return ("sudo " if self.root else "") + shlex.join(argv)


def _experiment(name: str, question: str, minutes: int) -> Bench:
    return Bench(name, question, (*ORCH, "experiment", "run", f"experiments/{name}.yaml", "--out", "experiments/results",
                                  "--force"), (f"experiments/results/{name}/",), minutes)


SUITE: tuple[Bench, ...] = (
    _experiment("headline", "How much does N containers cost against one, per framework, at equal work? (the README's "
                "headline: each framework's T(3)/T(1), median and range of 5 repeats in rotated order, in one run)", 40),
    Bench("demo", "What does `make demo` print, and how long does it take once the images exist?",
          (*PY, "benchmarks/demo.py"), ("benchmarks/results/demo.json",), 5),
    Bench("floor", "How far is each framework's T(N) from the floor this machine allows N ranks, for N from 1 to 16, "
          "and where does a 3-container run's start-up go?", (*PY, "benchmarks/floor.py"),
          ("benchmarks/results/floor.json", "benchmarks/results/floor.md"), 40),
    Bench("floor-jax", "The same for JAX, in a run of its own (its image is built on demand): T(N) against its floor "
          "for N from 1 to 8, and its start-up.",
          (*PY, "benchmarks/floor.py", "--frameworks", "jax", "--workers", "1", "2", "3", "4", "8", "--out",
           "benchmarks/results/floor-jax"),
          ("benchmarks/results/floor-jax/floor.json", "benchmarks/results/floor-jax/floor.md"), 30),
    Bench("floor-transport", "What does each framework's own transport cost against MPI's shared memory? PyTorch's and "
          "JAX's gloo beside their --transport shm, and MPI, against the host's physical floor, N from 1 to 8, in one "
          "run.",
          (*PY, "benchmarks/floor.py", "--frameworks", "mpi", "torch", "torch-shm", "jax", "jax-shm", "--workers", "1",
           "2", "3", "4", "8", "--no-start", "--out", "benchmarks/results/floor-transport"),
          ("benchmarks/results/floor-transport/floor.json", "benchmarks/results/floor-transport/floor.md"), 30),
    Bench("processes", "Do orch's containers, or the host, keep T(N) above its floor? N containers against N "
          "processes of one container.", (*PY, "benchmarks/processes.py"),
          ("benchmarks/results/processes.json", "benchmarks/results/processes.md"), 30),
    Bench("processes-cgroup", "The same with the N processes in one CPU cgroup, as the containers' are.",
          (*PY, "benchmarks/processes.py", "--one-cpu-group", "--cells", "torch:3", "mpi:8"),
          ("benchmarks/results/processes-cgroup.json", "benchmarks/results/processes-cgroup.md"), 20, root=True),
    Bench("allreduce", "What does one all-reduce cost on each transport, between containers and on the host?",
          (*ORCH, "bench", "allreduce", "--out", "benchmarks/results"),
          ("benchmarks/results/allreduce.json", "benchmarks/results/allreduce.md",
           "benchmarks/results/allreduce-latency.png"), 10),
    _experiment("container-count", "The container-count study (seed 000) redone with equal work: 1, 2 and 3 "
                "containers on 5,000 and 60,000 MNIST samples.", 15),
    _experiment("strategies", "The strategy comparison on Fashion-MNIST (seed 001) redone: every TensorFlow strategy "
                "and MPI at one global batch.", 10),
    _experiment("batch-size", "The batch-size study on review sentiment (seed 003) redone: three global batches.", 5),
    _experiment("mirrored-mnist", "The MirroredStrategy replicas study (seed 004) redone: 1, 2 and 4 replicas in one "
                "container.", 5),
    _experiment("ddp-scaling", "The PyTorch DDP scaling study (seed 002) redone: 1 to 8 processes, at orch's equal "
                "global batch and at the study's batch per process.", 60),
    Bench("build-times", "How long do orch's images take to build cold, up to date and after a trainer change, and "
          "how large are they?", (*PY, "benchmarks/build_times.py"), ("benchmarks/results/build_times.json",), 5,
          root=True),
    Bench("build-times-torch", "The same for the PyTorch image.",
          (*PY, "benchmarks/build_times.py", "--framework", "torch", "--keep-base"),
          ("benchmarks/results/build_times_torch.json",), 5, root=True),
    Bench("targets", "orch's image and runs against a naive Dockerfile of the same packages.",
          (*PY, "benchmarks/targets.py"), ("benchmarks/results/targets.json", "benchmarks/results/targets.md"), 25,
          root=True),
    Bench("sampler", "What does the stats sampler cost, and does it keep up with every container?",
          (*PY, "benchmarks/sampler_overhead.py"), ("benchmarks/results/sampler_overhead.json",), 2),
    Bench("supervisor", "What does a run's own supervisor process cost against supervision in the command's process: "
          "wall − train and the command's time for the same small job, side by side, and the supervisor's start?",
          (*PY, "benchmarks/supervisor_cost.py"), ("benchmarks/results/supervisor.json",), 3),
    Bench("peers", "How do orch, TorchX's local_docker scheduler and the Kubeflow SDK's container backend compare on "
          "the same two users' scripts (the torchrun DDP and Keras MWMS tutorials), unchanged, on 1, 2 and 3 "
          "containers: wall time, time beyond training, peak memory per container, what each leaves in the engine, "
          "and what a killed container leaves?", (*PY, "benchmarks/peers.py"),
          ("benchmarks/results/peers.json", "benchmarks/results/peers.md"), 90),
    Bench("input-limits", "How long does orch take to read, or refuse, the worst experiment files it accepts?",
          (*PY, "benchmarks/input_limits.py"),
          ("benchmarks/results/input_limits.json", "benchmarks/results/input_limits.md"), 1),
    Bench("collect-bounds", "Can one worker's records slow `orch collect` or fill its memory? Collect of a run with a "
          "worker that wrote 0, 4 and 400 MiB of records.", (*PY, "benchmarks/collect_bounds.py", "--repeats", "5"),
          ("benchmarks/results/collect_bounds.json", "benchmarks/results/collect_bounds.md"), 5),
    Bench("disk-limit", "How far past --disk-limit do writers get, at several speeds up to as fast as the disk takes "
          "it, and which limits could the kernel enforce on this engine instead?", (*PY, "benchmarks/disk_limit.py"),
          ("benchmarks/results/disk_limit.json", "benchmarks/results/disk_limit.md"), 10),
    Bench("disk-watch", "What does one scan of the replicas' folders cost, by the files they left?",
          (*PY, "benchmarks/disk_watch.py"), ("benchmarks/results/disk-watch.json", "benchmarks/results/disk-watch.md"),
          1),
    Bench("ci-time", "How long do the tests take: make test-fast (cold and warm), and bash .ci/run from a clean clone "
          "with nothing cached, as CI runs it?", (*PY, "benchmarks/ci_time.py", "--cold"),
          ("benchmarks/results/ci.json", "benchmarks/results/ci.md"), 20, root=True),
    Bench("swarm-nodes", "Does a job run across a two-node swarm, and how long does each step take?",
          (*PY, "benchmarks/swarm_nodes.py"), ("benchmarks/results/swarm-nodes.json", "benchmarks/results/swarm-nodes.md"),
          3, root=True),
    Bench("slurm", "What does a run cost beyond training on Slurm against Compose? The same 3-worker job on Compose, on a "
          "two-node Slurm cluster and on one of its nodes, in turn.",
          (*PY, "benchmarks/slurm_vs_compose.py"), ("benchmarks/results/slurm.json", "benchmarks/results/slurm.md"),
          5, root=True),
    Bench("podman", "Does a run cost more on Podman than on Docker? The same job on 1 and 3 workers on each engine, in "
          "turn: wall − train, train time and T(3)/T(1), with the copy of the images to Podman timed once.",
          (*PY, "benchmarks/podman_vs_docker.py"), ("benchmarks/results/podman.json", "benchmarks/results/podman.md"),
          4, root=True),
    Bench("podman-alone", "Does the main job run where only Podman answers? With Docker's daemon stopped: doctor, "
          "the images built on Podman itself, 1 and 3 workers and collect, timed; then each worker's accuracy against "
          "the same jobs on Docker, with the images copied there.",
          (*PY, "benchmarks/podman_alone.py"),
          ("benchmarks/results/podman_alone.json", "benchmarks/results/podman_alone.md"), 6, root=True),
    Bench("mutation", "Can the tests of orch's pure core fail? mutmut's mutants of each module against the tests that "
          "exercise it: how many are killed, and why each survivor makes no difference.",
          (*PY, "benchmarks/mutation.py"), ("benchmarks/results/mutation.json",), 30),
)


def writer_of(path: str) -> Bench | None:
    """The entry that writes ``path`` (from the repository's root), if any."""
    return next((b for b in SUITE for w in b.writes if path == w or (w.endswith("/") and path.startswith(w))), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="entries to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the entries and run nothing")
    args = parser.parse_args()
    known = {b.name: b for b in SUITE}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"suite.py: no entry {unknown[0]!r}; the entries are {', '.join(known)}", file=sys.stderr)
        return 2
    chosen = [known[n] for n in args.names] if args.names else list(SUITE)
    if args.list:
        for b in chosen:
            print(f"{b.name}: {b.shown()}  ->  {', '.join(b.writes)}  (about {b.minutes} min)")
        return 0
    total = sum(b.minutes for b in chosen)
    print(f"suite.py: {len(chosen)} benchmarks, about {total // 60} h {total % 60} min on 2 cores", file=sys.stderr)
    failed = []
    for i, b in enumerate(chosen, 1):
        print(f"suite.py: [{i}/{len(chosen)}] {b.name}: {b.shown()} (about {b.minutes} min)", file=sys.stderr)
        started = time.monotonic()
        argv = ["sudo", "-E", *b.command] if b.root and subprocess.run(["id", "-u"], capture_output=True,
                                                                        text=True).stdout.strip() != "0" else b.command
        if subprocess.run(argv, cwd=ROOT).returncode != 0:
            failed.append(b.name)
        print(f"suite.py: {b.name} took {(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)
    if failed:
        print(f"suite.py: failed: {', '.join(failed)} (their output is above)", file=sys.stderr)
        return 1
    print("suite.py: done; `make figures` redraws the pages from the new results", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
