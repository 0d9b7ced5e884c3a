"""MPI's own spec options."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.frameworks.base import FrameworkOptions, Job


class MpiOptions(FrameworkOptions):
    """MPI (seed 001's mpi4py strategy): one rank per container; TensorFlow computes the gradients, MPI's
    Allreduce averages them, every rank applies the same update."""

    name: Literal["mpi"] = Field(default="mpi", description="the framework")
    transport: Literal["auto", "shm", "tcp"] = Field(
        default="auto",
        description="How the ranks of --framework mpi reach each other: shm (shared memory: the containers share "
                    "one IPC and PID namespace and a host name, so MPI sees one host; Compose only), tcp (the "
                    "cluster network), or auto: shm on Compose, tcp on Swarm and Kubernetes.",
    )

    training_fields: ClassVar[tuple[str, ...]] = ("transport",)

    def check_job(self, spec: Job) -> None:
        """Raise ValueError (one line) where an MPI job's shape does not fit its engine."""
        if spec.network != "bridge":
            raise ValueError(f"network: --framework mpi meets on the cluster network (bridge); --network "
                             f"{spec.network} is for TensorFlow's gRPC ports; leave --network out")
        if spec.gpus:
            raise ValueError("gpus: orch's MPI ranks compute on CPUs (its image is TensorFlow for CPUs, and MPI's "
                             "transports here are shared memory and TCP); leave --gpus out")
        if self.transport == "shm" and spec.backend != "compose" and spec.workers > 1:
            raise ValueError(f"transport: shm makes the containers share one host's IPC and PID namespaces, which "
                             f"only Compose can; use --transport tcp with --backend {spec.backend}")
        super().check_job(spec)
