"""What a framework is to orch: its spec options (``FrameworkOptions``) and its hooks (``Framework``).

Every hook is declared here, with the default a framework gets when it leaves it out, so nothing outside a
framework's folder asks which framework it has. A framework's folder holds a subclass of each and one
``FRAMEWORK`` object; ``frameworks/__init__.py`` registers it in one line.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from orchestrator import macros
from orchestrator.errors import InvalidSpec
from orchestrator.images.recipe import BuildOptions, ImageRecipe

if TYPE_CHECKING:
    from orchestrator.paths import Paths

Key = tuple[str, int]  # (role, index within the role)
Say = Callable[[str], None]
# The metadata of an option that only orch's own trainer reads: a --script never sees it, so a job with one refuses
# it (``jobspec.fields.TRAINER``; the spec's fields use the same key).
TRAINER_ONLY: dict[str, Any] = {"jobs": "trainer"}


class Job(Protocol):
    """A job spec as frameworks and backends read it: ``jobspec.JobSpec`` is one. Named by what is read rather
    than imported, because the spec nests the options defined beside these hooks. Read-only, so that a spec whose
    field is narrower (``model`` a Literal) is one."""

    @property
    def workers(self) -> int: ...
    @property
    def global_batch(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def network(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def script(self) -> Optional[str]: ...
    @property
    def image(self) -> Optional[str]: ...
    @property
    def checkpoint_every(self) -> int: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def procs_per_worker(self) -> int: ...
    @property
    def run_id(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    @property
    def framework(self) -> "FrameworkOptions": ...

    def replica_keys(self) -> list[tuple[str, int]]: ...


def nearest_multiples(value: int, by: int) -> str:
    """What to use instead of ``value``, which ``by`` does not divide: ``99 or 102``, or ``a multiple of 3``."""
    lower = value - value % by
    return f"{lower} or {lower + by}" if lower else f"a multiple of {by}"


@dataclass(frozen=True)
class BenchTransport:
    """One way a framework's replicas all-reduce, as `orch bench allreduce` measures it."""

    name: str
    fields: dict[str, Any]  # the spec fields (beside the framework) that place the replicas this way
    what: str


class FrameworkOptions(BaseModel):
    """A framework's own spec options, beside the generic fields of ``JobSpec``; ``name`` tells them apart."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str

    # Generic fields whose default differs under this framework (PyTorch's model and learning rate, say).
    generic_defaults: ClassVar[dict[str, object]] = {}
    # The options the framework's trainer reads from the job, beside the contract's generic TRAINING_FIELDS.
    training_fields: ClassVar[tuple[str, ...]] = ()
    # Why the framework runs one rank per container and refuses --procs-per-worker; empty where it takes it.
    one_rank_per_container: ClassVar[str] = ""

    @classmethod
    def prepare(cls, options: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        """The generic fields of a spec before validation, given these options as given (raw): the framework's
        defaults for the fields left out. Override to derive more (PyTorch's global batch from its per-rank one)."""
        return {**cls.generic_defaults, **data}

    def resolved_strategy(self, workers: int) -> str:
        """The strategy a job of ``workers`` containers runs, as the trainer and the results name it."""
        return self.name

    def roles(self, workers: int) -> list[tuple[str, int]]:
        """The job's roles and their replica counts."""
        return [("worker", workers)]

    def reporting_roles(self, workers: int) -> tuple[str, ...]:
        """The roles whose replicas train, report progress and write results; the job is done when they are."""
        return ("worker",)

    def per_worker_batch(self, workers: int, global_batch: int) -> int:
        """Samples one worker computes per step."""
        return global_batch // workers

    def validation_readers(self, workers: int) -> int:
        """How many replicas share the validation split."""
        return workers

    def check(self, workers: int, global_batch: int) -> None:
        """Raise ValueError (one line, naming the flags) where these options do not fit the job's shape."""

    def check_job(self, spec: Job) -> None:
        """Raise ValueError (one line, naming the flag) where the job asks for what this framework does not do.
        Runs before the generic checks. By default a framework has no --checkpoint-every (it checkpoints after
        every epoch, or not at all)."""
        if spec.checkpoint_every:
            raise ValueError(f"checkpoint_every: {self.resolved_strategy(spec.workers)} checkpoints after every "
                             "epoch; --checkpoint-every is for Keras' fit() (single, mirrored, mwms)")


O = TypeVar("O", bound=FrameworkOptions)


def options_of(spec: Job, model: type[O]) -> O:
    """``spec.framework`` as ``model``, the options of the framework whose hook reads them; a job of another
    framework reaching that hook is a bug (TypeError)."""
    options = spec.framework
    if not isinstance(options, model):
        raise TypeError(f"the job's framework options are {type(options).__name__}, not {model.__name__}")
    return options


class Framework:
    """A framework's hooks: how its replicas find each other, what they run, and the images they run in."""

    name: str = ""
    title: str = ""  # the name people know it by, as the help's headings and the docs write it
    options: type[FrameworkOptions] = FrameworkOptions
    port: int = 0  # where a replica listens for its peers, inside its own network namespace
    # What a replica derives at start-up where one pod template serves all (Kubernetes), from the cluster and
    # its index: one of rendezvous.KINDS ("tf_config", "rank", or "" for nothing beyond its role and index).
    rendezvous_kind: str = ""
    shm_mb: int = 0  # /dev/shm a replica needs in MiB; 0 = the engine's default (64 MiB)
    # Kubeflow Trainer v2 (--k8s-kind trainjob): the ML policy of Trainer's that launches this framework's nodes
    # (its key in a runtime's mlPolicy: "torch" gives each node torchrun's PET_* variables), or "" for Trainer's
    # plain policy, which only counts the nodes (they meet as in a JobSet); and the kind of runtime orch renders
    # for it, TrainingRuntime (the namespace's) or ClusterTrainingRuntime (the cluster's).
    trainer_policy: str = ""
    trainer_runtime: str = "TrainingRuntime"
    # Whether `orch build --requirements FILE` can add packages to its main image (for --script).
    takes_requirements: bool = False
    # Whether its images are built on demand only (`orch build --framework NAME`), not by a plain `orch build`.
    on_demand: bool = False
    # Whether its builder takes wheels from an extra package index (`orch build --index URL`, also spelt
    # --<name>-index and read from ORCH_<NAME>_INDEX), and what that index is for, in the flag's help.
    takes_index: bool = False
    index_help: str = ""
    # Lines of its libraries' output that say nothing to a user (start-up chatter), hidden by `orch logs`.
    log_noise: tuple[str, ...] = ()
    # `orch bench allreduce`: the ways its replicas all-reduce, the library its probe measures (as the host
    # reference's row names it), and the packages of its lock the host reference needs (None: the whole lock).
    bench_transports: tuple[BenchTransport, ...] = ()
    bench_api: str = ""
    bench_host_packages: Optional[tuple[str, ...]] = None
    # The module of its trainer (in its folder's trainer/, copied flat into the images' orch_trainer package)
    # whose run(reporter, job, worker, num_workers, data_dir) trains one worker; "" for none.
    trainer_entry: str = ""
    # The framework whose image this one's jobs run, its trainer added to that image (MPI's ranks compute with
    # TensorFlow, in TensorFlow's image), or "" for a framework with an image of its own (its folder's image/).
    image_of: str = ""

    def _host(self) -> "Framework":
        """The framework whose image this one runs (``image_of``), found in the registry, not imported."""
        from orchestrator import frameworks

        return frameworks.get(self.image_of)

    def trainer_files(self) -> list[Path]:
        """Its trainer's modules: the .py files of trainer/ beside the module that defines the framework."""
        folder = Path(inspect.getfile(type(self))).parent / "trainer"
        return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py") if folder.is_dir() else []

    def image(self, spec: Job) -> str:
        """The image every replica of ``spec`` runs: the one the user gave, else orch's own main image."""
        if self.image_of:
            return self._host().image(spec)
        return spec.image or self.main_image()

    def env(self, spec: Job, role: str, addresses: dict[Key, str]) -> dict[str, str]:
        """The rendezvous environment of the replicas of ``role``, given every replica's address: one for all of
        them, with a placeholder of ``macros`` (INDEX, RANK, ROLE) wherever a value depends on the replica, which each
        backend fills in its own way. What is the same for all (the world size, the addresses) is written as is."""
        return {}

    def replica_env(self, spec: Job, key: Key, addresses: dict[Key, str]) -> dict[str, str]:
        """The rendezvous environment of replica ``key`` with its values (as Compose and Swarm set it)."""
        return macros.fill_env(self.env(spec, key[0], addresses), macros.values_of(list(addresses), key))

    def describe(self, spec: Job, key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        """The rendezvous of replica ``key`` as `orch render --format json` shows it."""
        return {}

    def launch(self, spec: Job, command: tuple[str, ...]) -> Optional[tuple[str, ...]]:
        """The command a replica runs, for a framework that starts its processes itself (MPI's launcher); None
        leaves ``command`` (empty: the image's own trainer) as it is."""
        return None

    def shares_host(self, spec: Job) -> bool:
        """Whether the replicas must look like processes of one host (one host name, IPC and PID namespace)."""
        return False

    def floor_transport(self, spec: Job) -> Optional[str]:
        """The name of the ``bench_transports`` entry that carries ``spec``'s gradients' all-reduce, whose p50
        is its transport floor (an experiment's ``report: {floor: true}``); None if its replicas all-reduce no
        gradients (a parameter server, one container)."""
        return None

    # -- images -------------------------------------------------------------------------------------------
    def image_tags(self) -> dict[str, str]:
        """Each image of orch's own that this framework builds: its kind (the image's orch.kind label) -> tag."""
        return {}

    def image_refs(self) -> tuple[str, ...]:
        """Every image of orch's own that this framework's jobs run (what `orch push` copies)."""
        return self._host().image_refs() if self.image_of else tuple(self.image_tags().values())

    def main_image(self) -> str:
        """The image of orch's own that a job of several replicas runs (what data and users' packages go on)."""
        if self.image_of:
            return self._host().main_image()
        tags = self.image_tags()
        if not tags:
            raise NotImplementedError(f"{self.name} has no image of its own")
        return tags.get(self.name) or next(iter(tags.values()))

    def recipe(self) -> Optional[Path]:
        """The folder of this framework's image recipe (its lock among it): image/ beside the module that defines
        the framework, or, for one that runs another's image, that one's; None if there is none."""
        if self.image_of:
            return self._host().recipe()
        folder = Path(inspect.getfile(type(self))).parent / "image"
        return folder if folder.is_dir() else None

    def image_recipe(self) -> Optional[ImageRecipe]:
        """What the builder builds for this framework: its recipe, its tags, and the trainer modules of every
        framework that runs in its image (its own, and those whose ``image_of`` names it)."""
        folder = self.recipe()
        if self.image_of or folder is None or not self.image_tags():
            return None
        from orchestrator import frameworks

        members = [self, *(f for f in map(frameworks.get, frameworks.names()) if f.image_of == self.name)]
        return ImageRecipe(self.name, folder, self.image_tags(),
                           tuple(p for f in members for p in f.trainer_files()),
                           {f.name: f.trainer_entry for f in members if f.trainer_entry})

    def build_command(self) -> str:
        """The command that builds the images this framework's jobs run."""
        return self._host().build_command() if self.image_of else f"orch build --framework {self.name}"

    def check_index(self, url: str) -> None:
        """Raise InvalidSpec (one line) unless ``url`` is a package index this framework's builder can use."""

    def build(self, options: BuildOptions, engine: Any, paths: Optional["Paths"], say: Say) -> list[Any]:
        """Build this framework's images unless they are up to date (`orch build --framework NAME`): its
        ``image_recipe`` through the generic builder, or the images of the framework it runs in."""
        if self.image_of:
            return self._host().build(options, engine, paths, say)
        recipe = self.image_recipe()
        if recipe is None:
            raise NotImplementedError(f"{self.name} builds no image of its own")
        from orchestrator.images.builder import build_image

        return build_image(recipe, options, engine=engine, paths=paths, say=say)

    def allreduce_probe(self) -> Optional[Path]:
        """The file of its all-reduce probe for `orch bench` (``measure`` and ``leave``), or None."""
        here = Path(sys.modules[type(self).__module__].__file__ or "").parent / "allreduce_probe.py"
        return here if self.bench_transports and here.is_file() else None

    def host_processes(self, ranks: int, argv: list[str], env: dict[str, str], venv: Path,
                       free_ports: Callable[[int], list[int]]) -> list[tuple[list[str], dict[str, str]]]:
        """The bare processes of this host that run ``argv`` (the probe's harness) as ``ranks`` ranks, each
        with its environment: the host reference of `orch bench allreduce`."""
        raise NotImplementedError(f"{self.name} has no host reference")
