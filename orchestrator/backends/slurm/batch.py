"""The batch script of a run on Slurm: pure, plan in, text out; exactly what ``apply`` gives sbatch.

One job of N tasks, one per replica, placed in blocks over its nodes (at most tasks-per-node on each). The script writes
what its tasks need into the run's folder on the shared storage, then starts them with one srun: each runs
``task.sh`` (this package's), which runs its replica in orch's image with the chosen container runtime. Every value
is written quoted (``shlex.quote``) or inside a quoted here-document, whose end marker no value can hold: a value
with a line break is refused.
"""
from __future__ import annotations

import hashlib
import math
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from orchestrator import __version__, contract
from orchestrator.backends import options
from orchestrator.backends.base import Key, bounded_name
from orchestrator.errors import InvalidSpec
from orchestrator.paths import resource

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan, Replica

NAME_LIMIT = 64  # characters of a job's name that every Slurm shows in full
JOB_FOLDER = "slurm"  # the job's own folder in the run's: the batch script's working folder, the tasks' files
IMAGES = "slurm-images"  # orch's images as the nodes run them, under orch's cache folder (on the shared storage)
HOST = "orch-task-{}"  # the name of the host task T runs on, in every replica's /etc/hosts (task.sh)
PORT_BLOCK = 128  # ports a run takes, one per task, from a base derived from its id
# The blocks lie below Linux's ephemeral ports (32768 and up by default), which any outgoing connection on the node
# may hold, and which a task's server then could not take.
PORT_FIRST, PORT_BLOCKS = 20_000, 99
_PATH = re.compile(r"/[\x21-\x7e]*")  # an absolute path without spaces: #SBATCH lines and binds take no quotes


def job_name(run_id: str) -> str:
    """What Slurm calls the run's job."""
    return bounded_name(run_id, NAME_LIMIT, "A-Za-z0-9_.-")


def port_base(run_id: str) -> int:
    """The first port of a run's tasks on each node: every task uses its node's network, which other jobs share, so
    each run takes a block derived from its id (deterministic, so the plan stays pure), below the ephemeral ports."""
    return PORT_FIRST + int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % PORT_BLOCKS * PORT_BLOCK


def addresses(spec: "JobSpec", keys: list[Key]) -> dict[Key, str]:
    """host:port of each replica: the name of the host Slurm places its task on (each task's /etc/hosts has it), and
    a port of the run's block of its own, so that tasks sharing a node never meet on one."""
    base = port_base(spec.run_id)
    return {key: f"{HOST.format(i)}:{base + i}" for i, key in enumerate(keys)}


def image_path(cache: Path, image: str, runtime: str) -> str:
    """Where the nodes find ``image`` for ``runtime``: a folder of its files (charliecloud) or an archive (docker),
    under the cache folder. A link to the one of the image's current id, made by ``stage``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", image)
    return str(cache / IMAGES / (safe if runtime == "charliecloud" else f"{safe}.tar"))


def _checked(value: str, what: str) -> str:
    if "\n" in value or "\r" in value or "\x00" in value:
        raise InvalidSpec(f"backend: {what} holds a line break, which a Slurm task's files cannot carry")
    return value


def _path(value: str, what: str) -> str:
    if not _PATH.fullmatch(value):
        raise InvalidSpec(f"backend: {what} {value!r} has a space or a character Slurm's options cannot take; use "
                          "a runs folder (ORCH_RUNS_DIR) and a cache folder (ORCH_CACHE_DIR) whose paths have none")
    return value


def _vars(values: dict[str, object]) -> str:
    """Bash assignments, each value quoted; a tuple becomes an array."""
    lines = []
    for name, value in values.items():
        if isinstance(value, tuple):
            lines.append(f"{name}=({' '.join(shlex.quote(_checked(str(v), name)) for v in value)})")
        else:
            lines.append(f"{name}={shlex.quote(_checked(str(value), name))}")
    return "\n".join(lines)


def _here(path: str, text: str, marker: str) -> str:
    """A here-document writing ``text`` to ``path``; its end marker is on no line of the text."""
    assert marker not in text.splitlines()
    return f"cat > {path} <<'{marker}'\n{text}\n{marker}"


def _mounts(replica: "Replica") -> tuple[str, ...]:
    return tuple(f"{_path(m.source, 'the mount source')}:{m.target}{':ro' if m.read_only else ''}"
                 for m in replica.mounts)


def _task(plan: "Plan", replica: "Replica") -> str:
    return _vars({"name": replica.name, "role": replica.role, "index": replica.index,
                  "workdir": replica.working_dir, "mounts": _mounts(replica),
                  "command": replica.command or contract.TRAINER_COMMAND})


def render(plan: "Plan") -> str:
    """The batch script of ``plan``."""
    spec = plan.spec
    opts = options.slurm(spec)
    replicas = plan.replicas
    per = opts.tasks_per_node(len(replicas))
    folder = _path(str(plan.run_dir / JOB_FOLDER), "the run's folder")
    image = image_path(plan.cache_dir, plan.image, opts.slurm_runtime)
    _path(image, "the image's place")
    cpus = math.ceil(spec.cpus) if spec.cpus else 1  # whole CPUs per task, rounded up
    sbatch = [f"--job-name={job_name(spec.run_id)}", f"--ntasks={len(replicas)}", f"--nodes={opts.slurm_nodes}",
              # Only where asked: Slurm refuses more tasks on a node than its CPUs even with --overcommit.
              *([f"--ntasks-per-node={per}"] if opts.slurm_tasks_per_node and per * opts.slurm_nodes == len(replicas)
                else []),
              f"--cpus-per-task={cpus}", f"--mem={per * spec.memory_mb}M",
              f"--time={opts.slurm_time}", f"--chdir={folder}", f"--output={folder}/job.out", "--open-mode=append",
              "--no-requeue"]
    if spec.cpus is None:
        # orch's default sets no CPU limit: the tasks share their nodes' cores, as containers share a host's.
        sbatch.append("--overcommit")
    if opts.slurm_partition:
        sbatch.append(f"--partition={opts.slurm_partition}")
    if opts.slurm_account:
        sbatch.append(f"--account={opts.slurm_account}")
    job_vars = _vars({
        "run": spec.run_id, "runtime": opts.slurm_runtime, "image": image if opts.slurm_runtime == "charliecloud"
        else plan.image, "archive": image, "memory_mb": spec.memory_mb, "pids_limit": spec.pids_limit,
        "cpus": "" if spec.cpus is None else spec.cpus, "user": plan.user,
        # The kernel's cap on any one file a replica writes, in KiB (RLIMIT_FSIZE), as on Compose.
        "file_size_blocks": spec.disk_limit_mb * 1024})
    parts = ["#!/bin/bash",
             f"# Rendered by orch {__version__} for run {spec.run_id}; re-render with `orch render`, do not edit.",
             *(f"#SBATCH {line}" for line in sbatch),
             "set -euo pipefail",
             "# What every task reads, written into the run's folder on the shared storage (this job's folder).",
             _here("job.vars", job_vars, "ORCH_END"),
             _here("task.sh", resource("orchestrator.backends.slurm", "task.sh").read_text().rstrip("\n"),
                   "ORCH_END")]
    for position, replica in enumerate(replicas):
        env = "\n".join(f"{k}={_checked(v, k)}" for k, v in replica.env.items())
        parts += [f"# Task {position}: {replica.name}.", _here(f"task-{position}.vars", _task(plan, replica), "ORCH_END"),
                  _here(f"task-{position}.env", env, "ORCH_END")]
    # Under Charliecloud a task that fails ends the others at once (srun kills their processes); a Docker container
    # would outlive its killed client, so there orch's supervisor cancels the job, and each task removes its own.
    kill = 1 if opts.slurm_runtime == "charliecloud" else 0
    parts += ["# One srun: every task at once, each its replica.",
              f"exec srun --kill-on-bad-exit={kill} --distribution=block bash task.sh", ""]
    return "\n".join(parts)


def workdir_of(run_dir: Path) -> PurePosixPath:
    """The job's folder in a run's folder."""
    return PurePosixPath(str(run_dir)) / JOB_FOLDER
