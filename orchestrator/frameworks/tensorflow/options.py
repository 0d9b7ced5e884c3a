"""TensorFlow's own spec options."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.frameworks.base import TRAINER_ONLY, FrameworkOptions, Job, nearest_multiples


class TensorFlowOptions(FrameworkOptions):
    """TensorFlow: the strategy, the step loop, the tf.data pipeline and the all-reduce."""

    name: Literal["tensorflow"] = Field(default="tensorflow", description="the framework")
    strategy: Literal["auto", "single", "mirrored", "mwms", "custom", "ps"] = Field(
        default="auto",
        description="single: one container, no distribution (the baseline); mirrored: one container, --replicas "
                    "replicas with MirroredStrategy (logical CPU devices here, GPUs where present); mwms: "
                    "MultiWorkerMirroredStrategy, one worker per container; custom: the same with orch's own "
                    "training loop and an explicit gradient all-reduce; ps: ParameterServerStrategy, a chief, "
                    "--parameter-servers servers and --workers workers, each in its own container, training "
                    "asynchronously; auto: single for 1 worker, else mwms.",
    )
    replicas: int = Field(default=1, ge=1, le=64, json_schema_extra=TRAINER_ONLY,
                          description="Replicas inside the one container of --strategy mirrored.")
    parameter_servers: int = Field(default=1, ge=1, le=16,
                                   description="Parameter-server containers of --strategy ps; the variables are "
                                               "spread over them.")
    steps_per_execution: int = Field(default=50, ge=1, le=10_000, json_schema_extra=TRAINER_ONLY,
                                     description="Training steps per tf.function call.")
    log_reduction: Literal["epoch", "first", "sum"] = Field(
        default="epoch", json_schema_extra=TRAINER_ONLY,
        description="Per-step metrics: none, read across workers once per epoch (epoch); Keras' steps, which read "
                    "them across workers every step, logs kept local (first) or also all-reduced (sum).",
    )
    cache: bool = Field(default=True,
                        description="Keep each worker's shard in memory after the first pass (tf.data cache).",
                        json_schema_extra={**TRAINER_ONLY, "default_text": "cache"})
    prefetch: int = Field(default=-1, ge=-1, le=1024, json_schema_extra=TRAINER_ONLY,
                          description="Batches tf.data prepares ahead; -1 = AUTOTUNE, 0 = none.")
    shuffle_buffer: int = Field(
        default=0, ge=0, le=10_000_000, json_schema_extra=TRAINER_ONLY,
        description="tf.data shuffle buffer in samples; 0 = the whole shard, a full shuffle."
    )
    collective: Literal["ring", "auto"] = Field(default="ring", json_schema_extra=TRAINER_ONLY,
                                                description="All-reduce implementation.")
    bytes_per_pack: int = Field(default=32 * 2**20, ge=0, le=2**31, json_schema_extra=TRAINER_ONLY,
                                description="All-reduce packing in bytes.")
    collective_timeout: float = Field(
        default=0.0, ge=0, le=86_400, json_schema_extra=TRAINER_ONLY,
        description="TensorFlow's own all-reduce timeout (CommunicationOptions); 0 = off. Costs a thread per "
                    "all-reduce for that long, so orch's stall timeout is the default guard.",
    )


    one_rank_per_container: ClassVar[str] = (
        "TensorFlow runs one process per container: a MultiWorkerMirroredStrategy or parameter-server task is a "
        "container (its TF_CONFIG entry), and one process already computes on every core it is given; run more "
        "containers with --workers instead")
    training_fields: ClassVar[tuple[str, ...]] = (
        "replicas", "parameter_servers", "steps_per_execution", "collective", "bytes_per_pack", "collective_timeout",
        "log_reduction", "cache", "prefetch", "shuffle_buffer")

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

    def validation_readers(self, workers: int) -> int:
        """Under ps only the chief validates, on the whole validation split; the others shard it."""
        return 1 if self.resolved_strategy(workers) == "ps" else workers

    def check_job(self, spec: Job) -> None:
        strategy = self.resolved_strategy(spec.workers)
        if spec.checkpoint_every and strategy in ("custom", "ps"):
            super().check_job(spec)
        if strategy == "mirrored" and spec.gpus and self.replicas > spec.gpus:
            raise ValueError(f"replicas: {self.replicas} replicas need as many GPUs, got --gpus {spec.gpus}")

    def check(self, workers: int, global_batch: int) -> None:
        """Raise ValueError (one line, naming the flags) if the strategy and the job's shape do not fit."""
        strategy = self.resolved_strategy(workers)
        if strategy == "mirrored" and global_batch % self.replicas:
            raise ValueError(f"global_batch: {global_batch} is not divisible by {self.replicas} replicas; use "
                             f"{nearest_multiples(global_batch, self.replicas)}")
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
