"""The job spec's model: ``JobSpec``, one frozen, validated description of a training job, typed from the CLI to
the run record (the package's index, jobspec/__init__.py, says how it is laid out)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator import contract, frameworks
from orchestrator.backends import options as backend_options
from orchestrator.backends.options import BackendOptions
from orchestrator.errors import InvalidSpec
from orchestrator.frameworks import FrameworkOptions
from orchestrator.frameworks.base import TRAINER_ONLY
from orchestrator.jobspec.fields import (
    DEFAULT_ROLE,
    NO_FLAG,
    RUN_ID_PATTERN,
    SCRIPT,
    TRAINER,
    BackendName,
    DatasetName,
    MiB,
    Role,
    _nest,
    defaults,
    flag,
    flag_aliases,
    invalid,
    new_run_id,
    spec_error,
    unused,
)
from orchestrator.jobspec.checks import check_job
from orchestrator.jobspec.messages import _unknown_framework, shown



class JobSpec(BaseModel):
    """Everything that defines a training job; never mutated, derive new ones with ``replace``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    workers: int = Field(default=1, ge=1, le=32, json_schema_extra=flag(short="-n"),
                         description="Worker containers (1 = the one-container baseline; a --script gets its launcher's "
                                     "environment at every N).")
    roles: tuple[Role, ...] = Field(default=(), json_schema_extra=NO_FLAG,
                                    description="replicas per role; default: `workers` replicas of the role worker")
    framework: SerializeAsAny[FrameworkOptions] = Field(
        default_factory=lambda: frameworks.options_model(frameworks.DEFAULT).model_validate({}),
        json_schema_extra=NO_FLAG,
        description="the framework and its own options")
    backend: BackendName = Field(
        default="compose",
        description="Engine that runs the replicas: compose (Docker Compose on this host), swarm (a Docker Swarm "
                    "stack, one service per replica, on this engine's swarm), k8s (an Indexed Job or JobSet, applied "
                    "with the kubeconfig's context; without one, `orch render --backend k8s | kubectl apply -f -`), "
                    "or slurm (a batch job of one task per replica, each in a container, submitted with sbatch).",
    )
    backend_options: SerializeAsAny[BackendOptions] = Field(
        default_factory=backend_options.ComposeOptions, json_schema_extra=NO_FLAG,
        description="the backend's own options (backends/options.py), the model of the backend `backend` names")
    dataset: DatasetName = Field(
        default="mnist",
        description="Data set, prepared on the host once and mounted read-only: mnist (60,000 images), fashion-mnist "
                    "(70,000), vader-reviews (13,056 review snippets, tokenized, for --model text), synthetic (made "
                    "in the trainer, for tests).",
    )
    samples: int = Field(default=60_000, ge=1, json_schema_extra=flag(short="-s", jobs=TRAINER),
                         description="Samples drawn from the data set, split 64/16/20 into train, validation and test.")
    epochs: int = Field(default=5, ge=1, le=1000, json_schema_extra=flag(short="-e", jobs=TRAINER),
                        description="Epochs.")
    global_batch: int = Field(default=96, ge=1, le=65_536, json_schema_extra=flag("--batch-size", "-b", jobs=TRAINER),
                              description="GLOBAL batch, summed over workers: the same work per step for every N.")
    learning_rate: float = Field(default=1e-3, gt=0, le=10, allow_inf_nan=False,
                                 json_schema_extra=flag(default_text=defaults("learning_rate", 0.001), jobs=TRAINER),
                                 description="Learning rate of the framework's optimizer (Adam for TensorFlow and MPI; "
                                             "SGD with momentum 0.9 for PyTorch).")
    seed: int = Field(default=42, ge=0, le=2**31 - 1, json_schema_extra=TRAINER_ONLY,
                      description="Seed of the draw, split and shuffles.")
    model: Literal["mlp", "cnn", "text"] = Field(
        default="mlp", json_schema_extra=flag(default_text=defaults("model", "mlp"), jobs=TRAINER),
        description="mlp: a small MLP (784, 25, 15 and 10 units); cnn: the MNIST CNN (two convolutions with "
                    "max pooling, Dense 128, dropout); text: a token embedding, averaged, for review sentiment (text "
                    "data sets only).",
    )
    network: Literal["bridge", "shared", "host"] = Field(
        default="bridge",
        description="bridge: an internal network, a host name per worker; shared: one network namespace on "
                    "loopback; host: the host's network (not isolated).",
    )
    expose_ports_on_host: bool = Field(
        default=False, json_schema_extra=flag(default_text="no", needs=("network", "host")),
        description="Accept that --network host exposes every worker's unauthenticated rendezvous and all-reduce "
                    "(TensorFlow gRPC) ports on all of this host's interfaces; --network host is refused without it.",
    )
    threads: int = Field(default=0, ge=0, le=256,
                         description="Intra/inter-op threads and OMP_NUM_THREADS per worker; 0 = the framework's default.")
    pin_cpus: bool = Field(default=True, json_schema_extra=flag(default_text="pinned"),
                           description="Pin each worker to its own share of the host's cores.")
    stall_timeout: float = Field(
        default=120.0, ge=5, le=86_400, allow_inf_nan=False,
        description="Seconds without training progress on any worker (a paused or stuck worker stalls every "
                    "all-reduce) before the job fails.",
    )
    checkpoint_every: int = Field(default=0, ge=0, le=10_000_000, json_schema_extra=TRAINER_ONLY,
                                  description="Checkpoint every N training steps into the run directory; 0 = every epoch.")
    max_restarts: int = Field(
        default=0, ge=0, le=10,
        description="Restart the whole worker group up to K times after a retryable failure (a worker killed by a "
                    "signal or removed), resuming from the last checkpoint.",
    )
    startup_timeout: float = Field(default=300.0, ge=5, le=86_400, allow_inf_nan=False,
                                   description="Seconds for every worker to join the cluster before the job fails.")
    time_limit: float = Field(default=0.0, ge=0, le=30 * 86_400, allow_inf_nan=False,
                              description="Seconds one attempt of the run may take before it fails as timed out; 0 "
                                          "= no limit. The guard for a script that reports no progress. On "
                                          "Kubernetes it is the Job's activeDeadlineSeconds.")
    cpus: Optional[float] = Field(default=None, gt=0, le=512, allow_inf_nan=False,
                                  json_schema_extra=flag(default_text="none"),
                                  description="CPU limit per container.")
    gpus: int = Field(default=0, ge=0, le=16,
                      description="GPUs per container, as a device request to the engine (NVIDIA's runtime); 0 = "
                                  "none. The trainer uses the GPUs it sees: --strategy mirrored puts a replica on each.")
    memory_mb: MiB = Field(default=2048, ge=256, le=1_048_576, json_schema_extra=flag("--memory", default_text="2g"),
                           description="Memory limit per container: MiB, or a size as Docker writes it (512m, 2g).")
    shm_size_mb: MiB = Field(default=0, ge=0, le=1_048_576,
                             json_schema_extra=flag("--shm-size", default_text="64m, or what the framework needs"),
                             description="Size of each container's /dev/shm (a tmpfs that counts against --memory "
                                         "where it is used): MiB, or a size as Docker writes it (512m, 1g); 0 = the "
                                         "framework's need, else the engine's default. PyTorch's DataLoader workers "
                                         "pass their batches through it.")
    disk_limit_mb: MiB = Field(default=10_240, ge=0, le=100 * 1_048_576,
                               json_schema_extra=flag("--disk-limit", default_text="10g"),
                               description="How much the replicas may write, together, into their folders on this "
                                           "host (outputs, checkpoints) before the run is stopped: MiB, or a size as "
                                           "Docker writes it (200M, 10g); 0 = no limit but the free-space floor "
                                           "($ORCH_DISK_FLOOR_MB, 1024 MiB).")
    pids_limit: int = Field(default=1024, ge=64, le=1_000_000, json_schema_extra=NO_FLAG,
                            description="process limit per container")
    script: Optional[str] = Field(
        default=None, max_length=4096, json_schema_extra=flag(default_text="orch's trainer"),
        description="Run this Python script of yours instead of orch's trainer, on every replica, in orch's image. "
                    "The replicas see a copy of its folder (or of --source), made when the run starts; each runs "
                    "in its own output folder, with TF_CONFIG and the data mount set. Arguments after `--` go to "
                    "the script.",
    )
    source: Optional[str] = Field(
        default=None, max_length=4096, json_schema_extra=flag(default_text="the script's folder", jobs=SCRIPT),
        description="With --script: the folder copied for the replicas, for a script that imports sibling modules; "
                    "it must hold the script. Refused: /, a home folder, a folder holding orch's runs or results, "
                    "or more than $ORCH_SOURCE_LIMIT_MB (64) MiB.",
    )
    procs_per_worker: int = Field(
        default=1, ge=1, le=16, json_schema_extra=flag(jobs=SCRIPT),
        description="Ranks per container, for a --script under --framework torch (torchrun's --nproc-per-node) or "
                    "mpi (mpiexec's -ppn): N containers × P ranks, RANK 0 to N·P−1, LOCAL_RANK 0 to P−1, "
                    "WORLD_SIZE N·P. `-j NxP` sets both. TensorFlow refuses it.",
    )
    script_args: tuple[str, ...] = Field(default=(), max_length=256, json_schema_extra={**NO_FLAG, "jobs": SCRIPT},
                                         description="arguments for the script (after `--` on the command line)")
    image: Optional[str] = Field(default=None, max_length=200, json_schema_extra=flag(default_text="orch's own"),
                                 description="Run this image instead of orch's own trainer image.")
    # A spec made without one gets a fresh id that names its worker count (``_fresh_run_id``); the factory only
    # tells a type checker that the field may be left out.
    run_id: str = Field(default_factory=lambda: new_run_id(1), pattern=RUN_ID_PATTERN,
                        json_schema_extra=flag(default_text="time-based"),
                        description="Run id (lowercase letters, digits, - and _).")

    if not TYPE_CHECKING:  # a type checker reads the fields' own signature, which pydantic makes
        def __init__(self, **data: Any) -> None:
            """A spec of the spec's own (nested) fields; InvalidSpec, each field named, when one is wrong."""
            try:
                super().__init__(**data)
            except ValidationError as exc:
                raise spec_error(JobSpec, exc, flat_field_names) from None

    @model_validator(mode="before")
    @classmethod
    def _fresh_run_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("run_id") is None:
            workers = data.get("workers", 1)
            data = {**data, "run_id": new_run_id(workers if isinstance(workers, int) and 1 <= workers <= 999 else 1)}
        return data

    @field_validator("framework", mode="wrap")
    @classmethod
    def _framework_options(cls, value: Any, handler: Any) -> Any:
        """The options model of the framework ``name`` picks, from the registry."""
        if isinstance(value, FrameworkOptions):
            return value
        if not isinstance(value, dict):
            return handler(value)
        name = value.get("name", frameworks.DEFAULT)
        model = frameworks.find_options(name)
        if model is None:
            raise ValueError(_unknown_framework(name))
        return model.model_validate(value)

    @field_validator("backend_options", mode="wrap")
    @classmethod
    def _backend_options(cls, value: Any, handler: Any, info: ValidationInfo) -> Any:
        """The options model of the backend ``backend`` names (no check when ``backend`` itself is wrong)."""
        model = backend_options.OPTIONS.get(info.data.get("backend"))  # type: ignore[arg-type]
        if model is None or isinstance(value, model):
            return value if model is not None else handler(value)
        if isinstance(value, BaseModel):
            raise ValueError(f"backend_options: {type(value).__name__} are not the options of --backend "
                             f"{info.data.get('backend')}")
        return model.model_validate(value)

    @model_validator(mode="before")
    @classmethod
    def _legacy_backend_fields(cls, data: Any) -> Any:
        """A spec of an older orch kept the backends' options at the top level (``backend_options.legacy``)."""
        return backend_options.legacy(data)

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: Any) -> Any:
        """Generic fields left out take the framework's own (``FrameworkOptions.prepare``: PyTorch's model and
        learning rate, and its global batch from --batch-per-worker)."""
        if not isinstance(data, dict):
            return data
        framework = data.get("framework")
        options = framework.model_dump() if isinstance(framework, BaseModel) else (
            framework if isinstance(framework, dict) else None)
        model = frameworks.find_options(options.get("name", frameworks.DEFAULT)) if options is not None else None
        return model.prepare(options, data) if model is not None and options is not None else data

    @model_validator(mode="before")
    @classmethod
    def _default_roles(cls, data: Any) -> Any:
        """Roles left out are the framework's for ``workers``; a framework that does not validate leaves
        them to the field's own error."""
        if isinstance(data, dict) and not data.get("roles"):
            workers = data.get("workers", 1)
            if isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1:
                roles = [(DEFAULT_ROLE, workers)]
                framework = data.get("framework")
                if isinstance(framework, FrameworkOptions):
                    roles = framework.roles(workers)
                elif isinstance(framework, dict) and (
                        model := frameworks.find_options(framework.get("name", frameworks.DEFAULT))) is not None:
                    try:
                        roles = model(**framework).roles(workers)
                    except (ValidationError, TypeError):
                        pass
                data = {**data, "roles": tuple({"name": n, "replicas": r} for n, r in roles)}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "JobSpec":
        check_job(self)
        return self

    @property
    def world_size(self) -> int:
        """The ranks of the job: every worker container's --procs-per-worker."""
        return self.workers * self.procs_per_worker

    def role_replicas(self, role: str) -> int:
        """How many replicas ``role`` has (0 if the job has no such role)."""
        return next((r.replicas for r in self.roles if r.name == role), 0)

    def replica_keys(self) -> list[tuple[str, int]]:
        """Every replica of the job as (role, index within the role), in role order."""
        return [(r.name, i) for r in self.roles for i in range(r.replicas)]

    def reporting_keys(self) -> list[tuple[str, int]]:
        """The replicas that train and report (events, heartbeats, results); the job is done when they are."""
        roles = self.framework.reporting_roles(self.workers)
        return [key for key in self.replica_keys() if key[0] in roles]

    def flat(self) -> dict[str, Any]:
        """The spec as flat fields, the framework's options beside the generic ones, as flags and experiment
        files name them. Roles are left out where they are the default for ``workers``."""
        fields = self.model_dump(exclude={"framework", "roles", "backend_options"})
        fields["framework"] = self.framework.name
        fields.update(self.framework.model_dump(exclude={"name"}))
        fields.update(self.backend_options.model_dump())
        if [(r.name, r.replicas) for r in self.roles] != self.framework.roles(self.workers):
            fields["roles"] = [r.model_dump() for r in self.roles]
        return fields

    def replace(self, **changes: Any) -> "JobSpec":
        """Return a new, validated spec with ``changes`` (flat field names) applied; a field the new job would
        ignore is refused, as ``make_spec`` refuses it."""
        fields = self.flat()
        if changes.get("backend", self.backend) != self.backend:  # the old backend's options go with it
            for name in type(self.backend_options).model_fields:
                fields.pop(name, None)
        if changes.get("batch_per_worker", fields.get("batch_per_worker")) and "global_batch" not in changes:
            del fields["global_batch"]  # it follows from the per-worker batch and the (new) worker count
        return spec_from({**fields, **changes})

    def training_fields(self) -> dict[str, Any]:
        """The fields the trainer reads, as the contract names them."""
        flat = {**self.flat(), "strategy": self.framework.resolved_strategy(self.workers)}
        return {name: flat[name] for name in contract.TRAINING_FIELDS + self.framework.training_fields}


def flat_field_names() -> list[str]:
    """Every field name make_spec accepts: the generic ones, each backend's and each framework's options."""
    names = (set(JobSpec.model_fields) - {"backend_options"}) | set(flag_aliases(JobSpec))
    for model in backend_options.OPTIONS.values():
        names.update(model.model_fields)
    for name in frameworks.names():
        names.update(set(frameworks.options_model(name).model_fields) - {"name"})
    return sorted(names)


def spec_from(fields: Mapping[str, Any], given: Optional[Iterable[str]] = None) -> JobSpec:
    """``make_spec`` of a mapping (an experiment file's cell, say). ``given``: the fields the user set, each refused
    where the job would ignore it and it is not at its default (default: every field of ``fields``)."""
    fields = dict(fields)
    aliases = flag_aliases(JobSpec)
    flat = {aliases.get(k, k) if isinstance(k, str) else k: v for k, v in fields.items()}
    if given is not None:
        names = [aliases.get(n, n) for n in given]
    else:
        known = set(flat_field_names())
        names = [k for k, v in flat.items() if v is not None and k in known]
    nested = _nest(fields, JobSpec)
    problems = unused(JobSpec, flat, names)
    if problems:
        raise invalid(JobSpec, problems)
    try:
        return JobSpec(**nested)
    except (TypeError, ValueError) as exc:  # e.g. a non-string key
        raise InvalidSpec(f"spec: {shown(exc)}") from None
