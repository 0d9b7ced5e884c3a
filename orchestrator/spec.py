"""The job spec: one frozen, validated description of a training job, typed from the CLI to the run record.

Generic fields (replicas, data, model, training, resources, engine, timeouts) sit on ``JobSpec``; each
framework's own options sit in ``JobSpec.framework``, a discriminated union (``framework_options.py``).
Field metadata is the one source of the CLI's flags: name, type, choices, default and help.
"""
from __future__ import annotations

import re
import secrets
import time
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import contract
from .errors import InvalidSpec
from .framework_options import OPTION_MODELS, FrameworkOptions, TensorFlowOptions

RUN_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
ROLE_PATTERN = r"^[a-z][a-z0-9]{0,15}$"
DEFAULT_ROLE = "worker"


def flag(name: Optional[str] = None, short: Optional[str] = None, default_text: Optional[str] = None) -> dict:
    """CLI metadata of a spec field: its flag (default ``--field-name``), a short form, the shown default."""
    return {"flag": name, "short": short, "default_text": default_text}


NO_FLAG = {"flag": False}


class Role(BaseModel):
    """A kind of replica and how many of it a job has (worker × N; later chief, ps × K, launcher)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(..., pattern=ROLE_PATTERN, description="role name")
    replicas: int = Field(..., ge=1, le=64, description="replicas of this role")


class JobSpec(BaseModel):
    """Everything that defines a training job; never mutated, derive new ones with ``replace``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    workers: int = Field(1, ge=1, le=32, json_schema_extra=flag(short="-n"),
                         description="Worker containers (1 = the single-worker baseline, no TF_CONFIG).")
    roles: tuple[Role, ...] = Field((), json_schema_extra=NO_FLAG,
                                    description="replicas per role; default: `workers` replicas of the role worker")
    framework: FrameworkOptions = Field(default_factory=TensorFlowOptions, json_schema_extra=NO_FLAG,
                                        description="the framework and its own options")
    backend: Literal["compose"] = Field("compose", description="Engine that runs the replicas.")
    dataset: Literal["mnist", "fashion-mnist", "vader-reviews", "synthetic"] = Field(
        "mnist",
        description="Data set, prepared on the host once and mounted read-only: mnist (60,000 images), fashion-mnist "
                    "(70,000), vader-reviews (13,056 review snippets, tokenized, for --model text), synthetic (made "
                    "in the trainer, for tests).",
    )
    samples: int = Field(60_000, ge=1, json_schema_extra=flag(short="-s"),
                         description="Samples drawn from the data set, split 64/16/20 into train, validation and test.")
    epochs: int = Field(5, ge=1, le=1000, json_schema_extra=flag(short="-e"), description="Epochs.")
    global_batch: int = Field(96, ge=1, le=65_536, json_schema_extra=flag("--batch-size", "-b"),
                              description="GLOBAL batch, summed over workers: the same work per step for every N.")
    learning_rate: float = Field(1e-3, gt=0, le=10, description="Adam learning rate.")
    seed: int = Field(42, ge=0, le=2**31 - 1, description="Seed of the draw, split and shuffles.")
    model: Literal["mlp", "cnn", "text"] = Field(
        "mlp",
        description="mlp: seed 000's MLP (784, 25, 15 and 10 units); cnn: seed 002's CNN (two convolutions with "
                    "max pooling, Dense 128, dropout); text: a token embedding, averaged, for review sentiment (text "
                    "data sets only).",
    )
    network: Literal["bridge", "shared", "host"] = Field(
        "bridge",
        description="bridge: an internal network, a host name per worker; shared: one network namespace on "
                    "loopback; host: the host's network (not isolated).",
    )
    expose_ports_on_host: bool = Field(
        False, json_schema_extra=flag(default_text="no"),
        description="Accept that --network host exposes every worker's unauthenticated rendezvous and all-reduce "
                    "(TensorFlow gRPC) ports on all of this host's interfaces; --network host is refused without it.",
    )
    threads: int = Field(0, ge=0, le=256,
                         description="Intra/inter-op threads and OMP_NUM_THREADS per worker; 0 = the framework's default.")
    pin_cpus: bool = Field(True, json_schema_extra=flag(default_text="pinned"),
                           description="Pin each worker to its own share of the host's cores.")
    stall_timeout: float = Field(
        120, ge=5, le=86_400,
        description="Seconds without training progress on any worker (a paused or stuck worker stalls every "
                    "all-reduce) before the job fails.",
    )
    checkpoint_every: int = Field(0, ge=0, le=10_000_000,
                                  description="Checkpoint every N training steps into the run directory; 0 = every epoch.")
    max_restarts: int = Field(
        0, ge=0, le=10,
        description="Restart the whole worker group up to K times after a retryable failure (a worker killed by a "
                    "signal or removed), resuming from the last checkpoint.",
    )
    startup_timeout: float = Field(300, ge=5, le=86_400,
                                   description="Seconds for every worker to join the cluster before the job fails.")
    cpus: Optional[float] = Field(None, gt=0, le=512, json_schema_extra=flag(default_text="none"),
                                  description="CPU limit per container.")
    gpus: int = Field(0, ge=0, le=16,
                      description="GPUs per container, as a device request to the engine (NVIDIA's runtime); 0 = "
                                  "none. The trainer uses the GPUs it sees: --strategy mirrored puts a replica on each.")
    memory_mb: int = Field(2048, ge=256, le=1_048_576, json_schema_extra=flag("--memory"),
                           description="Memory limit per container in MiB.")
    pids_limit: int = Field(1024, ge=64, le=1_000_000, json_schema_extra=NO_FLAG,
                            description="process limit per container")
    image: Optional[str] = Field(None, max_length=200, json_schema_extra=flag(default_text="orch's own"),
                                 description="Run this image instead of orch's own trainer image.")
    run_id: str = Field(..., pattern=RUN_ID_PATTERN, json_schema_extra=flag(default_text="time-based"),
                        description="Run id (lowercase letters, digits, - and _).")

    @model_validator(mode="before")
    @classmethod
    def _default_roles(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("roles"):
            workers = data.get("workers", 1)
            if isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1:
                data = {**data, "roles": ({"name": DEFAULT_ROLE, "replicas": workers},)}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "JobSpec":
        names = [r.name for r in self.roles]
        if len(set(names)) != len(names):
            raise ValueError(f"roles: each role may appear once, got {', '.join(names)}")
        if self.role_replicas(DEFAULT_ROLE) != self.workers:
            raise ValueError(f"roles: the role worker must have `workers` ({self.workers}) replicas")
        self.framework.check(self.workers, self.global_batch)
        if names != [DEFAULT_ROLE]:
            raise ValueError(f"roles: the {self.framework.name} framework runs only the role worker, got "
                             f"{', '.join(names)}")
        if self.network == "host" and not self.expose_ports_on_host:
            raise ValueError("network: host exposes every worker's unauthenticated gRPC server on all of this host's "
                             "interfaces; pass --expose-ports-on-host to accept that, or use --network bridge or shared")
        kind = contract.DATASET_KINDS[self.dataset]
        if (self.model == "text") != (kind == "text"):
            images = ", ".join(d for d, k in contract.DATASET_KINDS.items() if k == "image")
            texts = ", ".join(d for d, k in contract.DATASET_KINDS.items() if k == "text") or "none yet"
            raise ValueError(f"model: {self.model} cannot train on {self.dataset} ({kind}s); mlp and cnn train on "
                             f"images ({images}), text on reviews ({texts})")
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

    def role_replicas(self, role: str) -> int:
        """How many replicas ``role`` has (0 if the job has no such role)."""
        return next((r.replicas for r in self.roles if r.name == role), 0)

    def replica_keys(self) -> list[tuple[str, int]]:
        """Every replica of the job as (role, index within the role), in role order."""
        return [(r.name, i) for r in self.roles for i in range(r.replicas)]

    def flat(self) -> dict[str, Any]:
        """The spec as flat fields, the framework's options beside the generic ones, as flags and experiment
        files name them. Roles are left out where they are the default for ``workers``."""
        fields = self.model_dump(exclude={"framework", "roles"})
        fields["framework"] = self.framework.name
        fields.update(self.framework.model_dump(exclude={"name"}))
        if [(r.name, r.replicas) for r in self.roles] != [(DEFAULT_ROLE, self.workers)]:
            fields["roles"] = [r.model_dump() for r in self.roles]
        return fields

    def replace(self, **changes: Any) -> "JobSpec":
        """Return a new, validated spec with ``changes`` (flat field names) applied."""
        return make_spec(**{**self.flat(), **changes})

    def training_fields(self) -> dict[str, Any]:
        """The fields the trainer reads, as the contract names them."""
        flat = {**self.flat(), "strategy": self.framework.resolved_strategy(self.workers)}
        return {name: flat[name] for name in contract.TRAINING_FIELDS}


def flat_field_names() -> list[str]:
    """Every field name make_spec accepts: the generic ones and each framework's options."""
    names = set(JobSpec.model_fields)
    for model in OPTION_MODELS.values():
        names.update(set(model.model_fields) - {"name"})
    return sorted(names)


def new_run_id(workers: int) -> str:
    """A fresh, sortable run id such as ``20261121-143005-w3-1a2b``."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime()) + f"-w{workers}-{secrets.token_hex(2)}"


def shown(part: Any) -> str:
    """A name from user input as it may appear in a one-line message: plain if harmless, else repr()."""
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text) else repr(text[:64])


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(shown(part) for part in error.get("loc", ()) if part != "tensorflow") or "spec"
    loc = loc.removeprefix("framework.")  # framework options are flat fields to the user
    msg = error.get("msg", "invalid")
    if error.get("type") == "value_error":
        return msg.removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        return f"{loc}: unknown field; allowed fields are {', '.join(flat_field_names())}"
    got = repr(error.get("input"))[:80]
    if error.get("type") == "literal_error":
        return f"{loc}: {msg} (got {got})"
    return f"{loc}: {msg.lower()} (got {got})"


def _nest(fields: dict[str, Any]) -> dict[str, Any]:
    """Move flat framework options into ``framework``; ``framework`` may be a name or a mapping."""
    framework = fields.pop("framework", None)
    options = dict(framework) if isinstance(framework, dict) else {"name": framework or "tensorflow"}
    name = options.get("name")
    model = OPTION_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise InvalidSpec(f"framework: {shown(name)} is not one orch runs; choose "
                          f"{' or '.join(OPTION_MODELS)}")
    for name in set(model.model_fields) - {"name"}:
        if name in fields:
            options[name] = fields.pop(name)
    return {**fields, "framework": options}


def make_spec(**fields: Any) -> JobSpec:
    """Build a validated spec from flat fields; a missing ``run_id`` gets a fresh one. Raises InvalidSpec."""
    if fields.get("run_id") is None:
        fields["run_id"] = new_run_id(fields.get("workers", 1) if isinstance(fields.get("workers"), int) else 1)
    nested = _nest(fields)
    try:
        return JobSpec(**nested)
    except ValidationError as exc:
        raise InvalidSpec("; ".join(_describe(e) for e in exc.errors(include_url=False))) from None
    except (TypeError, ValueError) as exc:  # e.g. a non-string key
        raise InvalidSpec(f"spec: {shown(exc)}") from None


def load_spec(record: Any) -> JobSpec:
    """The spec of a run record as JobSpec (nested, as ``model_dump`` wrote it); InvalidSpec if it is not one."""
    if not isinstance(record, dict):
        raise InvalidSpec("spec: not a mapping")
    try:
        return JobSpec.model_validate(record)
    except ValidationError as exc:
        raise InvalidSpec("; ".join(_describe(e) for e in exc.errors(include_url=False))) from None
