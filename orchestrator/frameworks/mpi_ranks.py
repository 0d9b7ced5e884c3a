"""MPI ranks across containers: what any framework whose gradients cross over MPI gives its replicas.

``--framework mpi`` runs every step over MPI; PyTorch's and JAX's trainers do under ``--transport shm``, where
their gradients' all-reduce is MPI's over shared memory (MPICH and mpi4py in their images, as in TensorFlow's).
Each replica runs its command under ``orch_trainer.mpi_launch``, which starts the ranks with MPICH's Hydra and no
ssh (its docstring says how); this module says what the replicas need for it: the hosts in rank order, the
launcher's port, and UCX's transports.

Over shared memory the replicas must look like processes of one host (``shares_host``: one host name, and
replica 0's IPC and PID namespaces shared by the others), which only Compose can make; UCX, MPICH's transport,
then uses shared memory between them. Without the PID namespace UCX's shared-memory transports fail, since it
identifies peers through their processes. Single-copy transfers (CMA) would need ptrace rights, which the
locked-down containers do not have, so UCX copies through shared memory instead.
"""
from __future__ import annotations

from typing import Any

from orchestrator import contract
from orchestrator.rendezvous import host_of

Key = tuple[str, int]
LAUNCH_PORT = 7470  # where replica 0 hands each replica its Hydra proxy command
UCX_TRANSPORTS = {"shm": "self,posix,sysv,tcp", "tcp": "self,tcp"}
ENV_HOSTS = "ORCH_MPI_HOSTS"  # every replica's host name on the cluster network, in rank order
ENV_LAUNCH_PORT = "ORCH_MPI_LAUNCH_PORT"
ENV_PROCS = "ORCH_MPI_PROCS_PER_HOST"  # ranks per container (--procs-per-worker), mpiexec's -ppn
LAUNCHER = ("python3", "-m", "orch_trainer.mpi_launch")


def env(spec: Any, addresses: dict[Key, str], transport: str) -> dict[str, str]:
    """The variables every replica's launcher and ranks read, for ``transport`` (shm or tcp)."""
    return {
        ENV_HOSTS: ",".join(host_of(a) for a in addresses.values()),
        ENV_LAUNCH_PORT: str(LAUNCH_PORT),
        # Ranks of one container: MPICH's own single-copy path between them (CMA) needs ptrace rights too.
        **({ENV_PROCS: str(spec.procs_per_worker), "MPIR_CVAR_CH4_CMA_ENABLE": "0"}
           if spec.procs_per_worker > 1 else {}),
        "UCX_TLS": UCX_TRANSPORTS[transport],
        # The copy through shared memory needs no capability; single-copy (CMA) would need ptrace rights.
        "UCX_POSIX_USE_PROC_LINK": "y",
        "UCX_WARN_UNUSED_ENV_VARS": "n",
    }


def launch(command: tuple[str, ...]) -> tuple[str, ...]:
    """A replica's command under the launcher: the rank's command, orch's trainer by default."""
    return (*LAUNCHER, *(command or contract.TRAINER_COMMAND))


def describe(spec: Any, key: Key, addresses: dict[Key, str], transport: str) -> dict[str, Any]:
    """What the plan shows of a replica's place among the ranks."""
    hosts = [host_of(a) for a in addresses.values()]
    per, node = spec.procs_per_worker, list(addresses).index(key)
    ranks = {"rank": node} if per == 1 else {"ranks": list(range(node * per, (node + 1) * per))}
    return {**ranks, "world_size": spec.world_size, "hosts": hosts, "launcher": hosts[0], "transport": transport}
