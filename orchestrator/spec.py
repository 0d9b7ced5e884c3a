"""The job spec: one frozen, validated description of a training job."""
from __future__ import annotations

import re
import secrets
import time
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import contract
from .errors import InvalidSpec

RUN_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
DATASETS = ("mnist", "synthetic")
NETWORK_MODES = ("bridge", "shared", "host")
COLLECTIVES = ("ring", "auto")


class JobSpec(BaseModel):
    """Everything that defines a training job; never mutated, derive new ones with ``replace``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    workers: int = Field(1, ge=1, le=32, description="number of worker containers")
    dataset: Literal["mnist", "synthetic"] = Field("mnist", description="training data")
    samples: int = Field(60_000, ge=1, description="samples drawn from the data set, split 64/16/20")
    epochs: int = Field(5, ge=1, le=1000, description="passes over each worker's shard")
    global_batch: int = Field(96, ge=1, le=65_536, description="batch summed over all workers")
    learning_rate: float = Field(1e-3, gt=0, le=10, description="Adam learning rate")
    seed: int = Field(42, ge=0, le=2**31 - 1, description="seed of the sample draw, split and shuffles")
    model: Literal["mlp"] = Field("mlp", description="seed 000's MLP 784-25-15-10")
    steps_per_execution: int = Field(50, ge=1, le=10_000, description="training steps per tf.function call")
    network: Literal["bridge", "shared", "host"] = Field(
        "bridge",
        description="bridge: one internal network, a host name per worker; shared: every worker in worker-0's "
                    "network namespace, on loopback; host: the host's network (not isolated)",
    )
    threads: int = Field(
        0, ge=0, le=256, description="TensorFlow intra- and inter-op threads (and OMP_NUM_THREADS) per worker; 0: TF's default"
    )
    pin_cpus: bool = Field(True, description="pin each worker to its own share of the host's cores, once TensorFlow is imported")
    log_reduction: Literal["epoch", "first", "sum"] = Field(
        "epoch",
        description="per-step metrics: epoch (none; the metrics are read across workers once per epoch), first "
                    "(Keras' steps: each reads its metrics across workers, logs kept local) or sum (Keras' default: "
                    "that, plus an all-reduce of the logs); epoch metrics are global in every mode",
    )
    cache: bool = Field(True, description="keep each worker's shard in memory after the first pass (tf.data cache)")
    prefetch: int = Field(-1, ge=-1, le=1024, description="batches tf.data prepares ahead: -1 AUTOTUNE, 0 none")
    shuffle_buffer: int = Field(
        0, ge=0, le=10_000_000, description="tf.data shuffle buffer in samples; 0: the whole shard (a full shuffle)"
    )
    collective: Literal["ring", "auto"] = Field("ring", description="all-reduce implementation")
    bytes_per_pack: int = Field(32 * 2**20, ge=0, le=2**31, description="all-reduce packing size in bytes")
    collective_timeout: float = Field(
        0, ge=0, le=86_400,
        description="TensorFlow's own all-reduce timeout (CommunicationOptions); 0: off. It costs a thread per "
                    "all-reduce for that long, so orch's stall_timeout is the default guard",
    )
    stall_timeout: float = Field(
        120, ge=5, le=86_400, description="seconds without training progress on any worker before the job fails"
    )
    checkpoint_every: int = Field(
        0, ge=0, le=10_000_000, description="checkpoint every N training steps; 0: at the end of every epoch"
    )
    max_restarts: int = Field(0, ge=0, le=10, description="restarts of the whole worker group after a retryable failure")
    startup_timeout: float = Field(
        300, ge=5, le=86_400, description="seconds for every worker to join the cluster before the job fails"
    )
    cpus: Optional[float] = Field(None, gt=0, le=512, description="CPU limit per container")
    memory_mb: int = Field(2048, ge=256, le=1_048_576, description="memory limit per container in MiB")
    pids_limit: int = Field(1024, ge=64, le=1_000_000, description="process limit per container")
    image: Optional[str] = Field(None, max_length=200, description="image to run instead of orch's own")
    run_id: str = Field(..., pattern=RUN_ID_PATTERN, description="unique run id (lowercase, digits, - and _)")

    @model_validator(mode="after")
    def _consistent(self) -> "JobSpec":
        available = contract.DATASET_SIZES[self.dataset]
        if self.samples > available:
            raise ValueError(f"samples: {self.dataset} has {available} training images, got {self.samples}")
        if self.global_batch % self.workers:
            lower = self.global_batch - self.global_batch % self.workers
            raise ValueError(
                f"global_batch: {self.global_batch} is not divisible by {self.workers} workers; "
                f"use {lower or self.workers} or {lower + self.workers}"
            )
        train, val, test = contract.split_sizes(self.samples)
        per_worker = self.global_batch // self.workers
        for name, size in (("training", train), ("validation", val)):
            if size // self.workers < per_worker:
                need = -(-self.global_batch * 100 // (64 if name == "training" else 16))
                raise ValueError(
                    f"samples: {self.samples} leave {size} {name} samples, fewer than one global batch "
                    f"of {self.global_batch}; use at least {need} samples or a smaller batch"
                )
        if test < 1:
            raise ValueError(f"samples: {self.samples} leave no test samples")
        if self.image is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", self.image):
            raise ValueError(f"image: {self.image!r} is not a valid image reference")
        return self

    def replace(self, **changes: Any) -> "JobSpec":
        """Return a new, validated spec with ``changes`` applied."""
        return make_spec(**{**self.model_dump(), **changes})

    def training_fields(self) -> dict[str, Any]:
        """The fields the trainer reads, as the contract names them."""
        return {name: getattr(self, name) for name in contract.TRAINING_FIELDS}


def new_run_id(workers: int) -> str:
    """A fresh, sortable run id such as ``20261121-143005-w3-1a2b``."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime()) + f"-w{workers}-{secrets.token_hex(2)}"


def shown(part: Any) -> str:
    """A name from user input as it may appear in a one-line message: plain if harmless, else repr()."""
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text) else repr(text[:64])


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(shown(part) for part in error.get("loc", ())) or "spec"
    msg = error.get("msg", "invalid")
    if error.get("type") == "value_error":
        return msg.removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        allowed = ", ".join(sorted(JobSpec.model_fields))
        return f"{loc}: unknown field; allowed fields are {allowed}"
    got = repr(error.get("input"))[:80]
    if error.get("type") == "literal_error":
        return f"{loc}: {msg} (got {got})"
    return f"{loc}: {msg.lower()} (got {got})"


def make_spec(**fields: Any) -> JobSpec:
    """Build a validated spec; a missing ``run_id`` gets a fresh one. Raises InvalidSpec."""
    if fields.get("run_id") is None:
        fields["run_id"] = new_run_id(fields.get("workers", 1) if isinstance(fields.get("workers"), int) else 1)
    try:
        return JobSpec(**fields)
    except ValidationError as exc:
        raise InvalidSpec("; ".join(_describe(e) for e in exc.errors(include_url=False))) from None
    except (TypeError, ValueError) as exc:  # e.g. a non-string key
        raise InvalidSpec(f"spec: {shown(exc)}") from None
