"""PyTorch: DistributedDataParallel over gloo, one rank per container, met through the environment.

Why the environment (``init_method="env://"``: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) and not
torchrun's c10d rendezvous: orch already knows every replica's rank and address when it plans the job, and its
supervisor already restarts the whole group after a failure. c10d's elastic agent would add a second supervisor
that restarts ranks on its own, and a rendezvous whose membership can change; with a fixed world the environment
is all a rank needs. Rank 0 hosts the TCP store the others connect to on MASTER_PORT.

gloo picks the interface it advertises from the host name, which in a container can resolve to loopback; the
trainer sets GLOO_SOCKET_IFNAME to the interface that routes to MASTER_ADDR (the cluster network), unless the
user set it. One container is the serial baseline: no process group at all.

With ``--transport shm`` DDP stays (its buckets, its broadcast of rank 0's weights, gloo for those), and its
communication hook hands each bucket to MPI's all-reduce over shared memory instead of gloo's over TCP: the
replicas are started as MPI's ranks are (``frameworks/mpi_ranks.py``) and look like processes of one host.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from orchestrator import __version__, macros, rendezvous
from orchestrator.frameworks import mpi_ranks
from orchestrator.frameworks.base import BenchTransport, Framework, Job, options_of
from orchestrator.frameworks.torch.options import TorchOptions
from orchestrator.rendezvous import host_of

if TYPE_CHECKING:
    from orchestrator.paths import Paths

Key = tuple[str, int]
IMAGE_REPO = "orch-torch"
MASTER_PORT = 29500  # PyTorch's customary port; each replica has its own network namespace


def over_shm(spec: Job) -> bool:
    """Whether the job's gradients cross over MPI's shared memory (orch's trainer on several containers)."""
    return options_of(spec, TorchOptions).transport == "shm" and spec.world_size > 1 and not spec.script


def image_ref() -> str:
    """The tag of orch's PyTorch trainer image for this version."""
    return f"{IMAGE_REPO}:{__version__}"


class Torch(Framework):
    name = "torch"
    title = "PyTorch"
    trainer_entry = "torch_loop"
    rendezvous_kind = rendezvous.RANK
    trainer_policy = "torch"  # Trainer's torch plugin: torchrun's PET_* variables, the master the first node
    options = TorchOptions
    port = MASTER_PORT
    on_demand = True
    # `orch build --framework torch --requirements FILE`: e.g. torchvision, pinned to the image's torch.
    takes_requirements = True
    takes_index = True
    index_help = ("torch comes from this index alone, e.g. PyTorch's CPU-only one, https://download.pytorch.org/whl/cpu "
                  "(a CPU build: the image needs no CUDA libraries), and its dependencies from the host's index")
    # /dev/shm per container: PyTorch's DataLoader worker processes pass batches through it (users' scripts);
    # Docker's default of 64 MiB fails such a loader.
    shm_mb = 512
    bench_transports = (
        BenchTransport("gloo", {}, "PyTorch's gloo over TCP (DistributedDataParallel's backend), one container per "
                       "rank on the run's bridge"),
    )
    bench_api = "gloo"

    def floor_transport(self, spec: Job) -> Optional[str]:
        return "mpi-shm" if over_shm(spec) else "gloo"

    def shares_host(self, spec: Job) -> bool:
        return over_shm(spec)

    def env(self, spec: Job, role: str, addresses: dict[Key, str]) -> dict[str, str]:
        if spec.world_size == 1 and not spec.script:
            return {}  # orch's serial baseline: no process group
        keys = list(addresses)
        master = {"MASTER_ADDR": host_of(addresses[keys[0]]), "MASTER_PORT": str(MASTER_PORT)}
        node = macros.RANK  # a container is a node: its rank across the job
        if over_shm(spec):
            world = str(spec.world_size)
            return {**master, "RANK": node, "WORLD_SIZE": world, **mpi_ranks.env(spec, addresses, "shm")}
        if spec.procs_per_worker == 1:
            # One rank per container, 1 included: what `torchrun --nnodes N --nproc-per-node 1` gives each rank, so
            # that a torchrun-shaped script (reading RANK, LOCAL_RANK, GROUP_RANK...) runs unchanged at every N.
            world = str(spec.world_size)
            return {**master, "RANK": node, "WORLD_SIZE": world, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "GROUP_RANK": node, "GROUP_WORLD_SIZE": world, "ROLE_NAME": "default", "ROLE_RANK": node,
                    "ROLE_WORLD_SIZE": world, "TORCHELASTIC_RUN_ID": spec.run_id,
                    "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}
        # Several ranks per container: torchrun starts them and gives each its RANK and LOCAL_RANK. It reads its
        # flags from PET_ variables (as under Kubeflow's Trainer): N nodes of P ranks, this container's node rank.
        return {**master, "WORLD_SIZE": str(spec.world_size), "LOCAL_WORLD_SIZE": str(spec.procs_per_worker),
                "PET_NNODES": str(len(keys)), "PET_NPROC_PER_NODE": str(spec.procs_per_worker),
                "PET_NODE_RANK": node, "PET_MASTER_ADDR": master["MASTER_ADDR"], "PET_MASTER_PORT": str(MASTER_PORT),
                # each rank's lines in the container's log start with its global rank
                "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}

    def launch(self, spec: Job, command: tuple[str, ...]) -> Optional[tuple[str, ...]]:
        """A user's script runs under orch's small launcher, which sets GLOO_SOCKET_IFNAME and then becomes the
        script, or torchrun with several ranks per container; orch's own trainer sets the interface itself.

        torchrun restarts nothing (orch's supervisor restarts the whole group), keeps each rank's output in the
        container's folder (``ranks/<run id>_*/attempt_0/<local rank>/stdout.log``, ``stderr.log``) and tees it,
        each line prefixed with the rank, to the container's log; one failed rank stops the container's others and
        fails the container."""
        if not command:
            return mpi_ranks.launch(command) if over_shm(spec) else None
        if spec.procs_per_worker == 1:
            return ("python3", "-m", "orch_trainer.torch_env", *command)
        script = command[2:] if command[:2] == ("python3", "-u") else ("--no-python", *command)
        return ("python3", "-m", "orch_trainer.torch_env", "python3", "-m", "torch.distributed.run",
                "--max-restarts", "0", "--rdzv-id", spec.run_id, "--log-dir", "ranks", "--tee", "3", *script)

    def describe(self, spec: Job, key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        env = self.replica_env(spec, key, addresses)
        if not env:
            return {"torch": None}
        ranks = ({"rank": int(env["RANK"])} if spec.procs_per_worker == 1 else
                 {"node_rank": int(env["PET_NODE_RANK"]), "procs_per_worker": spec.procs_per_worker})
        return {"torch": {**ranks, "world_size": int(env["WORLD_SIZE"]), "master": env["MASTER_ADDR"],
                          "master_port": MASTER_PORT, "backend": "gloo", "init_method": "env://",
                          "gradients": "mpi-shm" if over_shm(spec) else "gloo"}}

    # Built on demand (`orch build --framework torch`): 3.2 GB of wheels, 4.6 GB installed.
    def image_tags(self) -> dict[str, str]:
        return {self.name: image_ref()}

    def check_index(self, url: str) -> None:
        from orchestrator.frameworks.torch.build import index_download_args

        index_download_args(url)

    def build(self, options: Any, engine: Any, paths: Optional["Paths"], say: Any) -> list[Any]:
        from orchestrator.frameworks.torch.build import build
        from orchestrator.images.wheels import insecure_allowed

        with insecure_allowed(options.allow_insecure_index):  # for every URL the resolution meets, too
            return build(options, engine=engine, paths=paths, say=say)

    def host_processes(self, ranks: int, argv: list[str], env: dict[str, str], venv: Path,
                       free_ports: Any) -> list[tuple[list[str], dict[str, str]]]:
        # One store on rank 0, every rank on loopback, as DDP's env:// rendezvous.
        env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_ports(1)[0]), "WORLD_SIZE": str(ranks),
               "GLOO_SOCKET_IFNAME": "lo"}
        return [([str(venv / "bin" / "python"), *argv], {**env, "RANK": str(i)}) for i in range(ranks)]



FRAMEWORK = Torch()
