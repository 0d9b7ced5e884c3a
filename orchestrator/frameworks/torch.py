"""PyTorch: DistributedDataParallel over gloo, one rank per container, met through the environment.

Why the environment (``init_method="env://"``: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) and not
torchrun's c10d rendezvous: orch already knows every replica's rank and address when it plans the job, and its
supervisor already restarts the whole group after a failure. c10d's elastic agent would add a second supervisor
that restarts ranks on its own, and a rendezvous whose membership can change; with a fixed world the environment
is all a rank needs. Rank 0 hosts the TCP store the others connect to on MASTER_PORT.

gloo picks the interface it advertises from the host name, which in a container can resolve to loopback; the
trainer sets GLOO_SOCKET_IFNAME to the interface that routes to MASTER_ADDR (the cluster network), unless the
user set it. One container is the serial baseline: no process group at all.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import __version__
from .mpi import host_of

if TYPE_CHECKING:
    from ..spec import JobSpec

Key = tuple[str, int]
IMAGE_REPO = "orch-torch"
MASTER_PORT = 29500  # PyTorch's customary port; each replica has its own network namespace


def image_ref() -> str:
    """The tag of orch's PyTorch trainer image for this version."""
    return f"{IMAGE_REPO}:{__version__}"


class Torch:
    name = "torch"
    port = MASTER_PORT
    # /dev/shm per container: PyTorch's DataLoader worker processes pass batches through it (users' scripts);
    # Docker's default of 64 MiB fails such a loader.
    shm_mb = 512
    build_command = "orch build --framework torch"  # built on demand: 3.2 GB of wheels, 4.6 GB installed

    def image(self, spec: "JobSpec") -> str:
        return spec.image or image_ref()

    def env(self, spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> dict[str, str]:
        if spec.workers == 1:
            return {}  # the serial baseline: no process group
        keys = list(addresses)
        return {
            "MASTER_ADDR": host_of(addresses[keys[0]]),
            "MASTER_PORT": str(MASTER_PORT),
            "RANK": str(keys.index(key)),
            "WORLD_SIZE": str(len(keys)),
            "LOCAL_RANK": "0",  # one rank per container
            "LOCAL_WORLD_SIZE": "1",
        }

    def launch(self, spec: "JobSpec", command: tuple[str, ...]) -> tuple[str, ...]:
        """A user's script runs under orch's small launcher, which sets GLOO_SOCKET_IFNAME and then becomes the
        script; orch's own trainer sets it itself."""
        if not command or spec.workers == 1:
            return command
        return ("python3", "-m", "orch_trainer.torch_env", *command)

    def describe(self, spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        env = self.env(spec, key, addresses)
        return {"torch": None if not env else {
            "rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"]), "master": env["MASTER_ADDR"],
            "master_port": MASTER_PORT, "backend": "gloo", "init_method": "env://"}}


FRAMEWORK = Torch()
