"""The interface every backend implements, and the engine-neutral replica state it reports.

The shape is a scheduler's: ``addresses`` and ``render`` are pure (the dry run); ``preflight``,
``apply``, ``states``, ``logs``, ``stats`` and ``cancel`` talk to the engine. Replica state comes back
in one engine-neutral shape, ``ReplicaState``, which the supervisor judges the same for every backend.
"""
from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from orchestrator import imageref
from orchestrator.errors import InvalidSpec
from orchestrator.usage import Usage

__all__ = ["Backend", "Key", "ReplicaState", "Status", "Usage", "bounded_name", "pulled", "REMOVAL_WAIT"]

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

Key = tuple[str, int]


class Status(str, enum.Enum):
    """Where one replica is, in any engine's terms."""

    PENDING = "pending"  # created, not running yet (or restarting)
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"  # exited 0
    FAILED = "failed"  # exited non-zero, or the engine gave up on it
    UNKNOWN = "unknown"

    @property
    def is_terminal(self) -> bool:
        return self in (Status.SUCCEEDED, Status.FAILED)


@dataclass(frozen=True)
class ReplicaState:
    """One replica as the engine reports it."""

    id: str  # the engine's handle (a container id, a task id, a pod name)
    name: str
    run: str
    role: str
    index: int
    status: Status
    exit_code: Optional[int] = None
    oom_killed: bool = False
    finished_at: Optional[float] = None  # Unix seconds, for a replica that ended
    reason: Optional[str] = None  # the engine's own words for a replica that failed without an exit code

    @property
    def key(self) -> Key:
        return (self.role, self.index)

    @property
    def label(self) -> str:
        return f"{self.role}-{self.index}"


# Seconds, on top of the stop grace period, for what a cancelled run leaves (tasks, pods, a network) to go.
REMOVAL_WAIT = 60


class Backend:
    """The interface every engine implements; the docstrings are the contract."""

    name = ""
    artifact_name = ""  # the file the rendered artifact is kept in, in the run directory
    # True where no folder is shared with orch: the replicas print their records as report lines on stdout
    # (ORCH_REPORT=stdout), and the runner copies them into the run directory (log_reports.py).
    reports_on_stdout = False
    # True where the nodes see no folder of this host: the data set travels inside the image (data_images.py)
    # instead of being mounted.
    ships_data = False
    # True where a user's script cannot be mounted from this host's folder either: its snapshot travels as a
    # layer on the run's image (images/script.py), and the frameworks' caches (data/loaders.py) are not mounted.
    script_in_image = False
    # True where every replica runs on the engine orch talks to: a run of an image orch chose mounts a copy of the
    # image's Python environment from a volume of that engine's (images/venv_volume.py), made in ``stage``.
    venv_volume = False
    # True where the replicas write this host's run directory through bind mounts: their folders can then sit on a
    # file system of --disk-limit's size that the kernel holds (run/volume.py).
    binds_run_dir = False

    # -- pure: the dry run -------------------------------------------------------------------------
    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        """Where each replica can be reached by its peers, as host:port, in the order of ``keys``."""
        raise NotImplementedError

    def replica_user(self, spec: "JobSpec", user: str) -> str:
        """The uid:gid the replicas run as, given the one orch chose (``user``); a backend whose container runtime
        runs them as the user who started them, whatever it is asked, says so here."""
        return user

    @property
    def place(self) -> str:
        """Where its replicas live, as one backend's (or one engine's) are told from another's."""
        return self.name

    def engine_name(self, run_id: str) -> str:
        """What the engine calls the run (a Compose project, a stack, a Job)."""
        raise NotImplementedError

    def render(self, plan: "Plan") -> str:
        """The engine's artifact for ``plan``: exactly what ``apply`` runs."""
        raise NotImplementedError

    # -- the engine --------------------------------------------------------------------------------
    def preflight(self, plan: "Plan") -> None:
        """Raise an OrchError naming what to do unless the engine can run ``plan`` now."""
        raise NotImplementedError

    def stage(self, plan: "Plan", say: Callable[[str], None]) -> None:
        """Make what the replicas need beyond the image and the prepared data set (a data image, say); after
        preflight, before apply. Nothing by default."""

    def stage_script(self, plan: "Plan", snapshot: Path, say: Callable[[str], None]) -> None:
        """Where the replicas run a script from an image (``plan.script_on``), make that image from the run's
        ``snapshot`` of the script's folder; after the snapshot is made, before apply. Nothing by default."""

    def apply(self, plan: "Plan", artifact: Path) -> None:
        """Start every replica of ``plan`` from the artifact written at ``artifact``."""
        raise NotImplementedError

    def states(self, run_id: Optional[str] = None) -> list[ReplicaState]:
        """Every replica of ``run_id`` (of every orch run when None) that the engine still has."""
        raise NotImplementedError

    def logs(self, replica: ReplicaState, tail: Optional[int] = None) -> str:
        """A replica's output so far (its last ``tail`` lines), or "" if it is gone."""
        raise NotImplementedError

    def log_lines(self, replica: ReplicaState, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        """Lines of one output stream (stdout or stderr), each prefixed with the engine's RFC 3339 time."""
        raise NotImplementedError

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        """A replica's resource use, about once a second, until it ends; nothing where the engine has none."""
        raise NotImplementedError

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
        """A running replica's resource use now, or None."""
        raise NotImplementedError

    def stats_elsewhere(self, run_id: str) -> Optional[str]:
        """Where the engine gives no live figures of the run's replicas to orch: where a user finds them instead (a
        sentence). None where ``stats_stream`` gives them."""
        return None

    def replica_pids(self, run_id: str) -> dict[str, int]:
        """The host PID of each running replica's container on this host, by container id, where the engine runs its
        containers here: the disk guard stops a writer through them at once. {} where it does not (a cluster),
        and the guard stops the run through ``cancel``."""
        return {}

    def cancel(self, run_id: str, artifact: Optional[Path], grace: int, clock: Any = None) -> None:
        """Stop and remove every replica and network of the run; ``grace`` seconds to stop before a kill.
        Each step runs even when an earlier one failed. ``clock`` (``time`` by default) paces any waiting."""
        raise NotImplementedError


def bounded_name(run_id: str, limit: int, allowed: str) -> str:
    """``orch-<run id>`` where that is at most ``limit`` characters of the class ``allowed`` (e.g. "a-z0-9-"),
    else a shortened form with a hash of the run id, so that distinct ids stay distinct."""
    name = f"orch-{run_id}"
    if len(name) <= limit and re.fullmatch(f"[{allowed}]+", name) and name[-1].isalnum():
        return name
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:6]
    return re.sub(f"[^{allowed}]", "-", name)[:limit - 7].rstrip("-_") + "-" + digest


def pulled(image: str, spec: "JobSpec", own: bool) -> str:
    """``image`` as the nodes pull it: orch's own images under ``--registry``; a user's image as given."""
    registry = spec.backend_options.image_registry()
    if not (own and registry):
        return image
    try:
        return imageref.check(f"{registry}/{image}", "registry")
    except ValueError as exc:  # a registry and an image each valid, together too long
        raise InvalidSpec(str(exc)) from None
