"""The spec's fields as the API's keyword arguments: ``SpecFields`` types the ``**fields`` of ``make_spec``,
``job_spec``, ``render`` and ``up``. Generated from the spec's models by jobspec/signature.py (`python
tools/generate.py` writes it; tests/test_typing.py fails when it differs from the models): do not edit."""
from __future__ import annotations

from typing import Literal, Optional, Sequence, TypedDict, Union


class SpecFields(TypedDict, total=False):
    """A job's fields, each optional: a field left out takes the spec's default."""

    # Worker containers (1 = the one-container baseline; a --script gets its launcher's environment at every N).
    # [default: 1]
    workers: int
    # The framework the replicas run: tensorflow, mpi, torch, jax. [default: 'tensorflow']
    framework: Literal['tensorflow', 'mpi', 'torch', 'jax']
    # Engine that runs the replicas: compose (Docker Compose on this host), swarm (a Docker Swarm stack, one service
    # per replica, on this engine's swarm), k8s (an Indexed Job or JobSet, applied with the kubeconfig's context;
    # without one, `orch render --backend k8s | kubectl apply -f -`), or slurm (a batch job of one task per replica,
    # each in a container, submitted with sbatch). [default: 'compose']
    backend: Literal['compose', 'swarm', 'k8s', 'slurm']
    # Data set, prepared on the host once and mounted read-only: mnist (60,000 images), fashion-mnist (70,000), vader-
    # reviews (13,056 review snippets, tokenized, for --model text), synthetic (made in the trainer, for tests).
    # [default: 'mnist']
    dataset: Literal['mnist', 'fashion-mnist', 'vader-reviews', 'synthetic']
    # Samples drawn from the data set, split 64/16/20 into train, validation and test. [default: 60000]
    samples: int
    # Epochs. [default: 5]
    epochs: int
    # GLOBAL batch, summed over workers: the same work per step for every N. [default: 96]
    batch_size: int
    # Learning rate of the framework's optimizer (Adam for TensorFlow and MPI; SGD with momentum 0.9 for PyTorch).
    # [default: 0.001; 0.01 for torch]
    learning_rate: float
    # Seed of the draw, split and shuffles. [default: 42]
    seed: int
    # mlp: a small MLP (784, 25, 15 and 10 units); cnn: the MNIST CNN (two convolutions with max pooling, Dense 128,
    # dropout); text: a token embedding, averaged, for review sentiment (text data sets only). [default: mlp; cnn for
    # torch]
    model: Literal['mlp', 'cnn', 'text']
    # bridge: an internal network, a host name per worker; shared: one network namespace on loopback; host: the host's
    # network (not isolated). [default: 'bridge']
    network: Literal['bridge', 'shared', 'host']
    # Accept that --network host exposes every worker's unauthenticated rendezvous and all-reduce (TensorFlow gRPC)
    # ports on all of this host's interfaces; --network host is refused without it. [default: False]
    expose_ports_on_host: bool
    # Intra/inter-op threads and OMP_NUM_THREADS per worker; 0 = the framework's default. [default: 0]
    threads: int
    # Pin each worker to its own share of the host's cores. [default: True]
    pin_cpus: bool
    # Seconds without training progress on any worker (a paused or stuck worker stalls every all-reduce) before the
    # job fails. [default: 120.0]
    stall_timeout: float
    # Checkpoint every N training steps into the run directory; 0 = every epoch. [default: 0]
    checkpoint_every: int
    # Restart the whole worker group up to K times after a retryable failure (a worker killed by a signal or removed),
    # resuming from the last checkpoint. [default: 0]
    max_restarts: int
    # Seconds for every worker to join the cluster before the job fails. [default: 300.0]
    startup_timeout: float
    # Seconds one attempt of the run may take before it fails as timed out; 0 = no limit. The guard for a script that
    # reports no progress. On Kubernetes it is the Job's activeDeadlineSeconds. [default: 0.0]
    time_limit: float
    # CPU limit per container. [default: None]
    cpus: Optional[float]
    # GPUs per container, as a device request to the engine (NVIDIA's runtime); 0 = none. The trainer uses the GPUs it
    # sees: --strategy mirrored puts a replica on each. [default: 0]
    gpus: int
    # Memory limit per container: MiB, or a size as Docker writes it (512m, 2g). [default: 2g]
    memory: Union[int, str]
    # Size of each container's /dev/shm (a tmpfs that counts against --memory where it is used): MiB, or a size as
    # Docker writes it (512m, 1g); 0 = the framework's need, else the engine's default. PyTorch's DataLoader workers
    # pass their batches through it. [default: 64m, or what the framework needs]
    shm_size: Union[int, str]
    # How much the replicas may write, together, into their folders on this host (outputs, checkpoints) before the run
    # is stopped: MiB, or a size as Docker writes it (200M, 10g); 0 = no limit but the free-space floor
    # ($ORCH_DISK_FLOOR_MB, 1024 MiB). [default: 10g]
    disk_limit: Union[int, str]
    # process limit per container [default: 1024]
    pids_limit: int
    # Run this Python script of yours instead of orch's trainer, on every replica, in orch's image. The replicas see a
    # copy of its folder (or of --source), made when the run starts; each runs in its own output folder, with
    # TF_CONFIG and the data mount set. Arguments after `--` go to the script. [default: orch's trainer]
    script: Optional[str]
    # With --script: the folder copied for the replicas, for a script that imports sibling modules; it must hold the
    # script. Refused: /, a home folder, a folder holding orch's runs or results, or more than $ORCH_SOURCE_LIMIT_MB
    # (64) MiB. [default: the script's folder]
    source: Optional[str]
    # Ranks per container, for a --script under --framework torch (torchrun's --nproc-per-node) or mpi (mpiexec's
    # -ppn): N containers × P ranks, RANK 0 to N·P−1, LOCAL_RANK 0 to P−1, WORLD_SIZE N·P. `-j NxP` sets both.
    # TensorFlow refuses it. [default: 1]
    procs_per_worker: int
    # arguments for the script (after `--` on the command line) [default: ()]
    script_args: Sequence[str]
    # Run this image instead of orch's own trainer image. [default: orch's own]
    image: Optional[str]
    # Run id (lowercase letters, digits, - and _). [default: time-based]
    run_id: str
    # single: one container, no distribution (the baseline); mirrored: one container, --replicas replicas with
    # MirroredStrategy (logical CPU devices here, GPUs where present); mwms: MultiWorkerMirroredStrategy, one worker
    # per container; custom: the same with orch's own training loop and an explicit gradient all-reduce; ps:
    # ParameterServerStrategy, a chief, --parameter-servers servers and --workers workers, each in its own container,
    # training asynchronously; auto: single for 1 worker, else mwms. [default: 'auto']
    strategy: Literal['auto', 'single', 'mirrored', 'mwms', 'custom', 'ps']
    # Replicas inside the one container of --strategy mirrored. [default: 1]
    replicas: int
    # Parameter-server containers of --strategy ps; the variables are spread over them. [default: 1]
    parameter_servers: int
    # Training steps per tf.function call. [default: 50]
    steps_per_execution: int
    # Per-step metrics: none, read across workers once per epoch (epoch); Keras' steps, which read them across workers
    # every step, logs kept local (first) or also all-reduced (sum). [default: 'epoch']
    log_reduction: Literal['epoch', 'first', 'sum']
    # Keep each worker's shard in memory after the first pass (tf.data cache). [default: True]
    cache: bool
    # Batches tf.data prepares ahead; -1 = AUTOTUNE, 0 = none. [default: -1]
    prefetch: int
    # tf.data shuffle buffer in samples; 0 = the whole shard, a full shuffle. [default: 0]
    shuffle_buffer: int
    # All-reduce implementation. [default: 'ring']
    collective: Literal['ring', 'auto']
    # All-reduce packing in bytes. [default: 33554432]
    bytes_per_pack: int
    # TensorFlow's own all-reduce timeout (CommunicationOptions); 0 = off. Costs a thread per all-reduce for that
    # long, so orch's stall timeout is the default guard. [default: 0.0]
    collective_timeout: float
    # How the ranks of --framework mpi reach each other: shm (shared memory: the containers share one IPC and PID
    # namespace and a host name, so MPI sees one host; Compose only), tcp (the cluster network), or auto: shm on
    # Compose, tcp on Swarm and Kubernetes. With --framework torch: what carries DDP's gradients, gloo (DDP's own
    # backend, TCP on the cluster network; what a --script gets) or shm (MPI's all-reduce over shared memory through
    # DDP's communication hook, the containers sharing one host's IPC and PID namespaces: Compose and orch's own
    # trainer); auto is gloo. With --framework jax: what carries the gradients, gloo (XLA's CPU collectives, TCP on
    # the cluster network; what a --script gets) or shm (MPI's all-reduce over shared memory between the step's two
    # jitted halves, the containers sharing one host's IPC and PID namespaces: Compose and orch's own trainer); auto
    # is gloo. [default: 'auto']
    transport: Literal['auto', 'shm', 'tcp', 'gloo']
    # With --framework torch: each rank's own batch, so the global batch is this times --workers and grows with N (the
    # per-process batch of PyTorch's DDP examples); leave --batch-size out with it. 0 = off: --batch-size is the
    # global batch, split among the ranks, the same work per step for every N. [default: off: --batch-size is the
    # global batch]
    batch_per_worker: int
    # The container engine on this host: docker (the Docker daemon) or podman (Podman's API service, rootful or
    # rootless); `orch doctor --engine podman` checks it. [default: $ORCH_ENGINE, else docker]
    engine: Literal['docker', 'podman']
    # Registry (HOST/PATH) the nodes pull orch's own images from, prefixed to their names; for --backend k8s or swarm,
    # where images are not built on the nodes. [default: None]
    registry: Optional[str]
    # With --backend swarm: the MTU of the stack's overlay network. VXLAN adds 50 bytes to every packet, so across
    # nodes it must be at most the nodes' interface MTU minus 50; orch refuses a swarm of several nodes where it is
    # not. 0 = the engine's default. [default: the engine's, 1450]
    overlay_mtu: int
    # With --backend k8s: job, an Indexed Job with a headless Service (plain Kubernetes); jobset, a JobSet (needs the
    # JobSet controller), which restarts the whole group itself; trainjob, Kubeflow Trainer v2's TrainJob and the
    # runtime orch renders for it (render only). [default: 'job']
    k8s_kind: Literal['job', 'jobset', 'trainjob']
    # With --backend k8s: a PersistentVolumeClaim (ReadWriteMany) every pod mounts for checkpoints, so a restarted
    # group resumes; needed for restarts. [default: None]
    k8s_checkpoint_claim: Optional[str]
    # With --backend slurm: the partition (queue) the job goes to; the cluster's default if left out. [default: None]
    slurm_partition: Optional[str]
    # With --backend slurm: the account the job is charged to, where the cluster asks for one. [default: None]
    slurm_account: Optional[str]
    # With --backend slurm: the job's time limit in Slurm's form (MINUTES, HOURS:MINUTES:SECONDS or DAYS-HOURS); Slurm
    # ends the job when it is reached. [default: '1:00:00']
    slurm_time: str
    # With --backend slurm: the nodes the job's tasks are spread over, in blocks: consecutive workers share a node, at
    # most --slurm-tasks-per-node on each. [default: 1]
    slurm_nodes: int
    # With --backend slurm: the most workers on one node (Slurm's --ntasks-per-node where they fill every node
    # exactly; without it, Slurm places them in blocks). [default: workers / nodes, rounded up]
    slurm_tasks_per_node: Optional[int]
    # With --backend slurm: how each task runs orch's image. charliecloud: ch-run, unprivileged, from a directory of
    # the image on the shared folder (made once per image); docker: `docker run` on each node, where the cluster lets
    # users reach a Docker engine (the image is loaded once per node from an archive on the shared folder). [default:
    # 'charliecloud']
    slurm_runtime: Literal['charliecloud', 'docker']
