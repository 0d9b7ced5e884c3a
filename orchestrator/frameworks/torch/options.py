"""PyTorch's own spec options."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from orchestrator.frameworks.base import TRAINER_ONLY, FrameworkOptions, Job


class TorchOptions(FrameworkOptions):
    """PyTorch (seed 002): DistributedDataParallel over gloo, one rank per container; one container is the serial
    baseline, a plain training loop with no process group. SGD with momentum 0.9."""

    name: Literal["torch"] = Field(default="torch", description="the framework")
    batch_per_worker: int = Field(
        default=0, ge=0, le=65_536,
        json_schema_extra={**TRAINER_ONLY, "default_text": "off: --batch-size is the global batch"},
        description="With --framework torch: each rank's own batch, so the global batch is this times --workers and "
                    "grows with N (the per-process batch of PyTorch's DDP examples); leave --batch-size out with it. "
                    "0 = off: --batch-size is the global batch, split among the ranks, the same work per step for "
                    "every N.",
    )

    transport: Literal["auto", "gloo", "shm"] = Field(
        default="auto",
        description="With --framework torch: what carries DDP's gradients, gloo (DDP's own backend, TCP on the "
                    "cluster network; what a --script gets) or shm (MPI's all-reduce over shared memory through "
                    "DDP's communication hook, the containers sharing one host's IPC and PID namespaces: Compose and "
                    "orch's own trainer); auto is gloo.",
    )

    # Generic fields whose default differs under this framework: seed 002's CNN, and SGD's learning rate.
    generic_defaults: ClassVar[dict[str, object]] = {"model": "cnn", "learning_rate": 0.01}

    training_fields: ClassVar[tuple[str, ...]] = ("batch_per_worker", "startup_timeout", "stall_timeout", "transport")

    @classmethod
    def prepare(cls, options: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        """With --batch-per-worker the global batch follows from it and the worker count."""
        data = super().prepare(options, data)
        per, workers = options.get("batch_per_worker"), data.get("workers", 1)
        try:  # as pydantic will read it (an experiment file may quote it); a bad value is the field's own error
            per = 0 if isinstance(per, bool) else int(per or 0)
        except (TypeError, ValueError):
            per = 0
        if per > 0 and isinstance(workers, int) and not isinstance(workers, bool):
            if "global_batch" in data and data["global_batch"] != per * workers:
                raise ValueError(f"global_batch: --batch-per-worker {per} with {workers} workers is a global batch "
                                 f"of {per * workers}, got --batch-size {data['global_batch']}; leave --batch-size out")
            data["global_batch"] = per * workers
        return data

    def resolved_strategy(self, workers: int) -> str:
        return "serial" if workers == 1 else "ddp"

    def check_job(self, spec: Job) -> None:
        """Raise ValueError (one line) where a PyTorch job asks for what orch's PyTorch trainer does not do."""
        if spec.model == "text" and spec.script is None:
            raise ValueError("model: --framework torch trains the cnn or the mlp on images; text is "
                             "TensorFlow's")
        per = self.batch_per_worker
        if per and spec.global_batch != per * spec.workers:
            raise ValueError(f"global_batch: --batch-per-worker {per} with {spec.workers} workers is a global batch "
                             f"of {per * spec.workers}, got {spec.global_batch}; leave --batch-size out")
        if spec.gpus:
            raise ValueError("gpus: orch's PyTorch image is built for CPUs (cuDNN's kernels and the GPU linear "
                             "algebra are left out of it); leave --gpus out")
        if self.transport == "shm":
            if spec.script is not None:
                raise ValueError("transport: shm is orch's DDP trainer's all-reduce; a --script brings its own "
                                 "(gloo, as its tutorial sets up); leave --transport out")
            if spec.backend != "compose" and spec.workers > 1:
                raise ValueError(f"transport: shm makes the containers share one host's IPC and PID namespaces, "
                                 f"which only Compose can; leave --transport out with --backend {spec.backend}")
            if spec.procs_per_worker > 1:
                raise ValueError("transport: shm runs one rank per container; leave --procs-per-worker out")
        if spec.network == "host":
            raise ValueError("network: --framework torch meets on the cluster network; --network host would put "
                             "gloo's unauthenticated ports on every interface of this host; leave --network out")
        super().check_job(spec)
