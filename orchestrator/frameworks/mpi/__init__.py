"""MPI: one rank per container, launched without ssh by MPICH's Hydra.

Why Hydra's manual launcher: it starts no process on another host. Replica 0 runs ``mpiexec -launcher manual``,
which prints one proxy command per host and waits for the proxies to call back on its control port; replica 0
runs the first itself and hands each other replica its own over a small TCP port (``LAUNCH_PORT``), and each
runs it. So no replica needs ssh, an agent or an extra privilege, and nothing but the job's own network is used.
(Open MPI's alternative, a non-ssh agent, still needs a remote-execution channel of its own; Hydra's persistent
servers would each be a daemon listening for any launch.)

With ``transport: shm`` the replicas look like processes of one host and MPI's ranks meet over shared memory;
with ``transport: tcp`` each replica keeps its own host name and namespaces and the ranks talk TCP over the cluster
network (``frameworks/mpi_ranks.py``, which PyTorch's and JAX's trainers share under ``--transport shm``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from orchestrator import contract
from orchestrator.frameworks import mpi_ranks
from orchestrator.frameworks.base import BenchTransport, Framework, Job, options_of
from orchestrator.frameworks.mpi.options import MpiOptions
from orchestrator.frameworks.mpi_ranks import LAUNCH_PORT, UCX_TRANSPORTS

Key = tuple[str, int]


def transport(spec: Job) -> str:
    """The transport a job's ranks use: ``auto`` is shared memory on one host (Compose), TCP across nodes."""
    chosen = options_of(spec, MpiOptions).transport
    return chosen if chosen != "auto" else "shm" if spec.backend == "compose" else "tcp"


class Mpi(Framework):
    """MPI over MPICH and mpi4py, in orch's TensorFlow image (which carries both as wheels)."""

    name = "mpi"
    title = "MPI"
    trainer_entry = "mpi_entry"
    options = MpiOptions
    port = LAUNCH_PORT
    # Trainer's MPI plugin launches Open MPI over ssh (keys, a hostfile); orch's ranks start with MPICH's Hydra and
    # no ssh (above), so its TrainJob takes Trainer's plain policy, which only counts the nodes.
    takes_requirements = True  # the TensorFlow image's packages
    bench_transports = (
        BenchTransport("mpi-tcp", {"transport": "tcp"},
                       "MPICH over UCX's TCP, one container per rank on the run's bridge"),
        BenchTransport("mpi-shm", {"transport": "shm"},
                       "MPICH over UCX's shared memory, the containers sharing one IPC and PID namespace"),
    )
    bench_host_packages = ("mpich", "mpi4py", "numpy")
    # The ranks compute with TensorFlow: its image carries MPICH and mpi4py too, and this trainer beside its own.
    # `orch build` makes it, and `orch build --framework mpi` the same.
    image_of = "tensorflow"

    def floor_transport(self, spec: Job) -> Optional[str]:
        return f"mpi-{transport(spec)}"

    def shares_host(self, spec: Job) -> bool:
        """Whether the replicas must look like processes of one host (one host name, IPC and PID namespace)."""
        return spec.workers > 1 and transport(spec) == "shm"

    def env(self, spec: Job, role: str, addresses: dict[Key, str]) -> dict[str, str]:
        if spec.world_size == 1 and not spec.script:
            return {}  # orch's one rank: no MPI at all, the baseline
        return mpi_ranks.env(spec, addresses, transport(spec))

    def launch(self, spec: Job, command: tuple[str, ...]) -> Optional[tuple[str, ...]]:
        """The command a replica runs: the rank's command (orch's trainer by default) under orch's launcher."""
        # A script runs under Hydra at every N, 1 included, so that it sees the variables mpiexec gives a rank.
        if spec.world_size == 1 and not command:
            return contract.TRAINER_COMMAND
        return mpi_ranks.launch(command)

    def describe(self, spec: Job, key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        return {"mpi": None if spec.world_size == 1 and not spec.script else
                mpi_ranks.describe(spec, key, addresses, transport(spec))}

    def host_processes(self, ranks: int, argv: list[str], env: dict[str, str], venv: Path,
                       free_ports: Any) -> list[tuple[list[str], dict[str, str]]]:
        # As in the containers: UCX's copy through shared memory (no single-copy CMA, which needs ptrace rights and
        # so differs between a host and a container), and Hydra's fork launcher, which starts the ranks here
        # without asking whether this host is local (it would try ssh for a host it thinks is not).
        env = {**env, "UCX_TLS": UCX_TRANSPORTS["shm"], "UCX_POSIX_USE_PROC_LINK": "y", "UCX_WARN_UNUSED_ENV_VARS": "n"}
        return [([str(venv / "bin" / "mpiexec"), "-launcher", "fork", "-n", str(ranks), str(venv / "bin" / "python"),
                  *argv], env)]



FRAMEWORK = Mpi()
