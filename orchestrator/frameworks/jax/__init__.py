"""JAX: one process per container, met through ``jax.distributed.initialize``; XLA's collectives over gloo on CPU.

The environment is Kubeflow Trainer's JAX runtime's: JAX_COORDINATOR_ADDRESS (process 0, which hosts the
coordinator service, on a fixed port of its own network namespace), JAX_NUM_PROCESSES and JAX_PROCESS_ID (the
container's rank). orch's trainer passes them to ``initialize``; a user's script runs under a small launcher
(``orch_trainer.jax_env``) that also lets a bare ``jax.distributed.initialize()`` find them. One container is
the serial baseline: no coordinator at all.

With ``--transport shm`` there is no coordinator either: the processes are started as MPI's ranks are
(``frameworks/mpi_ranks.py``), look like processes of one host, and sum their gradients with MPI over shared memory.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from orchestrator import __version__, macros
from orchestrator.frameworks import mpi_ranks
from orchestrator.frameworks.base import BenchTransport, Framework, Job, options_of
from orchestrator.frameworks.jax.options import JaxOptions
from orchestrator.rendezvous import host_of

Key = tuple[str, int]
IMAGE_REPO = "orch-jax"
COORDINATOR_PORT = 6379  # the coordinator service of process 0 (JAX's examples' port)


def over_shm(spec: Job) -> bool:
    """Whether the job's gradients cross over MPI's shared memory (orch's trainer on several containers)."""
    return options_of(spec, JaxOptions).transport == "shm" and spec.world_size > 1 and not spec.script


def image_ref() -> str:
    """The tag of orch's JAX trainer image for this version."""
    return f"{IMAGE_REPO}:{__version__}"


class Jax(Framework):
    name = "jax"
    title = "JAX"
    trainer_entry = "jax_loop"
    options = JaxOptions
    port = COORDINATOR_PORT
    on_demand = True  # `orch build --framework jax`
    # Trainer's jax plugin: it gives each node JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID.
    trainer_policy = "jax"
    log_noise = (r"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. Expected number of connected peer ranks is",)
    bench_transports = (
        BenchTransport("jax-gloo", {}, "XLA's all-reduce over gloo's TCP (JAX's CPU collectives), one container per "
                       "process on the run's bridge"),
    )
    # Its host reference is JAX's own processes (XLA's collectives over gloo), not PyTorch's gloo: its own name.
    bench_api = "jax"

    def floor_transport(self, spec: Job) -> Optional[str]:
        return "mpi-shm" if over_shm(spec) else "jax-gloo"

    def shares_host(self, spec: Job) -> bool:
        return over_shm(spec)

    def env(self, spec: Job, role: str, addresses: dict[Key, str]) -> dict[str, str]:
        if spec.world_size == 1 and not spec.script:
            return {}  # orch's serial baseline: no coordinator
        if over_shm(spec):
            return {"JAX_NUM_PROCESSES": str(spec.world_size), "JAX_PROCESS_ID": macros.RANK,
                    **mpi_ranks.env(spec, addresses, "shm")}
        coordinator = host_of(next(iter(addresses.values())))
        return {"JAX_COORDINATOR_ADDRESS": f"{coordinator}:{COORDINATOR_PORT}",
                "JAX_NUM_PROCESSES": str(spec.world_size), "JAX_PROCESS_ID": macros.RANK}

    def launch(self, spec: Job, command: tuple[str, ...]) -> Optional[tuple[str, ...]]:
        """A user's script runs under orch's launcher, in whose process a bare ``jax.distributed.initialize()``
        finds the job; orch's own trainer initializes with the variables itself."""
        if not command:
            return mpi_ranks.launch(command) if over_shm(spec) else None
        return ("python3", "-m", "orch_trainer.jax_env", *command)

    def describe(self, spec: Job, key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        env = self.replica_env(spec, key, addresses)
        if not env:
            return {"jax": None}
        if over_shm(spec):
            return {"jax": {"process_id": int(env["JAX_PROCESS_ID"]), "num_processes": int(env["JAX_NUM_PROCESSES"]),
                            "collectives": "mpi-shm", "mpi": mpi_ranks.describe(spec, key, addresses, "shm")}}
        return {"jax": {"process_id": int(env["JAX_PROCESS_ID"]), "num_processes": int(env["JAX_NUM_PROCESSES"]),
                        "coordinator": env["JAX_COORDINATOR_ADDRESS"], "collectives": "gloo"}}

    def image_tags(self) -> dict[str, str]:
        return {self.name: image_ref()}

    def host_processes(self, ranks: int, argv: list[str], env: dict[str, str], venv: Path,
                       free_ports: Any) -> list[tuple[list[str], dict[str, str]]]:
        # One coordinator on process 0, every process on loopback.
        env = {**env, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_ports(1)[0]}", "JAX_NUM_PROCESSES": str(ranks)}
        return [([str(venv / "bin" / "python"), *argv], {**env, "JAX_PROCESS_ID": str(i)}) for i in range(ranks)]


FRAMEWORK = Jax()
