"""Plan, then apply: ``plan(spec)`` computes everything a run will do without touching an engine.

A plan is the generic replicas (role, index, image, environment, labels, mounts) plus the backend's
artifact rendered from them. ``orch render`` prints it; ``apply`` runs exactly it.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import PurePosixPath
from typing import Optional

from orchestrator import __version__, backends, contract, frameworks, macros
from orchestrator.data import loaders
from orchestrator.data.prepare import LOADERS, dataset_dir
from orchestrator.docker import engines
from orchestrator.images import data as data_images
from orchestrator.images import script as script_images
from orchestrator.images import venv_volume
from orchestrator.jobspec import JobSpec
from orchestrator.labels import LABEL_INDEX, LABEL_ROLE, LABEL_RUN
from orchestrator.paths import Paths
from orchestrator.plan.model import Mount, Plan, Replica

__all__ = ["SOURCE_DIR", "Mount", "Plan", "Replica", "cpuset", "plan", "rank_cores"]

SOURCE_DIR = "source"  # the run directory's snapshot of a user's --script folder (or --source)


def cpuset(index: int, workers: int, host_cpus: int) -> str:
    """The cores replica ``index`` pins itself to: its own share when there are enough, else one in turn.

    With 1 worker on 2 cores that is "0-1" (no restriction); with 2, "0" and "1"; with 3, "0", "1", "0".
    """
    cores = max(1, host_cpus)
    if workers >= cores:
        return str(index % cores)
    each, _ = rank_cores(workers, cores)
    first = index * each
    return str(first) if each == 1 else f"{first}-{first + each - 1}"


def rank_cores(workers: int, host_cpus: int) -> tuple[int, int]:
    """(the cores each of ``workers`` replicas is pinned to, the most replicas that share one core), as ``cpuset``
    shares ``host_cpus`` out: with 3 on 2 cores, (1, 2)."""
    cores = max(1, host_cpus)
    return (cores // workers, 1) if workers < cores else (1, -(-workers // cores))


def plan(spec: JobSpec, paths: Paths, user: str = "1000:1000", host_cpus: Optional[int] = None) -> Plan:
    """Compute the run directory, image, rendezvous and backend artifact of ``spec``. Pure but for
    ``host_cpus``, the core count ``pin_cpus`` shares out: this machine's unless given, as `orch up` does.
    """
    host_cpus = host_cpus or os.cpu_count() or 1
    framework = frameworks.get(spec.framework.name)
    backend = backends.get(spec.backend)
    user = backend.replica_user(spec, user)
    image = base_image = framework.image(spec)
    run_dir = paths.runs / spec.run_id
    data_dir = dataset_dir(paths.data, spec.dataset)
    # Where the nodes see no folder of this host, the data set comes inside the image instead.
    data_in_image = backend.ships_data and spec.dataset not in data_images.NEEDS_NO_DATA
    if data_in_image:
        image = data_images.with_data(image, spec.dataset)
    # Where the nodes see no folder of this host, a script's snapshot comes as one layer on the run's image, on
    # top of one with the frameworks' data caches (data/loaders.py), which is made once per image.
    loaders_on = image if spec.script is not None and backend.script_in_image else ""
    script_on = script_images.loaders_image(image) if loaders_on else ""
    if script_on:
        image = script_images.script_image(spec.run_id)
    keys = spec.replica_keys()
    addresses = backend.addresses(spec, keys, framework.port)
    host_group = f"{keys[0][0]}-{keys[0][1]}" if framework.shares_host(spec) else ""
    job_json = json.dumps(spec.training_fields(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    # The trust boundary: a replica sees the data read-only, its own folder, and the folder its job shares
    # (checkpoints); nothing orch writes and later trusts (records, the artifact, logs, stats) is mounted.
    shared = Mount(str(run_dir / contract.SHARED_DIR), f"{contract.OUT_MOUNT}/{contract.SHARED_DIR}", False)
    common = (shared,) if backend.ships_data else (Mount(str(data_dir), contract.DATA_MOUNT, True), shared)
    if backend.venv_volume and spec.image is None:  # an image orch chose: its environment from the engine's disk
        common = (Mount(venv_volume.volume_name(image), venv_volume.VENV, True, volume=True), *common)
    # A user's script also finds the frameworks' own caches where its loaders look: mounted from this host's
    # folder, or in the image, linked there when its interpreter starts (the images' sitecustomize).
    loaders_dir = dataset_dir(paths.data, LOADERS) if spec.script is not None else None
    replicas = []
    frameworks_env = {role: framework.env(spec, role, addresses) for role in dict.fromkeys(r for r, _i in keys)}
    for position, key in enumerate(keys):
        role, index = key
        # The replica's environment with a placeholder (macros) wherever it differs by replica: the backend may
        # write it once for several replicas (Replica.template); ``env`` is it filled with this replica's values.
        env = {
            contract.ENV_RUN_ID: spec.run_id,
            contract.ENV_ROLE: macros.ROLE,
            contract.ENV_WORKER_INDEX: macros.INDEX,
            contract.ENV_NUM_WORKERS: str(spec.role_replicas(role)),
            contract.ENV_JOB: job_json,
            contract.ENV_DATA_DIR: contract.IMAGE_DATA_DIR if data_in_image else contract.DATA_MOUNT,
            contract.ENV_OUT_DIR: contract.OUT_MOUNT,
            **frameworks_env[role],
        }
        if spec.pin_cpus:
            env[contract.ENV_CPUS] = cpuset(position, len(keys), host_cpus)
        if spec.threads:
            env["OMP_NUM_THREADS"] = str(spec.threads)  # read at the framework's import, before the trainer runs
        labels = {LABEL_RUN: spec.run_id, LABEL_ROLE: role, LABEL_INDEX: str(index), "orch.version": __version__}
        own = Mount(str(run_dir / f"{role}-{index}"), f"{contract.OUT_MOUNT}/{role}-{index}", False)
        mounts, working_dir = (*common, own), ""
        command: tuple[str, ...] = ()  # the image's own entry point: orch's trainer
        if spec.script is not None and loaders_dir is not None:
            # A user's script: the snapshot orch makes of its folder in the run directory when the run starts
            # (run/scripts.py), read-only; run from the replica's own folder, which it may write.
            script = PurePosixPath(spec.script)
            within = script.relative_to(spec.source) if spec.source is not None else PurePosixPath(script.name)
            if not script_on:
                mounts = (*mounts, Mount(str(run_dir / SOURCE_DIR), contract.SCRIPT_MOUNT, True))
            if loaders_on:
                env[contract.ENV_LOADERS_DIR] = contract.IMAGE_LOADERS_DIR
                env[contract.ENV_KERAS_MNIST] = f"{contract.IMAGE_LOADERS_DIR}/{loaders.KERAS_DIR}/{loaders.KERAS_MNIST}"
            else:
                torchvision = str(loaders_dir / loaders.TORCHVISION_DIR)
                mounts = (*mounts, Mount(str(loaders_dir / loaders.KERAS_DIR), contract.KERAS_CACHE_MOUNT, True),
                          Mount(torchvision, f"{contract.OUT_MOUNT}/{contract.TORCHVISION_ROOT}", True),
                          Mount(torchvision, f"{own.target}/{contract.TORCHVISION_ROOT}", True))
                env[contract.ENV_KERAS_MNIST] = f"{contract.KERAS_CACHE_MOUNT}/{loaders.KERAS_MNIST}"
            command = ("python3", "-u", f"{contract.SCRIPT_MOUNT}/{within}", *spec.script_args)
            working_dir = own.target
            env[contract.ENV_OUTPUT_DIR] = f"{contract.OUT_MOUNT}/{macros.ROLE}-{macros.INDEX}"  # own.target
            env[contract.ENV_SHARED_DIR] = f"{contract.OUT_MOUNT}/{contract.SHARED_DIR}"
        launched = framework.launch(spec, command)
        if launched is not None:  # a framework that starts its processes itself (MPI's launcher) wraps the command
            command, working_dir = launched, working_dir or contract.IMAGE_WORKDIR
        replicas.append(Replica(role=role, index=index, image=image, env=macros.fill_env(env, macros.values_of(keys, key)),
                                template=env, labels=labels, mounts=mounts,
                                rendezvous=framework.describe(spec, key, addresses), command=command,
                                working_dir=working_dir, host_group=host_group, port=framework.port,
                                shm_mb=spec.shm_size_mb or framework.shm_mb))
    build_fix = engines.of_options(spec.backend_options).build_fix(framework.build_command())
    draft = Plan(spec=spec, backend=backend.name, engine_name=backend.engine_name(spec.run_id), run_dir=run_dir,
                 data_dir=data_dir, cache_dir=paths.cache, image=image, user=user, replicas=tuple(replicas),
                 artifact_name=backend.artifact_name, artifact="", base_image=base_image,
                 rendezvous_kind=framework.rendezvous_kind, loaders_dir=loaders_dir, loaders_on=loaders_on,
                 script_on=script_on,
                 build_hint=(f"{build_fix} first" if spec.image is None else "pull or build it first"))
    return dataclasses.replace(draft, artifact=backend.render(draft))
