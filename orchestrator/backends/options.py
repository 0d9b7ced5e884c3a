"""Each backend's own spec options, beside the generic fields of ``JobSpec``: ``spec.backend`` names the backend
and ``spec.backend_options`` holds the options model it registered here, which also checks the job against
what its engine can run.

Flags and experiment files use the flat names (``--overlay-mtu``, ``k8s_kind``); ``spec._nest`` moves them
under ``backend_options`` and refuses one that belongs to another backend. Standard library and pydantic only,
so the spec can load these without loading an engine's client (docker/engines.py, the engines' names, is
standard library too).
"""
from __future__ import annotations

import os
import re
from typing import Any, ClassVar, Literal, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator import imageref
from orchestrator.docker import engines
from orchestrator.frameworks.base import Job

REGISTRY_PATTERN = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*"
DNS_SUBDOMAIN_PATTERN = r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"
_FLAG: dict[str, Any] = {"flag": None, "default_text": "none"}


class BackendOptions(BaseModel):
    """A backend's own options; the subclass of the backend ``spec.backend`` names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The options of a job before this version of orch sat at the spec's top level: their defaults there, so an
    # old run record's spec still loads (``JobSpec``'s before-validator drops these where they are unset).
    LEGACY_DEFAULTS: ClassVar[dict[str, Any]] = {"overlay_mtu": 0, "k8s_kind": "job", "k8s_checkpoint_claim": None,
                                                 "registry": None}

    def image_registry(self) -> Optional[str]:
        """The registry (HOST/PATH) the nodes pull orch's own images from, None where they are built here."""
        return None

    def check_job(self, spec: Job) -> None:
        """Raise ValueError (one line, naming the flags) where the job is one this backend cannot run."""


def _registry(value: Optional[str]) -> Optional[str]:
    if value is not None and not re.fullmatch(REGISTRY_PATTERN, value):
        raise ValueError(f"{value!r} is not HOST[:PORT][/PATH], e.g. registry.example:5000/ml")
    why = imageref.name_problem(value) if value is not None else None
    if why is not None:  # orch's images are named <registry>/<image>: the whole must read as an image's name
        raise ValueError(f"{value!r} cannot start an image's name: {why}")
    return value


REGISTRY_HELP = ("Registry (HOST/PATH) the nodes pull orch's own images from, prefixed to their names; for --backend "
                 "k8s or swarm, where images are not built on the nodes.")


EngineName = Literal["docker", "podman"]


def default_engine() -> EngineName:
    """$ORCH_ENGINE, else docker; an unknown name is left to the field's own error."""
    return os.environ.get("ORCH_ENGINE") or engines.DEFAULT  # type: ignore[return-value]


class ComposeOptions(BackendOptions):
    """Compose on this host: the engine that runs the containers."""

    engine: EngineName = Field(
        default_factory=default_engine, json_schema_extra={"default_text": "$ORCH_ENGINE, else docker"},
        description="The container engine on this host: docker (the Docker daemon) or podman (Podman's API "
                    "service, rootful or rootless); `orch doctor --engine podman` checks it.")

    def check_job(self, spec: Job) -> None:
        if self.engine == "podman" and spec.gpus:
            raise ValueError("gpus: orch asks for GPUs through Docker's NVIDIA runtime, which Podman does not have "
                             "(it uses CDI devices); use --engine docker or --gpus 0")


class _PulledOptions(BackendOptions):
    """Options of a backend whose nodes pull orch's images: the registry they pull from."""

    registry: Optional[str] = Field(default=None, max_length=200, json_schema_extra=_FLAG, description=REGISTRY_HELP)

    @field_validator("registry")
    @classmethod
    def _check_registry(cls, value: Optional[str]) -> Optional[str]:
        return _registry(value)

    def image_registry(self) -> Optional[str]:
        return self.registry


class SwarmOptions(_PulledOptions):
    """A Docker Swarm stack: the overlay network's MTU and the registry the nodes pull from."""

    overlay_mtu: int = Field(
        default=0, ge=0, le=9000, json_schema_extra={"default_text": "the engine's, 1450"},
        description="With --backend swarm: the MTU of the stack's overlay network. VXLAN adds 50 bytes to every "
                    "packet, so across nodes it must be at most the nodes' interface MTU minus 50; orch refuses a "
                    "swarm of several nodes where it is not. 0 = the engine's default.",
    )
    @field_validator("overlay_mtu")
    @classmethod
    def _ipv4_minimum(cls, value: int) -> int:
        if value and value < 576:
            raise ValueError(f"{value} is below IPv4's minimum of 576")
        return value

    def check_job(self, spec: Job) -> None:
        if spec.network != "bridge":
            raise ValueError(f"network: --network {spec.network} is for --backend compose; on Swarm the replicas "
                             "meet on the stack's overlay network; leave --network out")
        if spec.gpus:
            raise ValueError("gpus: a Swarm service gets GPUs only as generic resources its nodes advertise, which "
                             "orch does not render; use --backend compose or --gpus 0")


class KubernetesOptions(_PulledOptions):
    """An Indexed Job or a JobSet: the kind, the claim for checkpoints and the registry the nodes pull from."""

    k8s_kind: Literal["job", "jobset", "trainjob"] = Field(
        default="job",
        description="With --backend k8s: job, an Indexed Job with a headless Service (plain Kubernetes); jobset, "
                    "a JobSet (needs the JobSet controller), which restarts the whole group itself; trainjob, "
                    "Kubeflow Trainer v2's TrainJob and the runtime orch renders for it (render only).",
    )
    k8s_checkpoint_claim: Optional[str] = Field(
        default=None, max_length=253, json_schema_extra=_FLAG,
        description="With --backend k8s: a PersistentVolumeClaim (ReadWriteMany) every pod mounts for "
                    "checkpoints, so a restarted group resumes; needed for restarts.",
    )
    @field_validator("k8s_checkpoint_claim")
    @classmethod
    def _object_name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(DNS_SUBDOMAIN_PATTERN, value):
            raise ValueError(f"{value!r} is not a Kubernetes object name (lowercase letters, digits, - and .)")
        return value

    def check_job(self, spec: Job) -> None:
        if spec.network != "bridge":
            raise ValueError(f"network: --network {spec.network} is for --backend compose; on Kubernetes every pod "
                             "has its own network; leave --network out")
        roles = [name for name, count in spec.framework.roles(spec.workers) if count]
        if self.k8s_kind == "trainjob" and len(roles) > 1:
            raise ValueError(f"k8s_kind: a TrainJob runs one Job of like nodes, and this job has the roles "
                             f"{', '.join(roles)}; use --k8s-kind jobset (a Job per role)")
        if spec.max_restarts and self.k8s_checkpoint_claim is None:
            raise ValueError("max_restarts: a restarted group resumes from checkpoints every pod must reach; pass "
                             "--k8s-checkpoint-claim NAME (a ReadWriteMany PersistentVolumeClaim) or --max-restarts 0")


SLURM_TIME_PATTERN = r"(\d{1,5}-)?\d{1,5}(:\d{1,2}){0,2}|UNLIMITED|INFINITE"
SLURM_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
SLURM_RUNTIMES = ("charliecloud", "docker")


class SlurmOptions(BackendOptions):
    """A Slurm batch job of one task per replica, each in a container: the job's place on the cluster and the
    container runtime the nodes have."""

    slurm_partition: Optional[str] = Field(
        default=None, json_schema_extra=_FLAG,
        description="With --backend slurm: the partition (queue) the job goes to; the cluster's default if left out.")
    slurm_account: Optional[str] = Field(
        default=None, json_schema_extra=_FLAG,
        description="With --backend slurm: the account the job is charged to, where the cluster asks for one.")
    slurm_time: str = Field(
        default="1:00:00",
        description="With --backend slurm: the job's time limit in Slurm's form (MINUTES, HOURS:MINUTES:SECONDS or "
                    "DAYS-HOURS); Slurm ends the job when it is reached.")
    slurm_nodes: int = Field(
        default=1, ge=1, le=1024,
        description="With --backend slurm: the nodes the job's tasks are spread over, in blocks: consecutive "
                    "workers share a node, at most --slurm-tasks-per-node on each.")
    slurm_tasks_per_node: Optional[int] = Field(
        default=None, ge=1, le=1024, json_schema_extra={"default_text": "workers / nodes, rounded up"},
        description="With --backend slurm: the most workers on one node (Slurm's --ntasks-per-node where they "
                    "fill every node exactly; without it, Slurm places them in blocks).")
    slurm_runtime: Literal["charliecloud", "docker"] = Field(
        default="charliecloud",
        description="With --backend slurm: how each task runs orch's image. charliecloud: ch-run, unprivileged, "
                    "from a directory of the image on the shared folder (made once per image); docker: `docker run` "
                    "on each node, where the cluster lets users reach a Docker engine (the image is loaded once per "
                    "node from an archive on the shared folder).")

    @field_validator("slurm_partition", "slurm_account")
    @classmethod
    def _slurm_name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(SLURM_NAME_PATTERN, value):
            raise ValueError(f"{value!r} is not a Slurm name (letters, digits, _, . and -)")
        return value

    @field_validator("slurm_time")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        if not re.fullmatch(SLURM_TIME_PATTERN, value):
            raise ValueError(f"{value!r} is not a Slurm time limit; e.g. 30 (minutes), 2:00:00 or 1-12")
        return value

    def tasks_per_node(self, workers: int) -> int:
        """The workers on each node: as given, or the job's workers spread evenly over its nodes."""
        return self.slurm_tasks_per_node or -(-workers // self.slurm_nodes)

    def check_job(self, spec: Job) -> None:
        if spec.network != "bridge":
            raise ValueError(f"network: on Slurm every task uses its node's network; --network {spec.network} is "
                             "for --backend compose; leave --network out")
        if spec.gpus:
            raise ValueError("gpus: orch does not request GPUs from Slurm; use --backend compose or --gpus 0")
        replicas = sum(count for _name, count in spec.framework.roles(spec.workers))
        per = self.tasks_per_node(replicas)
        if per * self.slurm_nodes < replicas:
            raise ValueError(f"slurm_tasks_per_node: {self.slurm_nodes} node(s) of {per} task(s) hold "
                             f"{per * self.slurm_nodes}, and this job has {replicas} replicas; raise "
                             "--slurm-tasks-per-node or --slurm-nodes")
        if (self.slurm_nodes - 1) * per >= replicas:
            raise ValueError(f"slurm_nodes: {replicas} replicas at {per} per node fill "
                             f"{-(-replicas // per)} node(s), not {self.slurm_nodes}; lower --slurm-nodes")


B = TypeVar("B", bound=BackendOptions)


def of(spec: Any, model: type[B]) -> B:
    """``spec.backend_options`` as ``model``, the options of the backend that reads them; a spec of another backend
    reaching that backend is a bug (TypeError)."""
    options = spec.backend_options
    if not isinstance(options, model):
        raise TypeError(f"the job's backend options are {type(options).__name__}, not {model.__name__}")
    return options


def swarm(spec: Any) -> SwarmOptions:
    """A Swarm job's own options."""
    return of(spec, SwarmOptions)


def kubernetes(spec: Any) -> KubernetesOptions:
    """A Kubernetes job's own options."""
    return of(spec, KubernetesOptions)


def slurm(spec: Any) -> SlurmOptions:
    """A Slurm job's own options."""
    return of(spec, SlurmOptions)


# name -> options model; the names are those of ``backends.BACKENDS``.
OPTIONS: dict[str, type[BackendOptions]] = {"compose": ComposeOptions, "swarm": SwarmOptions,
                                            "k8s": KubernetesOptions, "slurm": SlurmOptions}
DEFAULT = "compose"
TITLES = {"compose": "Compose", "swarm": "Swarm", "k8s": "Kubernetes", "slurm": "Slurm"}  # as the help's headings write them


def option_names() -> dict[str, list[str]]:
    """Every backend option's flat name -> the backends that have it, in ``OPTIONS``' order."""
    owners: dict[str, list[str]] = {}
    for backend, model in OPTIONS.items():
        for name in model.model_fields:
            owners.setdefault(name, []).append(backend)
    return owners


def legacy(data: Any) -> Any:
    """A spec's raw fields with the backend options an older orch kept at the top level moved under
    ``backend_options``; those left at their old defaults that the backend does not have are dropped, and any
    other is kept for the backend's model to refuse."""
    if not isinstance(data, dict) or not set(BackendOptions.LEGACY_DEFAULTS) & set(data):
        return data
    data = dict(data)
    model = OPTIONS.get(data.get("backend", DEFAULT))
    options = dict(data.get("backend_options") or {})
    for name, default in BackendOptions.LEGACY_DEFAULTS.items():
        if name in data:
            value = data.pop(name)
            if (model is not None and name in model.model_fields) or value != default:
                options[name] = value
    data["backend_options"] = options
    return data
