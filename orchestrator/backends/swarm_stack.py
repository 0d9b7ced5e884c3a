"""The Swarm stack file for a plan: one service per replica on an internal overlay network. Pure: no engine.

One service per replica, not one service with N tasks: a service's DNS name then names exactly one container
(``endpoint_mode: dnsrr``, one task), so each replica's address is its service name on the stack's overlay
network, as its host name is on Compose's bridge, and every per-replica value (the framework's placeholders filled,
the index) is a literal in its own service. Swarm's templates cannot do arithmetic and ``tasks.<service>`` answers in no fixed order, so
one templated service could not name its replicas exactly. ``swarm.py`` is the backend that deploys it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from orchestrator import __version__, contract
from orchestrator.backends import options
from orchestrator.backends.base import Key, bounded_name, pulled
from orchestrator.labels import LABEL_RUN

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan, Replica

MTU_OPTION = "com.docker.network.driver.mtu"
DEFAULT_OVERLAY_MTU = 1450  # Docker's overlay default: 1500 less VXLAN's 50
VXLAN_BYTES = 50
STACK_VERSION = "3.9"  # the first stack file version with a process limit (deploy.resources.limits.pids)
STACK_MAX = 40  # leaves room in a 63-character service name for "_<role>-<index>"
NETWORK = "cluster"
MiB = 2**20
TMP_BYTES = 512 * MiB  # as Compose's /tmp
SHM_BYTES = 64 * MiB  # Docker's default /dev/shm, which a service cannot size (no shm_size)
RUN_BYTES = 256 * MiB  # the replica's own folder: predictions, nothing orch reads from it

# What Compose sets and a stack file cannot, in the comment on top of every stack file and in docs/backends.md.
NOT_EXPRESSIBLE = (
    "security_opt no-new-privileges: a service has no such setting (the replicas run as a non-root user with "
    "every capability dropped, so a setuid program gains nothing)",
    "shm_size: a service cannot size /dev/shm; a 64 MiB tmpfs is mounted there instead",
    "cpuset (--pin-cpus): a service has none, and a replica's node is not known when the plan is made; limit "
    "each with --cpus",
    "GPUs (--gpus): a service gets GPUs only as generic resources each node advertises; refused",
    "network_mode (--network shared or host): replicas meet on the stack's overlay network only",
)


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper (every value a scalar, never a new key), with every string double-quoted: Go's YAML
    parser, which `docker stack deploy` uses, reads some plain scalars (``y``, ``on``) otherwise than PyYAML."""


_Dumper.add_representer(str, lambda dumper, data: dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"'))


def stack_name(run_id: str) -> str:
    """The run's stack: ``orch-<run id>`` where that is short enough for its service names (and plain: a run id
    is), else a shortened form with a hash of the run id, so distinct ids stay distinct."""
    return bounded_name(run_id, STACK_MAX, "a-z0-9_-")


def _escaped(value: Any) -> Any:
    """``value`` with every ``$`` doubled in its strings: `docker stack deploy` interpolates ``${VAR}`` from the
    caller's environment, and ``$$`` is its escape for one ``$``."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def addresses(spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
    """Each replica's service name and port: a service's short name is its alias on the stack's network, and
    with dnsrr it resolves to its one task."""
    return {(role, index): f"{role}-{index}:{port}" for role, index in keys}


def render(plan: "Plan") -> str:
    """The stack file of ``plan``, with comment lines above saying what it needs and cannot express."""
    spec = plan.spec
    mtu = options.swarm(spec).overlay_mtu
    stack = {
        "version": STACK_VERSION,
        "services": {r.name: _service(plan, r) for r in plan.replicas},
        "networks": {NETWORK: {
            "driver": "overlay",
            "internal": True,  # no route out: the replicas talk to each other only
            "attachable": False,  # no container outside the stack can join it
            "labels": {LABEL_RUN: spec.run_id},
            **({"driver_opts": {MTU_OPTION: str(mtu)}} if mtu else {}),
        }},
    }
    body = yaml.dump(_escaped(stack), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1 << 20)  # no folded lines: one value, one line
    return "\n".join(notes(plan)) + "\n" + body

def notes(plan: "Plan") -> list[str]:
    """The comment lines above the stack file: what it is, what it needs, what Swarm cannot express."""
    spec = plan.spec
    # The stack name, not the run id: a comment line must hold nothing that could end it.
    notes = [f"# Rendered by orch {__version__} for run {stack_name(spec.run_id)}; `orch up --backend swarm` "
             "deploys it (`docker stack deploy`), do not edit.",
             "# The data set is inside the image (orch adds it as a layer); images reach other nodes through "
             "--registry or `orch push --context NODE`.",
             "# The run's shared folder (checkpoints) is bind-mounted from this host only with --max-restarts, "
             "which needs a swarm of one node.",
             "# Records come back as @orch lines on stdout; the overlay network's MTU is "
             + (f"{options.swarm(spec).overlay_mtu} (--overlay-mtu)." if options.swarm(spec).overlay_mtu else
                "the engine's (1450 by default; orch checks it against this node's interface on a swarm of several "
                "nodes)."),
             "# Not expressible in a stack file (Compose has them):"]
    notes += [f"#   - {line}" for line in NOT_EXPRESSIBLE]
    if plan.script_on:
        notes.append(f"# The script's copy is a layer on {plan.script_on} ({plan.loaders_on} with the frameworks' "
                     "data caches), made when the run starts; "
                     + ("orch pushes it to --registry." if options.swarm(spec).registry else
                        "only this node has it, so the stack needs a swarm of one node (or --registry)."))
    if spec.pin_cpus:
        notes.append("# --pin-cpus is not applied here: each replica may use every core of its node.")
    if spec.image is None and options.swarm(spec).registry is None:
        notes.append("# orch's images are named as built here, which only this node has; for several nodes push "
                     "them and pass --registry HOST/PATH.")
    return notes

def _service(plan: "Plan", r: "Replica") -> dict[str, Any]:
    spec = plan.spec
    env = {k: v for k, v in r.env.items() if k != contract.ENV_CPUS}  # no cpuset: see NOT_EXPRESSIBLE
    env[contract.ENV_REPORT] = contract.REPORT_STDOUT
    own = f"{contract.OUT_MOUNT}/{r.name}"
    # The replica's own folder: orch's trainer prints its records on stdout instead. A user's script keeps
    # it, as its working folder, where what it writes is kept with the run (on this node's path), unless its
    # nodes pull their images from --registry: then they may be several, and it is a folder of the container.
    shared = f"{contract.OUT_MOUNT}/{contract.SHARED_DIR}"
    keeps_own = spec.script is not None and options.swarm(spec).registry is None
    volumes: list[dict[str, Any]] = [
        {"type": "volume" if m.volume else "bind", "source": m.source, "target": m.target,
         **({"read_only": True} if m.read_only else {})}
        for m in r.mounts if (m.target != own or keeps_own)
        and (m.target != shared or spec.max_restarts)
    ]
    if spec.script is not None and not keeps_own:
        volumes.append({"type": "tmpfs", "target": own, "tmpfs": {"size": RUN_BYTES}})
    if not spec.max_restarts:
        # Nothing to resume from: the shared folder (checkpoints, the "result written" markers) stays in
        # the container, so a replica needs no folder of this host on whatever node it runs.
        volumes.append({"type": "tmpfs", "target": shared, "tmpfs": {"size": RUN_BYTES}})
    volumes += [
        # Not for a script on this node's folder: its image links a data cache's "../data" there (images/script.py).
        *([] if keeps_own else [{"type": "tmpfs", "target": contract.OUT_MOUNT, "tmpfs": {"size": RUN_BYTES}}]),
        {"type": "tmpfs", "target": "/tmp", "tmpfs": {"size": TMP_BYTES}},
        {"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": r.shm_mb * MiB or SHM_BYTES}},
    ]
    limits: dict[str, Any] = {"memory": f"{spec.memory_mb}M", "pids": spec.pids_limit}
    if spec.cpus:
        limits["cpus"] = f"{spec.cpus:g}"
    script = {"entrypoint": list(r.command), "working_dir": r.working_dir} if r.command else {}
    return {
        "image": pulled(r.image, spec, own=r.image != spec.image),  # a data image on the user's is orch's
        **script,
        "hostname": r.name,
        "networks": [NETWORK],
        "user": plan.user,
        "init": True,
        "stop_grace_period": "10s",
        "environment": dict(env),
        "labels": dict(r.labels),  # the container's: engine.containers() finds the tasks' containers by them
        "volumes": volumes,
        "read_only": True,
        "cap_drop": ["ALL"],
        "logging": {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}},
        "deploy": {
            "mode": "replicated",
            "replicas": 1,
            "endpoint_mode": "dnsrr",  # no virtual IP: IPVS drops TCP connections idle for 15 minutes
            "restart_policy": {"condition": "none"},  # orch restarts the whole group, or nothing
            "labels": dict(r.labels),  # the service's: states() finds the services by them
            "resources": {"limits": limits},
        },
    }
