"""Each framework's own spec options: one frozen model per framework, told apart by ``name``.

They live apart from the frameworks' planning code (``frameworks/``), which imports the spec, so that
``spec.py`` can build its union from them with no import cycle. A new framework adds its model here,
to ``FrameworkOptions`` and to ``OPTION_MODELS``.
"""
from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class TensorFlowOptions(BaseModel):
    """TensorFlow: the strategy, the step loop, the tf.data pipeline and the all-reduce."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["tensorflow"] = Field("tensorflow", description="the framework")
    strategy: Literal["auto", "single", "mirrored", "mwms", "custom", "ps"] = Field(
        "auto",
        description="single: one container, no distribution (the baseline); mirrored: one container, --replicas "
                    "replicas with MirroredStrategy (logical CPU devices here, GPUs where present); mwms: "
                    "MultiWorkerMirroredStrategy, one worker per container; custom: the same with orch's own "
                    "training loop and an explicit gradient all-reduce; ps: ParameterServerStrategy, a chief, "
                    "--parameter-servers servers and --workers workers, each in its own container, training "
                    "asynchronously; auto: single for 1 worker, else mwms.",
    )
    replicas: int = Field(1, ge=1, le=64, description="Replicas inside the one container of --strategy mirrored.")
    parameter_servers: int = Field(1, ge=1, le=16,
                                   description="Parameter-server containers of --strategy ps; the variables are "
                                               "spread over them.")
    steps_per_execution: int = Field(50, ge=1, le=10_000, description="Training steps per tf.function call.")
    log_reduction: Literal["epoch", "first", "sum"] = Field(
        "epoch",
        description="Per-step metrics: none, read across workers once per epoch (epoch); Keras' steps, which read "
                    "them across workers every step, logs kept local (first) or also all-reduced (sum).",
    )
    cache: bool = Field(True, description="Keep each worker's shard in memory after the first pass (tf.data cache).",
                        json_schema_extra={"default_text": "cache"})
    prefetch: int = Field(-1, ge=-1, le=1024, description="Batches tf.data prepares ahead; -1 = AUTOTUNE, 0 = none.")
    shuffle_buffer: int = Field(
        0, ge=0, le=10_000_000, description="tf.data shuffle buffer in samples; 0 = the whole shard, a full shuffle."
    )
    collective: Literal["ring", "auto"] = Field("ring", description="All-reduce implementation.")
    bytes_per_pack: int = Field(32 * 2**20, ge=0, le=2**31, description="All-reduce packing in bytes.")
    collective_timeout: float = Field(
        0, ge=0, le=86_400,
        description="TensorFlow's own all-reduce timeout (CommunicationOptions); 0 = off. Costs a thread per "
                    "all-reduce for that long, so orch's stall timeout is the default guard.",
    )


    def resolved_strategy(self, workers: int) -> str:
        """The strategy a job of ``workers`` containers runs: ``auto`` made concrete."""
        if self.strategy == "auto":
            return "single" if workers == 1 else "mwms"
        return self.strategy

    def roles(self, workers: int) -> list[tuple[str, int]]:
        """The job's roles and their replica counts: worker × N, or chief, ps × K and worker × N for ps."""
        if self.resolved_strategy(workers) == "ps":
            return [("chief", 1), ("ps", self.parameter_servers), ("worker", workers)]
        return [("worker", workers)]

    def reporting_roles(self, workers: int) -> tuple[str, ...]:
        """The roles whose replicas train, report progress and write results; the job is done when they are.

        Under ps the chief runs the training loop; the servers and workers serve it and never exit."""
        return ("chief",) if self.resolved_strategy(workers) == "ps" else ("worker",)

    def per_worker_batch(self, workers: int, global_batch: int) -> int:
        """Samples one worker computes per step: a share of the global batch, or all of it under ps, where
        each step (one update of the variables) runs on a single worker."""
        return global_batch if self.resolved_strategy(workers) == "ps" else global_batch // workers

    def check(self, workers: int, global_batch: int) -> None:
        """Raise ValueError (one line, naming the flags) if the strategy and the job's shape do not fit."""
        strategy = self.resolved_strategy(workers)
        if strategy == "mirrored" and global_batch % self.replicas:
            lower = global_batch - global_batch % self.replicas
            raise ValueError(f"global_batch: {global_batch} is not divisible by {self.replicas} replicas; use "
                             f"{lower or self.replicas} or {lower + self.replicas}")
        if strategy in ("single", "mirrored") and workers != 1:
            raise ValueError(f"strategy: {strategy} runs in one container; use --workers 1"
                             + (" and --replicas N for N replicas" if strategy == "mirrored" else "")
                             + ", or --strategy mwms for N containers")
        if self.parameter_servers != 1 and strategy != "ps":
            raise ValueError(f"parameter_servers: --parameter-servers is for --strategy ps, not {strategy}")
        if self.strategy in ("single", "mirrored", "ps"):  # auto on 1 worker is single too, with nothing to tune
            changed = [f"--{f.replace('_', '-')}" for f in ("collective", "bytes_per_pack", "collective_timeout")
                       if getattr(self, f) != type(self).model_fields[f].default]
            if changed:
                raise ValueError(f"collective: {', '.join(changed)} set{'s' if len(changed) == 1 else ''} "
                                 f"MultiWorkerMirroredStrategy's all-reduce (mwms, custom); {strategy} has none")
        if self.log_reduction != "epoch" and strategy in ("custom", "ps"):
            raise ValueError(f"log_reduction: --log-reduction chooses Keras' steps in fit() (single, mirrored, mwms); "
                             f"{strategy} runs orch's own loop, which reads its metrics once per epoch")
        if self.replicas != 1 and strategy != "mirrored":
            raise ValueError(f"replicas: --replicas {self.replicas} is for --strategy mirrored (one container, "
                             f"N replicas); {strategy} runs one replica per container")


class MpiOptions(BaseModel):
    """MPI (seed 001's mpi4py strategy): one rank per container; TensorFlow computes the gradients, MPI's
    Allreduce averages them, every rank applies the same update."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["mpi"] = Field("mpi", description="the framework")
    transport: Literal["auto", "shm", "tcp"] = Field(
        "auto",
        description="How the ranks of --framework mpi reach each other: shm (shared memory: the containers share "
                    "one IPC and PID namespace and a host name, so MPI sees one host; Compose only), tcp (the "
                    "cluster network), or auto: shm on Compose, tcp on Swarm and Kubernetes.",
    )

    def resolved_strategy(self, workers: int) -> str:
        return "mpi"

    def roles(self, workers: int) -> list[tuple[str, int]]:
        return [("worker", workers)]

    def reporting_roles(self, workers: int) -> tuple[str, ...]:
        return ("worker",)

    def per_worker_batch(self, workers: int, global_batch: int) -> int:
        return global_batch // workers

    def check(self, workers: int, global_batch: int) -> None:
        """Nothing of MPI's own depends on the job's shape; the spec checks the batch and the backend."""


class TorchOptions(BaseModel):
    """PyTorch (seed 002): DistributedDataParallel over gloo, one rank per container; one container is the serial
    baseline, a plain training loop with no process group. SGD with momentum 0.9."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["torch"] = Field("torch", description="the framework")
    batch_per_worker: int = Field(
        0, ge=0, le=65_536, json_schema_extra={"default_text": "off: --batch-size is the global batch"},
        description="With --framework torch: each rank's own batch, so the global batch is this times --workers and "
                    "grows with N (seed 002's per-process batch, to reproduce it); leave --batch-size out with it. "
                    "0 = off: --batch-size is the global batch, split among the ranks, the same work per step for "
                    "every N.",
    )

    # Generic fields whose default differs under this framework: seed 002's CNN, and SGD's learning rate.
    generic_defaults: ClassVar[dict[str, object]] = {"model": "cnn", "learning_rate": 0.01}

    def resolved_strategy(self, workers: int) -> str:
        return "serial" if workers == 1 else "ddp"

    def roles(self, workers: int) -> list[tuple[str, int]]:
        return [("worker", workers)]

    def reporting_roles(self, workers: int) -> tuple[str, ...]:
        return ("worker",)

    def per_worker_batch(self, workers: int, global_batch: int) -> int:
        return global_batch // workers  # with --batch-per-worker the spec derives the global batch from it

    def check(self, workers: int, global_batch: int) -> None:
        """Nothing of PyTorch's own depends on the job's shape; the spec checks the batch and the model."""


# A discriminated union: a spec's ``framework.name`` picks the model that validates the rest.
FrameworkOptions = Annotated[Union[TensorFlowOptions, MpiOptions, TorchOptions], Field(discriminator="name")]
OPTION_MODELS: dict[str, type[BaseModel]] = {"tensorflow": TensorFlowOptions, "mpi": MpiOptions,
                                             "torch": TorchOptions}
