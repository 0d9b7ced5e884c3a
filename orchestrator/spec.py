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
# An absolute path to a .py file, of printable characters: it becomes a mount source and a command line.
SCRIPT_PATTERN = r"/[^\x00-\x1f\x7f]*[^/\x00-\x1f\x7f]\.py"
ROLE_PATTERN = r"^[a-z][a-z0-9]{0,15}$"
DEFAULT_ROLE = "worker"
REGISTRY_PATTERN = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*"
DNS_SUBDOMAIN_PATTERN = r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"


def flag(name: Optional[str] = None, short: Optional[str] = None, default_text: Optional[str] = None) -> dict:
    """CLI metadata of a spec field: its flag (default ``--field-name``), a short form, the shown default."""
    return {"flag": name, "short": short, "default_text": default_text}


NO_FLAG = {"flag": False}


class Role(BaseModel):
    """A kind of replica and how many of it a job has (worker × N; chief, ps × K and worker × N under ps)."""

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
    backend: Literal["compose", "swarm", "k8s"] = Field(
        "compose",
        description="Engine that runs the replicas: compose (Docker Compose on this host), swarm (a Docker Swarm "
                    "stack, one service per replica, on this engine's swarm), or k8s (an Indexed Job or JobSet, applied "
                    "with the kubeconfig's context; without one, `orch render --backend k8s | kubectl apply -f -`).",
    )
    overlay_mtu: int = Field(
        0, ge=0, le=9000, json_schema_extra=flag(default_text="the engine's, 1450"),
        description="With --backend swarm: the MTU of the stack's overlay network. VXLAN adds 50 bytes to every "
                    "packet, so across nodes it must be at most the nodes' interface MTU minus 50; orch refuses a "
                    "swarm of several nodes where it is not. 0 = the engine's default.",
    )
    k8s_kind: Literal["job", "jobset"] = Field(
        "job",
        description="With --backend k8s: job, an Indexed Job with a headless Service (plain Kubernetes); jobset, a "
                    "JobSet (needs the JobSet controller), which restarts the whole group itself.",
    )
    k8s_checkpoint_claim: Optional[str] = Field(
        None, max_length=253, json_schema_extra=flag(default_text="none"),
        description="With --backend k8s: a PersistentVolumeClaim (ReadWriteMany) every pod mounts for checkpoints, "
                    "so a restarted group resumes; needed for restarts.",
    )
    registry: Optional[str] = Field(
        None, max_length=200, json_schema_extra=flag(default_text="none"),
        description="Registry (HOST/PATH) the nodes pull orch's own images from, prefixed to their names; for "
                    "--backend k8s or swarm, where images are not built on the nodes.",
    )
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
    learning_rate: float = Field(1e-3, gt=0, le=10, json_schema_extra=flag(default_text="0.001; 0.01 for torch"),
                                 description="Learning rate: Adam's (TensorFlow, MPI), or SGD's with momentum 0.9 "
                                             "(--framework torch, as seed 002).")
    seed: int = Field(42, ge=0, le=2**31 - 1, description="Seed of the draw, split and shuffles.")
    model: Literal["mlp", "cnn", "text"] = Field(
        "mlp", json_schema_extra=flag(default_text="mlp; cnn for torch"),
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
    time_limit: float = Field(0, ge=0, le=30 * 86_400,
                              description="Seconds one attempt of the run may take before it fails as timed out; 0 "
                                          "= no limit. The guard for a script that reports no progress. On "
                                          "Kubernetes it is the Job's activeDeadlineSeconds.")
    cpus: Optional[float] = Field(None, gt=0, le=512, json_schema_extra=flag(default_text="none"),
                                  description="CPU limit per container.")
    gpus: int = Field(0, ge=0, le=16,
                      description="GPUs per container, as a device request to the engine (NVIDIA's runtime); 0 = "
                                  "none. The trainer uses the GPUs it sees: --strategy mirrored puts a replica on each.")
    memory_mb: int = Field(2048, ge=256, le=1_048_576, json_schema_extra=flag("--memory"),
                           description="Memory limit per container in MiB.")
    pids_limit: int = Field(1024, ge=64, le=1_000_000, json_schema_extra=NO_FLAG,
                            description="process limit per container")
    script: Optional[str] = Field(
        None, max_length=4096, json_schema_extra=flag(default_text="orch's trainer"),
        description="Run this Python script of yours instead of orch's trainer, on every replica, in orch's image. "
                    "Its folder is mounted read-only; each replica runs in its own output folder, with TF_CONFIG "
                    "and the data mount set. Arguments after `--` go to the script.",
    )
    script_args: tuple[str, ...] = Field((), max_length=256, json_schema_extra=NO_FLAG,
                                         description="arguments for the script (after `--` on the command line)")
    image: Optional[str] = Field(None, max_length=200, json_schema_extra=flag(default_text="orch's own"),
                                 description="Run this image instead of orch's own trainer image.")
    run_id: str = Field(..., pattern=RUN_ID_PATTERN, json_schema_extra=flag(default_text="time-based"),
                        description="Run id (lowercase letters, digits, - and _).")

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: Any) -> Any:
        """Generic fields left out take the framework's own defaults (``generic_defaults``: PyTorch's model and
        learning rate); with PyTorch's --batch-per-worker the global batch follows from it."""
        if not isinstance(data, dict):
            return data
        framework = data.get("framework")
        name = framework.name if isinstance(framework, BaseModel) else (
            framework.get("name", "tensorflow") if isinstance(framework, dict) else None)
        model = OPTION_MODELS.get(name) if isinstance(name, str) else None
        if model is None:
            return data
        data = {**{k: v for k, v in getattr(model, "generic_defaults", {}).items()}, **data}
        per = framework.batch_per_worker if isinstance(framework, BaseModel) else (
            framework.get("batch_per_worker") if isinstance(framework, dict) else None)
        workers = data.get("workers", 1)
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
                if isinstance(framework, BaseModel):
                    roles = framework.roles(workers)
                elif isinstance(framework, dict) and framework.get("name", "tensorflow") in OPTION_MODELS:
                    try:
                        roles = OPTION_MODELS[framework.get("name", "tensorflow")](**framework).roles(workers)
                    except (ValidationError, TypeError):
                        pass
                data = {**data, "roles": tuple({"name": n, "replicas": r} for n, r in roles)}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "JobSpec":
        self.framework.check(self.workers, self.global_batch)
        if self.framework.name == "torch":  # before the generic checks, whose advice would not fit PyTorch
            self._check_torch()
        expected = self.framework.roles(self.workers)
        if [(r.name, r.replicas) for r in self.roles] != expected:
            shape = ", ".join(f"{n} × {r}" for n, r in expected)
            raise ValueError(f"roles: {self.framework.name} with these options runs {shape}, got "
                             f"{', '.join(f'{r.name} × {r.replicas}' for r in self.roles)}")
        if self.network == "host" and not self.expose_ports_on_host:
            raise ValueError("network: host exposes every worker's unauthenticated gRPC server on all of this host's "
                             "interfaces; pass --expose-ports-on-host to accept that, or use --network bridge or shared")
        strategy = self.framework.resolved_strategy(self.workers)
        if self.framework.name == "mpi":
            self._check_mpi()
        if self.checkpoint_every and strategy in ("custom", "ps", "mpi", "serial", "ddp"):
            raise ValueError(f"checkpoint_every: {strategy} checkpoints after every epoch; --checkpoint-every sets "
                             "Keras' BackupAndRestore in fit() (single, mirrored, mwms)")
        if strategy == "mirrored" and self.gpus and self.framework.replicas > self.gpus:
            raise ValueError(f"replicas: {self.framework.replicas} replicas need as many GPUs, got --gpus {self.gpus}")
        kind = contract.DATASET_KINDS[self.dataset]
        if (self.model == "text") != (kind == "text"):
            images = ", ".join(d for d, k in contract.DATASET_KINDS.items() if k == "image")
            texts = ", ".join(d for d, k in contract.DATASET_KINDS.items() if k == "text") or "none yet"
            raise ValueError(f"model: {self.model} cannot train on {self.dataset} ({kind}s); mlp and cnn train on "
                             f"images ({images}), text on reviews ({texts})")
        available = contract.DATASET_SIZES[self.dataset]
        if self.samples > available:
            raise ValueError(f"samples: {self.dataset} has {available} training samples, got {self.samples}")
        per_worker = self.framework.per_worker_batch(self.workers, self.global_batch)
        if per_worker * self.workers != self.global_batch and per_worker != self.global_batch:
            lower = self.global_batch - self.global_batch % self.workers
            raise ValueError(
                f"global_batch: {self.global_batch} is not divisible by {self.workers} workers; "
                f"use {lower or self.workers} or {lower + self.workers}"
            )
        train, val, test = contract.split_sizes(self.samples)
        # Under ps only the chief validates, on the whole validation split; every other strategy shards it too.
        validators = 1 if strategy == "ps" else self.workers
        for name, size, readers in (("training", train, self.workers), ("validation", val, validators)):
            if size // readers < per_worker:
                need = -(-per_worker * readers * 100 // (64 if name == "training" else 16))
                what = (f"one global batch of {self.global_batch}" if per_worker * readers == self.global_batch
                        else f"a global batch of {self.global_batch} for each of {readers} workers")
                raise ValueError(
                    f"samples: {self.samples} leave {size} {name} samples, fewer than {what}; use at least "
                    f"{need} samples or a smaller batch"
                )
        if test < 1:
            raise ValueError(f"samples: {self.samples} leave no test samples")
        if self.image is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", self.image):
            raise ValueError(f"image: {self.image!r} is not a valid image reference")
        if self.script is not None and not re.fullmatch(SCRIPT_PATTERN, self.script):
            raise ValueError(f"script: {self.script[:80]!r} is not an absolute path to a .py file (the CLI makes a "
                             "relative one absolute)")
        if any("\x00" in arg or len(arg) > 4096 for arg in self.script_args):
            raise ValueError("script_args: an argument holds a NUL byte or is longer than 4096 characters")
        if self.script_args and self.script is None:
            raise ValueError("script_args: arguments after `--` are for --script")
        self._check_engine_fields()
        return self

    def _check_mpi(self) -> None:
        """Raise ValueError (one line) where an MPI job's shape does not fit its engine."""
        if self.network != "bridge":
            raise ValueError(f"network: --framework mpi meets on the cluster network (bridge); --network "
                             f"{self.network} is for TensorFlow's gRPC ports; leave --network out")
        if self.gpus:
            raise ValueError("gpus: orch's MPI ranks compute on CPUs (its image is TensorFlow for CPUs, and MPI's "
                             "transports here are shared memory and TCP); leave --gpus out")
        if self.framework.transport == "shm" and self.backend != "compose" and self.workers > 1:
            raise ValueError(f"transport: shm makes the containers share one host's IPC and PID namespaces, which "
                             f"only Compose can; use --transport tcp with --backend {self.backend}")

    def _check_torch(self) -> None:
        """Raise ValueError (one line) where a PyTorch job asks for what orch's PyTorch trainer does not do."""
        if self.model == "text" and self.script is None:
            raise ValueError("model: --framework torch trains seed 002's cnn or the mlp on images; text is "
                             "TensorFlow's")
        per = self.framework.batch_per_worker
        if per and self.global_batch != per * self.workers:
            raise ValueError(f"global_batch: --batch-per-worker {per} with {self.workers} workers is a global batch "
                             f"of {per * self.workers}, got {self.global_batch}; leave --batch-size out")
        if self.gpus:
            raise ValueError("gpus: orch's PyTorch image is built for CPUs (cuDNN's kernels and the GPU linear "
                             "algebra are left out of it); leave --gpus out")
        if self.network == "host":
            raise ValueError("network: --framework torch meets on the cluster network; --network host would put "
                             "gloo's unauthenticated ports on every interface of this host; leave --network out")

    def _check_engine_fields(self) -> None:
        """Raise ValueError (one line, naming the flag) if the engine-specific fields do not fit the backend."""
        if self.registry is not None and not re.fullmatch(REGISTRY_PATTERN, self.registry):
            raise ValueError(f"registry: {self.registry!r} is not HOST[:PORT][/PATH], e.g. registry.example:5000/ml")
        claim = self.k8s_checkpoint_claim
        if claim is not None and not re.fullmatch(DNS_SUBDOMAIN_PATTERN, claim):
            raise ValueError(f"k8s_checkpoint_claim: {claim!r} is not a Kubernetes object name (lowercase letters, "
                             "digits, - and .)")
        if self.overlay_mtu and self.backend != "swarm":
            raise ValueError("overlay_mtu: --overlay-mtu is for --backend swarm's overlay network")
        if self.overlay_mtu and self.overlay_mtu < 576:
            raise ValueError(f"overlay_mtu: {self.overlay_mtu} is below IPv4's minimum of 576")
        if self.backend == "swarm":
            if self.network != "bridge":
                raise ValueError(f"network: --network {self.network} is for --backend compose; on Swarm the replicas "
                                 "meet on the stack's overlay network; leave --network out")
            if self.gpus:
                raise ValueError("gpus: a Swarm service gets GPUs only as generic resources its nodes advertise, which "
                                 "orch does not render; use --backend compose or --gpus 0")
        if self.backend != "k8s":
            return
        if self.script is not None:
            raise ValueError("script: --script mounts a folder of this host, which a cluster's pods cannot see; "
                             "build an image FROM orch's trainer image with your script in it and pass --image")
        if self.network != "bridge":
            raise ValueError(f"network: --network {self.network} is for --backend compose; on Kubernetes every pod "
                             "has its own network; leave --network out")
        if self.max_restarts and claim is None:
            raise ValueError("max_restarts: a restarted group resumes from checkpoints every pod must reach; pass "
                             "--k8s-checkpoint-claim NAME (a ReadWriteMany PersistentVolumeClaim) or --max-restarts 0")

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
        fields = self.model_dump(exclude={"framework", "roles"})
        fields["framework"] = self.framework.name
        fields.update(self.framework.model_dump(exclude={"name"}))
        if [(r.name, r.replicas) for r in self.roles] != self.framework.roles(self.workers):
            fields["roles"] = [r.model_dump() for r in self.roles]
        return fields

    def replace(self, **changes: Any) -> "JobSpec":
        """Return a new, validated spec with ``changes`` (flat field names) applied."""
        fields = self.flat()
        if changes.get("batch_per_worker", fields.get("batch_per_worker")) and "global_batch" not in changes:
            del fields["global_batch"]  # it follows from the per-worker batch and the (new) worker count
        return make_spec(**{**fields, **changes})

    def training_fields(self) -> dict[str, Any]:
        """The fields the trainer reads, as the contract names them."""
        flat = {**self.flat(), "strategy": self.framework.resolved_strategy(self.workers)}
        return {name: flat[name] for name in contract.training_fields(self.framework.name)}


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
    for other, other_model in OPTION_MODELS.items():
        stray = sorted(set(other_model.model_fields) & set(fields))
        if stray and other != options["name"]:
            raise InvalidSpec(f"{stray[0]}: --{stray[0].replace('_', '-')} is an option of --framework {other}, "
                              f"not {options['name']}")
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
