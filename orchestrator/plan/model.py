"""What a plan holds: the replicas of a run and the backend's artifact. Data only; ``plan.py`` computes it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from orchestrator.jobspec import JobSpec


@dataclass(frozen=True)
class Mount:
    """A host folder seen inside a replica; with ``volume``, ``source`` names a volume of the engine's instead."""

    source: str
    target: str
    read_only: bool
    volume: bool = False


@dataclass(frozen=True)
class Replica:
    """One container (task, pod) of a run."""

    role: str
    index: int
    image: str
    env: dict[str, str]
    # ``env`` with the framework's placeholders (``macros``) where its values depend on the replica, for a backend
    # that writes one template for several replicas (a Kubernetes Job) and fills them in its own way.
    template: dict[str, str]
    labels: dict[str, str]
    mounts: tuple[Mount, ...]
    rendezvous: dict[str, Any]  # the framework's view, for `orch render --format json`
    command: tuple[str, ...] = ()  # empty: the image's own entry point (orch's trainer)
    working_dir: str = ""  # empty: the image's own
    # The replica whose host name, IPC and PID namespaces this one shares ("" for none; its own name for the
    # first of such a group), so that processes in several containers look like one host's (MPI over shared memory).
    host_group: str = ""
    port: int = 0  # where it listens for its peers, inside its own network namespace (0: nowhere)
    shm_mb: int = 0  # the /dev/shm it needs in MiB (0: the backend's default)

    @property
    def name(self) -> str:
        """Its name on the engine and on the cluster network."""
        return f"{self.role}-{self.index}"

    @property
    def key(self) -> tuple[str, int]:
        return (self.role, self.index)


@dataclass(frozen=True)
class Plan:
    """Everything ``apply`` will do for a spec."""

    spec: JobSpec
    backend: str
    engine_name: str
    run_dir: Path
    data_dir: Path
    cache_dir: Path  # this user's caches: also what orch's processes lock while they make an engine-wide cache
    image: str
    user: str
    replicas: tuple[Replica, ...]
    artifact_name: str
    artifact: str
    base_image: str = ""  # the framework's image before a data set is added to it (``image`` is the replicas')
    build_hint: str = ""  # what to do when an image of the run is missing, e.g. "run `orch build` first"
    rendezvous_kind: str = ""  # what each replica derives where one template serves all (rendezvous.KINDS)
    loaders_dir: Optional[Path] = None  # the frameworks' data caches a user's script sees (data/loaders.py)
    loaders_on: str = ""  # the image the frameworks' caches are added to for a script (images/script.py), or ""
    script_on: str = ""  # the image a script's snapshot is added to as a layer (images/script.py), or "": mounted

    @property
    def artifact_file(self) -> Path:
        return self.run_dir / self.artifact_name

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, as `orch render --format json` prints it and plan.json records it."""
        return {
            "run_id": self.spec.run_id,
            "backend": self.backend,
            "project": self.engine_name,
            "image": self.image,
            "run_dir": str(self.run_dir),
            "data_dir": str(self.data_dir),
            "artifact_file": str(self.artifact_file),
            "user": self.user,
            "spec": self.spec.model_dump(mode="json"),
            "replicas": [
                {"role": r.role, "index": r.index, "name": r.name, **r.rendezvous, "labels": r.labels}
                for r in self.replicas
            ],
            "artifact": self.artifact,
        }
