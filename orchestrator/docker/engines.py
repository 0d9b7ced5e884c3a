"""The container engines orch drives through one API: Docker's daemon, and Podman's Docker-compatible service.

Both answer the Docker Engine API on a socket, so every part of ``Engine`` (the SDK's calls, `docker compose` and
`docker save` through the docker CLI) serves both; what differs is where the socket is, what to tell a user whose
engine does not answer, and the few things Podman does otherwise, each named here. Standard library only: the spec
loads it to check a run's engine without loading an engine's client.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

ENGINES = ("docker", "podman")
DEFAULT = "docker"


@dataclass(frozen=True)
class EngineKind:
    """One engine: its name, how to reach it and what to say when it does not answer."""

    name: str
    label: str  # as prose names it: "Docker engine", "Podman service"
    hint: str
    swarm: bool  # whether it can run Swarm services (Podman has no swarm mode)
    private_pid_init: bool  # whether an init process may only be PID 1 of a replica's own PID namespace
    podman_limits: bool = False  # whether replicas need this host's limits spelled out (``ulimits``)
    # Seconds between the records of the engine's stats stream: Docker's daemon sends one a second; Podman's
    # Docker-compatible endpoint one each 5 s, and its one-off record has no earlier sample to measure CPU against.
    stats_period: float = 1.0

    def address(self) -> str:
        """The engine's socket: DOCKER_HOST (Docker), CONTAINER_HOST (Podman), else where the engine puts it."""
        if self.name == "docker":
            return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        given = os.environ.get("CONTAINER_HOST")
        if given:
            return given
        return f"unix://{podman_socket()}"

    def ulimits(self) -> dict[str, int]:
        """The process limits a replica is given beside orch's own (RLIMIT_FSIZE), as Compose's ``ulimits`` names
        them. Docker's containers inherit its daemon's. Rootful Podman's would be raised to a million open files and
        more processes, which fails ("error setting rlimits ... operation not permitted") on a host whose root may not
        raise its limits (no CAP_SYS_RESOURCE: a CI runner in a container); so for Podman, this host's own limits,
        with processes at Podman's own 32,768, which also no container comes near (``--pids-limit``)."""
        if not self.podman_limits:
            return {}
        import resource

        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        return {"nofile": _capped(nofile, 1 << 20), "nproc": _capped(nproc, 32768)}

    def userns(self) -> str:
        """The user namespace a replica gets, as Compose's ``userns_mode`` names it ("" for the engine's default).
        Rootless Podman maps its user to root inside a container and uid 1000 to one of the user's subordinate
        uids, which owns no folder of the run: "keep-id" maps the user to itself, whose uid the replicas run as
        (``runner.container_user``). Rootful engines hand a uid's folders over to it instead (``RunDir``)."""
        return "keep-id" if self.name == "podman" and os.getuid() != 0 else ""

    def creates_at_once(self) -> bool:
        """Whether Compose may create a run's replicas at once. Not on rootless Podman: under keep-id its service
        (Podman 4.3) looks up the user's subordinate ids through libsubid for each container it creates, and calls
        made at once fail ("cannot read subids") or crash the service, whose connection then closes mid-run."""
        return self.userns() != "keep-id"

    def build_fix(self, command: str) -> str:
        """What to do about a missing image of orch's that ``command`` (an `orch build`) makes, on this engine."""
        if self.name == DEFAULT:
            return f"run `{command}`"
        here = command.replace("orch build", f"orch build --engine {self.name}", 1)
        return f"run `{here}` (or copy Docker's: `orch push --to-engine {self.name}`)"

    def unreachable(self) -> str:
        """The one line for an engine that does not answer."""
        return f"cannot reach the {self.label} at {self.address()}; {self.hint}"


def _capped(limit: int, cap: int) -> int:
    """``limit``, or ``cap`` where it is higher or unlimited (RLIM_INFINITY, -1)."""
    return cap if limit < 0 or limit > cap else limit


def podman_socket(uid: Optional[int] = None) -> str:
    """Where Podman's API service listens by default: /run/podman for root, the user's runtime folder otherwise."""
    uid = os.getuid() if uid is None else uid
    if uid == 0:
        return "/run/podman/podman.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
    return f"{runtime}/podman/podman.sock"


DOCKER = EngineKind("docker", "Docker engine",
                    "start it (e.g. `sudo systemctl start docker`) or point DOCKER_HOST at a running one",
                    swarm=True, private_pid_init=False)
PODMAN = EngineKind("podman", "Podman service",
                    "start it with `orch doctor --engine podman --fix` (or `systemctl --user start podman.socket`), "
                    "or point CONTAINER_HOST at a running one",
                    swarm=False, private_pid_init=True, podman_limits=True, stats_period=5.0)
_KINDS = {kind.name: kind for kind in (DOCKER, PODMAN)}


def of_options(options: object) -> EngineKind:
    """The engine a run's backend options name (Compose's ``engine``); Docker for options that name none."""
    return get(getattr(options, "engine", None) or DEFAULT)


def get(name: Optional[str] = None) -> EngineKind:
    """The engine called ``name``; where None, $ORCH_ENGINE's, else Docker. ValueError for an unknown name."""
    chosen = name or os.environ.get("ORCH_ENGINE") or DEFAULT
    if chosen not in _KINDS:
        raise ValueError(f"unknown engine {chosen!r}; orch runs on {' or '.join(ENGINES)}")
    return _KINDS[chosen]
