"""Docker Compose on one host: a Compose file per run, one service per replica, found again by labels."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from orchestrator import __version__
from orchestrator.backends.base import Backend, Key, ReplicaState, Status, Usage
from orchestrator.backends.template import render_template
from orchestrator.docker import engines
from orchestrator.docker.engine import ContainerState, Engine
from orchestrator.errors import InvalidSpec
from orchestrator.images import venv_volume
from orchestrator.labels import LABEL_RUN
from orchestrator.timestamps import parse_timestamp

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

TEMPLATE = "job.yml.j2"
SHM_MB = 256  # /dev/shm of a group that shares one IPC namespace (a shared-memory transport lives there)


def port_base(spec: "JobSpec", port: int) -> int:
    """First loopback port of a run's replicas when they share one network namespace. On the host's
    network, runs share the port space, so each run takes a block derived from its id (deterministic,
    so the plan stays pure)."""
    if spec.network != "host":
        return port
    return 20_000 + int(hashlib.sha256(spec.run_id.encode()).hexdigest(), 16) % 1000 * 32


def replica_state(c: ContainerState) -> ReplicaState:
    """A container as an engine-neutral replica state."""
    if c.status in ("exited", "dead"):
        status = Status.SUCCEEDED if c.exit_code == 0 else Status.FAILED
    else:
        status = {"running": Status.RUNNING, "paused": Status.PAUSED, "created": Status.PENDING,
                  "restarting": Status.PENDING}.get(c.status, Status.UNKNOWN)
    finished = None
    if c.finished_at and status.is_terminal:
        try:
            finished = parse_timestamp(c.finished_at)
        except ValueError:
            finished = None
    return ReplicaState(id=c.id, name=c.name, run=c.run, role=c.role, index=c.index, status=status,
                        exit_code=c.exit_code, oom_killed=c.oom_killed, finished_at=finished)


def _volumes(plan: "Plan") -> list[str]:
    """The engine's volumes the replicas of ``plan`` mount, each once."""
    return sorted({m.source for r in plan.replicas for m in r.mounts if m.volume})


class ComposeBackend(Backend):
    """The `docker compose` v2 CLI for up and down, and the Engine API for state, logs and stats."""

    name = "compose"
    artifact_name = "compose.yml"
    venv_volume = True
    binds_run_dir = True

    def __init__(self, engine: Optional[Engine] = None) -> None:
        self._engine = engine

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine()
        return self._engine

    # -- pure ----------------------------------------------------------------------------------
    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        if spec.network in ("shared", "host"):
            # One network namespace: each replica takes its own loopback port.
            base = port_base(spec, port)
            return {key: f"localhost:{base + i}" for i, key in enumerate(keys)}
        return {(role, index): f"{role}-{index}:{port}" for role, index in keys}

    @property
    def place(self) -> str:
        kind = getattr(self.engine, "kind", None)  # a test's engine may have none: the default one's
        return f"{self.name} on {kind.name if kind is not None else engines.get().name}"

    def engine_name(self, run_id: str) -> str:
        return f"orch-{run_id}"

    def render(self, plan: "Plan") -> str:
        spec = plan.spec
        kind = engines.of_options(spec.backend_options)
        joins_pid = kind.private_pid_init
        services = [
            {
                "service": r.name,
                "image": r.image,
                "env": r.env,
                "labels": r.labels,
                "mounts": r.mounts,
                "command": r.command,
                "working_dir": r.working_dir,
                "host_network": spec.network == "host",
                "shares_network": spec.network == "shared" and i > 0,
                # One host for a framework's shared memory (Framework.shares_host): a common host name (none of the replicas' own, which their
                # /etc/hosts would map to themselves), and the group's first replica's IPC and PID namespaces.
                "hostname": f"{r.host_group}-host" if r.host_group else r.name,
                "ipc": "" if not r.host_group else "shareable" if r.name == r.host_group else f"service:{r.host_group}",
                "shm_mb": r.shm_mb if not r.host_group else 0,
                # Podman gives an init process only to a container with a PID namespace of its own; one that joins
                # its group's namespace has the group's first replica's init as PID 1, which reaps for it.
                "init": not (joins_pid and r.host_group and r.name != r.host_group),
            }
            for i, r in enumerate(plan.replicas)
        ]
        return render_template(TEMPLATE, {
            "version": __version__,
            "run_id": spec.run_id,
            "project": self.engine_name(spec.run_id),
            "workers": services,
            "user": plan.user,
            "userns": kind.userns(),
            "memory_mb": spec.memory_mb,
            "pids_limit": spec.pids_limit,
            # The kernel's own cap on any one file a replica writes (RLIMIT_FSIZE): a writer of one file stops at the
            # limit exactly, before the disk guard's next look (run/disk.py).
            "file_size_limit": spec.disk_limit_mb << 20,
            "ulimits": kind.ulimits(),
            "cpus": spec.cpus,
            "gpus": spec.gpus,
            # --shm-size as asked; else enough for the frameworks' shared memory and for each replica's own need.
            "group_shm_mb": spec.shm_size_mb or max(SHM_MB, *(r.shm_mb for r in plan.replicas)),
            "run_label": LABEL_RUN,
            # Made in stage(), not by Compose: a volume Compose made would start empty, or filled by whichever
            # replica started first.
            "volumes": _volumes(plan),
        })

    # -- the engine ----------------------------------------------------------------------------
    def preflight(self, plan: "Plan") -> None:
        self.engine.ping()
        self.engine.compose_version()
        self.engine.require_image(plan.image, plan.build_hint)
        kind = engines.of_options(plan.spec.backend_options)
        if kind is engines.PODMAN and len(plan.replicas) > 1 and plan.spec.network not in ("shared", "host"):
            from orchestrator.docker import podman_net

            why = podman_net.blocked()  # the replicas would wait for each other until the startup timeout
            if why:
                raise InvalidSpec(f"engine podman: {why}; run `orch doctor --engine podman --fix` (as root), or "
                                  "--network shared")
        if plan.spec.cpus is not None:  # the engine refuses more CPUs than it has, once the run is half made
            cores = self.engine.info().get("NCPU")
            if isinstance(cores, int) and cores > 0 and plan.spec.cpus > cores:
                raise InvalidSpec(f"cpus: this {kind.label} has {cores} CPUs, and Compose cannot give a container more; "
                                  f"use --cpus {cores} or less")

    def stage(self, plan: "Plan", say: Callable[[str], None]) -> None:
        # An image's environment, copied once per build (images/venv_volume.py), under a lock every orch process
        # of this user takes, whichever folder its runs go to: the volume is the engine's, not the folder's.
        for name in _volumes(plan):
            venv_volume.ensure(self.engine, name, plan.image, plan.cache_dir, say)

    def apply(self, plan: "Plan", artifact: Path) -> None:
        self.engine.compose_up(artifact, self.engine_name(plan.spec.run_id))

    def states(self, run_id: Optional[str] = None) -> list[ReplicaState]:
        return [replica_state(c) for c in self.engine.containers(run_id)]

    def logs(self, replica: ReplicaState, tail: Optional[int] = None) -> str:
        return self.engine.logs(replica.id, tail=tail)

    def log_lines(self, replica: ReplicaState, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        return self.engine.log_lines(replica.id, stream, follow=follow, since=since)

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        return self.engine.stats_stream(replica.id)

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
        return self.engine.stats_once(replica.id)

    def replica_pids(self, run_id: str) -> dict[str, int]:
        return self.engine.host_pids(run_id)

    def cancel(self, run_id: str, artifact: Optional[Path], grace: int, clock: Any = None) -> None:
        try:
            if artifact is not None and artifact.is_file():
                self.engine.compose_down(artifact, self.engine_name(run_id), timeout=grace)  # and the network
        finally:
            for leftover in self.engine.containers(run_id):
                self.engine.remove_container(leftover.id)
