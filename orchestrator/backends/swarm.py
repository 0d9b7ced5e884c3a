"""Docker Swarm: a stack file per run (``swarm_stack.py``), deployed with `docker stack deploy`.

Swarm's restart policy is off (``condition: none``): orch's supervisor restarts the whole group, as on Compose.
No folder of orch's is shared with the replicas' own folders: they print their records on stdout
(``ORCH_REPORT=stdout``) and the runner copies them into the run directory (``log_reports.py``). The data set
travels inside the image (``data_images.py``), so a node needs nothing of this host but the image. The run's
shared folder (checkpoints, the workers' "result written" markers) is bind-mounted from this host only with
``--max-restarts``, which is refused on a swarm of several nodes: the others could not read the checkpoints.
See docs/multi-host.md.
"""
from __future__ import annotations

import dataclasses
import re
import socket
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from orchestrator.backends import swarm_stack as stack
from orchestrator.backends import options
from orchestrator.backends.base import REMOVAL_WAIT, Backend, Key, ReplicaState, Status, Usage
from orchestrator.backends.swarm_stack import (
    DEFAULT_OVERLAY_MTU,
    NOT_EXPRESSIBLE,
    STACK_MAX,
    VXLAN_BYTES,
    stack_name,
)
from orchestrator.docker.engine import Engine
from orchestrator.errors import DockerError, InvalidSpec, OrchError
from orchestrator.images import data as data_images
from orchestrator.images import script as script_images
from orchestrator.labels import LABEL_INDEX, LABEL_ROLE, LABEL_RUN, LABEL_STACK
from orchestrator.timestamps import parse_timestamp

__all__ = ["SwarmBackend", "NOT_EXPRESSIBLE", "STACK_MAX", "check_mtu", "replica_state", "replica_states",
           "stack_name"]

if TYPE_CHECKING:
    from pathlib import Path

    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

REASON_MAX = 200
STATS_WAIT = 300  # seconds a replica's stats wait for its task to start

# Task states (swarmkit's, lower case as the Engine API gives them) in orch's terms.
_PENDING = {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting"}
_STATES = {**{s: Status.PENDING for s in _PENDING}, "running": Status.RUNNING, "complete": Status.SUCCEEDED,
           "failed": Status.FAILED, "rejected": Status.FAILED, "orphaned": Status.FAILED}


def interface_mtus() -> dict[str, tuple[str, int]]:
    """This host's IPv4 addresses: each with its interface's name and MTU."""
    import psutil

    stats = psutil.net_if_stats()
    return {a.address: (name, stats[name].mtu) for name, addrs in psutil.net_if_addrs().items() if name in stats
            for a in addrs if a.family == socket.AF_INET}


def check_mtu(overlay_mtu: int, node_addr: str, interfaces: dict[str, tuple[str, int]]) -> None:
    """InvalidSpec (one line) if the overlay's packets, with VXLAN's 50 bytes, would not fit the MTU of the
    interface this node's swarm traffic leaves by: between nodes the large ones would be dropped, and gRPC's
    connections would stall. Unknown interfaces are let through."""
    if node_addr not in interfaces:
        return
    name, mtu = interfaces[node_addr]
    overlay = overlay_mtu or DEFAULT_OVERLAY_MTU
    if overlay + VXLAN_BYTES > mtu:
        raise InvalidSpec(f"overlay_mtu: this node's swarm address {node_addr} is on {name}, whose MTU is {mtu}; the "
                          f"overlay's packets ({overlay} bytes{'' if overlay_mtu else ', the default'}) plus VXLAN's "
                          f"{VXLAN_BYTES} would not fit between nodes; pass --overlay-mtu {mtu - VXLAN_BYTES}")


def _reason(text: Any) -> Optional[str]:
    """An engine message as one short printable line, or None."""
    if not isinstance(text, str) or not text.strip():
        return None
    line = re.sub(r"[^\x20-\x7e]+", " ", text).strip()
    return line[:REASON_MAX]


def _version(task: dict[str, Any]) -> tuple[int, str]:
    return (int(((task.get("Version") or {}).get("Index")) or 0), str(task.get("CreatedAt") or ""))


def _label_index(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return -1


def replica_state(service: dict[str, Any], task: Optional[dict[str, Any]]) -> ReplicaState:
    """A service and its newest task (None: not scheduled yet) as an engine-neutral replica state."""
    spec = service.get("Spec") or {}
    labels = spec.get("Labels") or {}
    common: dict[str, Any] = {"name": str(spec.get("Name", "")), "run": str(labels.get(LABEL_RUN, "")),
              "role": str(labels.get(LABEL_ROLE, "")), "index": _label_index(labels.get(LABEL_INDEX, "-1"))}
    if task is None:
        return ReplicaState(id=str(service.get("ID", "")), status=Status.PENDING, **common)
    status_doc = task.get("Status") or {}
    container = status_doc.get("ContainerStatus") or {}
    state = str(status_doc.get("State", "")).lower()
    status = _STATES.get(state, Status.UNKNOWN)  # shutdown, remove: being taken away (a vanished replica follows)
    exit_code = container.get("ExitCode") if status.is_terminal else None
    if status == Status.FAILED and exit_code == 0:
        exit_code = None  # rejected or orphaned before its container ran
    if status == Status.SUCCEEDED:
        exit_code = 0
    reason = None
    if status == Status.FAILED and exit_code is None:
        words = {"rejected": "the swarm rejected it", "orphaned": "its node left the swarm or is down"}.get(
            state, "the swarm reports it failed")
        detail = _reason(status_doc.get("Err"))
        reason = f"{words} ({detail})" if detail else words
    finished = None
    if status.is_terminal and status_doc.get("Timestamp"):
        try:
            finished = parse_timestamp(str(status_doc["Timestamp"]))
        except ValueError:
            finished = None
    return ReplicaState(id=str(container.get("ContainerID") or task.get("ID", "")), status=status,
                        exit_code=exit_code if isinstance(exit_code, int) else None, finished_at=finished,
                        reason=reason, **common)


def newest_tasks(tasks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each service's newest task, by service id (with restarts off a service has one, unless updated from outside)."""
    newest: dict[str, dict[str, Any]] = {}
    for task in tasks:
        sid = str(task.get("ServiceID", ""))
        if sid not in newest or _version(task) > _version(newest[sid]):
            newest[sid] = task
    return newest


def replica_states(services: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> list[ReplicaState]:
    """Each service of orch's with its newest task, in (run, role, index) order."""
    newest = newest_tasks(tasks)
    states = [replica_state(s, newest.get(str(s.get("ID", "")))) for s in services]
    return sorted(states, key=lambda r: (r.run, r.role, r.index))


class SwarmBackend(Backend):
    """`docker stack deploy` and `docker stack rm` for up and down; the Engine API for tasks, logs and stats."""

    name = "swarm"
    artifact_name = "stack.yml"
    reports_on_stdout = True

    def __init__(self, engine: Optional[Engine] = None) -> None:
        self._engine = engine
        # For each replica id states() handed out: its service, and whether its container is on this node.
        self._where: dict[str, tuple[str, bool]] = {}
        self._node: Optional[str] = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(kind="docker")  # Podman has no swarm mode
        return self._engine

    # -- pure ----------------------------------------------------------------------------------
    def engine_name(self, run_id: str) -> str:
        return stack_name(run_id)

    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        return stack.addresses(spec, keys, port)

    def render(self, plan: "Plan") -> str:
        return stack.render(plan)


    # -- the engine ----------------------------------------------------------------------------
    ships_data = True  # in the image (data_images.py): a node sees no folder of this host
    script_in_image = True  # a node or pod sees no folder of this host

    def preflight(self, plan: "Plan") -> None:
        self.engine.ping()
        swarm = self.engine.swarm()
        if swarm.get("LocalNodeState") != "active":
            raise DockerError("this Docker engine is in no swarm; run `docker swarm init` (one node: "
                              "`docker swarm init --advertise-addr 127.0.0.1`), or use --backend compose")
        if not swarm.get("ControlAvailable"):
            raise DockerError("this Docker engine is a swarm worker; run orch where `docker stack deploy` works, on "
                              "a manager node")
        nodes = int(swarm.get("Nodes") or 1)
        if nodes > 1:
            check_mtu(options.swarm(plan.spec).overlay_mtu, str(swarm.get("NodeAddr") or ""), interface_mtus())
        if plan.spec.max_restarts and nodes > 1:
            raise InvalidSpec(f"max_restarts: this swarm has {nodes} nodes, and a restarted group resumes from "
                              "checkpoints in this host's run folder, which the other nodes cannot read; use "
                              "--max-restarts 0 (a failed run then fails), or a swarm of one node")
        if plan.spec.script is not None and nodes > 1 and options.swarm(plan.spec).registry is None:
            raise InvalidSpec(f"script: this swarm has {nodes} nodes, and the other nodes cannot see the image orch "
                              "makes of your script for this run; pass --registry HOST/PATH, a registry every node "
                              "pulls from (orch pushes the run's script image there), or use a swarm of one node")
        if options.swarm(plan.spec).registry is None or plan.loaders_on:  # a script's image is made here
            self.engine.require_image(plan.base_image, plan.build_hint)

    def stage(self, plan: "Plan", say: Callable[[str], None]) -> None:
        base, data = plan.base_image, plan.loaders_on or plan.image  # the run's image, before a script's layers
        # With a registry the nodes pull what was pushed; but a script's layer is made here, on the data image.
        if data != base and (options.swarm(plan.spec).registry is None or plan.loaders_on):
            data_images.ensure(self.engine, base, data, plan.data_dir, say)

    def stage_script(self, plan: "Plan", snapshot: "Path", say: Callable[[str], None]) -> None:
        script_images.stage(self.engine, plan, snapshot, say)

    def apply(self, plan: "Plan", artifact: "Path") -> None:
        # With a registry, pin each image's digest so every node runs the same one; without, the nodes use the
        # local name (a registry lookup of an image only this node has would only warn).
        self.engine.stack_deploy(artifact, stack_name(plan.spec.run_id),
                                 resolve_image="always" if options.swarm(plan.spec).registry else "never",
                                 registry_auth=options.swarm(plan.spec).registry is not None)

    def states(self, run_id: Optional[str] = None) -> list[ReplicaState]:
        services = self.engine.services(LABEL_RUN if run_id is None else f"{LABEL_RUN}={run_id}")
        if not services:
            return []
        newest = newest_tasks(self.engine.tasks([str(s.get("ID", "")) for s in services]))
        node = self._local_node()
        out = []
        for service in services:
            sid = str(service.get("ID", ""))
            task = newest.get(sid)
            state = replica_state(service, task)
            local = task is not None and node is not None and task.get("NodeID") == node
            self._where[state.id] = (sid, local)
            if local and state.status == Status.FAILED and state.exit_code == 137:
                state = dataclasses.replace(state, oom_killed=self.engine.oom_killed(state.id))
            out.append(state)
        return sorted(out, key=lambda r: (r.run, r.role, r.index))

    def _local_node(self) -> Optional[str]:
        if self._node is None:
            try:
                self._node = str(self.engine.swarm().get("NodeID") or "") or None
            except Exception:  # noqa: BLE001 - without it, logs come through the service API
                self._node = None
        return self._node

    def _local(self, replica: ReplicaState) -> tuple[str, bool]:
        """The replica's service and whether its container is on this node (unknown replicas: assumed local)."""
        return self._where.get(replica.id, ("", True))

    def logs(self, replica: ReplicaState, tail: Optional[int] = None) -> str:
        service, local = self._local(replica)
        return self.engine.logs(replica.id, tail=tail) if local or not service \
            else self.engine.service_logs(service, tail=tail)

    def log_lines(self, replica: ReplicaState, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        service, local = self._local(replica)
        if local or not service:
            return self.engine.log_lines(replica.id, stream, follow=follow, since=since)
        return self.engine.service_log_lines(service, stream, follow=follow, since=since)

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        import time

        # Right after `docker stack deploy` a task has no container yet: wait (a while) for it to start.
        deadline = time.monotonic() + STATS_WAIT
        while replica.status == Status.PENDING and time.monotonic() < deadline:
            time.sleep(1.0)
            found = next((s for s in self.states(replica.run) if s.key == replica.key), None)
            if found is None:
                return
            replica = found
        # The Engine API serves stats of this node's containers only: a replica elsewhere has none here.
        if replica.status == Status.RUNNING and self._local(replica)[1]:
            yield from self.engine.stats_stream(replica.id)

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
        return self.engine.stats_once(replica.id) if self._local(replica)[1] else None

    def cancel(self, run_id: str, artifact: Optional["Path"], grace: int, clock: Any = None) -> None:
        import time

        clock = clock or time
        stack = stack_name(run_id)
        # Each step runs even when an earlier one failed; the first failure is raised once all have run.
        failures: list[OrchError] = []
        if grace == 0:
            # Nothing left to lose: no service's stop grace period (10 s) for the containers on this node.
            for leftover in self.engine.containers(run_id):
                try:
                    self.engine.remove_container(leftover.id)
                except OrchError as exc:
                    failures.append(exc)
        try:
            self.engine.stack_rm(stack)
        except OrchError as exc:
            failures.append(exc)
        try:
            self._wait_removed(run_id, stack, grace, clock)
        except OrchError as exc:
            failures.append(exc)
        if failures:
            raise failures[0]

    def _wait_removed(self, run_id: str, stack: str, grace: int, clock: Any) -> None:
        """Wait until the stack's services, this node's containers and the run's network are gone, removing the
        network once nothing uses it: `docker stack rm` returns before the tasks stop, and cannot remove it until
        they have."""
        deadline = clock.monotonic() + grace + REMOVAL_WAIT
        while True:
            services = self.engine.services(f"{LABEL_STACK}={stack}")
            containers = self.engine.containers(run_id)
            if not services and not containers:
                for network in self.engine.networks(f"{LABEL_RUN}={run_id}"):
                    self.engine.remove_network(network)
                if not self.engine.networks(f"{LABEL_RUN}={run_id}"):
                    return
            if clock.monotonic() > deadline:
                left = ", ".join(filter(None, [f"{len(services)} service(s)" if services else "",
                                               f"{len(containers)} container(s)" if containers else ""]))
                raise DockerError(f"stack {stack} was not gone within {grace + REMOVAL_WAIT} s "
                                  f"({left or 'its network'} left); `orch down {run_id}` tries again")
            clock.sleep(0.5)
