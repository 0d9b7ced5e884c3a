"""JAX's own spec options: none beyond the generic fields, and its checks."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.frameworks.base import FrameworkOptions, Job


class JaxOptions(FrameworkOptions):
    """JAX: one process per container, met through ``jax.distributed.initialize``; the global batch sharded across
    the processes' CPU devices and the gradients' mean all-reduced by XLA over gloo. One container is the serial
    baseline, the same step with no other process. Flax's MLP and optax's Adam, as TensorFlow's trainer."""

    name: Literal["jax"] = Field(default="jax", description="the framework")
    transport: Literal["auto", "gloo", "shm"] = Field(
        default="auto",
        description="With --framework jax: what carries the gradients, gloo (XLA's CPU collectives, TCP on the "
                    "cluster network; what a --script gets) or shm (MPI's all-reduce over shared memory between "
                    "the step's two jitted halves, the containers sharing one host's IPC and PID namespaces: "
                    "Compose and orch's own trainer); auto is gloo.",
    )

    training_fields: ClassVar[tuple[str, ...]] = ("startup_timeout", "stall_timeout", "transport")
    one_rank_per_container: ClassVar[str] = (
        "--framework jax runs one process per container (each container is one JAX process with its CPU device); "
        "use --workers for more processes")

    def resolved_strategy(self, workers: int) -> str:
        return "serial" if workers == 1 else "spmd"

    def check_job(self, spec: Job) -> None:
        """Raise ValueError (one line) where a JAX job asks for what orch's JAX trainer does not do."""
        if spec.model != "mlp" and spec.script is None:
            raise ValueError(f"model: --framework jax trains the mlp (seed 000's MNIST MLP); {spec.model} is "
                             "TensorFlow's or PyTorch's")
        if spec.gpus:
            raise ValueError("gpus: orch's JAX image is built for CPUs (jaxlib without CUDA); leave --gpus out")
        if self.transport == "shm":
            if spec.script is not None:
                raise ValueError("transport: shm is orch's JAX trainer's all-reduce; a --script brings its own "
                                 "(jax.distributed over gloo); leave --transport out")
            if spec.backend != "compose" and spec.workers > 1:
                raise ValueError(f"transport: shm makes the containers share one host's IPC and PID namespaces, "
                                 f"which only Compose can; leave --transport out with --backend {spec.backend}")
        if spec.network == "host":
            raise ValueError("network: --framework jax meets on the cluster network; --network host would put "
                             "its coordinator's and gloo's unauthenticated ports on every interface of this host; "
                             "leave --network out")
        super().check_job(spec)
