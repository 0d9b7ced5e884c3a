"""Plan, then apply: ``plan(spec)`` computes everything a run will do without touching Docker."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from . import __version__, contract
from .data import dataset_dir
from .engine import LABEL_INDEX, LABEL_ROLE, LABEL_RUN
from .paths import Paths
from .render import render_compose
from .spec import JobSpec
from .tfconfig import tf_config, tf_config_json

IMAGE_REPO = "orch-trainer"
IMAGE_KINDS = ("single", "multi")


def image_ref(kind: str) -> str:
    """The tag of orch's own trainer image of ``kind`` (single or multi) for this version."""
    return f"{IMAGE_REPO}:{__version__}-{kind}"


def cpuset(index: int, workers: int, host_cpus: int) -> str:
    """The cores worker ``index`` pins itself to: its own share when there are enough, else one in turn.

    With 1 worker on 2 cores that is "0-1" (no restriction); with 2, "0" and "1"; with 3, "0", "1", "0".
    """
    cores = max(1, host_cpus)
    if workers >= cores:
        return str(index % cores)
    share = cores // workers
    first = index * share
    return str(first) if share == 1 else f"{first}-{first + share - 1}"


@dataclass(frozen=True)
class WorkerPlan:
    """One container of a run."""

    index: int
    service: str
    image: str
    tf_config: Optional[dict]
    env: dict[str, str]
    labels: dict[str, str]
    shares_network: bool
    host_network: bool


@dataclass(frozen=True)
class Plan:
    """Everything ``apply`` will do for a spec."""

    spec: JobSpec
    project: str
    run_dir: Path
    data_dir: Path
    compose_file: Path
    compose_text: str
    image: str
    user: str
    workers: tuple[WorkerPlan, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, as `orch render --format json` prints it."""
        return {
            "run_id": self.spec.run_id,
            "project": self.project,
            "image": self.image,
            "run_dir": str(self.run_dir),
            "data_dir": str(self.data_dir),
            "compose_file": str(self.compose_file),
            "user": self.user,
            "spec": self.spec.model_dump(),
            "workers": [
                {"index": w.index, "service": w.service, "tf_config": w.tf_config, "labels": w.labels}
                for w in self.workers
            ],
            "compose": self.compose_text,
        }


def plan(spec: JobSpec, paths: Paths, user: str = "1000:1000", host_cpus: int = 2) -> Plan:
    """Compute the run directory, images, TF_CONFIGs and Compose file of ``spec``. Pure.

    ``host_cpus`` is the host's core count, for ``pin_cpus``.
    """
    image = spec.image or image_ref("single" if spec.workers == 1 else "multi")
    run_dir = paths.runs / spec.run_id
    data_dir = dataset_dir(paths.data, spec.dataset)
    job_json = json.dumps(spec.training_fields(), sort_keys=True, separators=(",", ":"))
    workers = []
    for i in range(spec.workers):
        env = {
            contract.ENV_RUN_ID: spec.run_id,
            contract.ENV_WORKER_INDEX: str(i),
            contract.ENV_NUM_WORKERS: str(spec.workers),
            contract.ENV_JOB: job_json,
            contract.ENV_DATA_DIR: contract.DATA_MOUNT,
            contract.ENV_OUT_DIR: contract.OUT_MOUNT,
        }
        config = tf_config_json(spec, i)
        if config is not None:
            env["TF_CONFIG"] = config
        if spec.pin_cpus:
            env[contract.ENV_CPUS] = cpuset(i, spec.workers, host_cpus)
        if spec.threads:
            env["OMP_NUM_THREADS"] = str(spec.threads)  # read at TensorFlow's import, before the trainer runs
        labels = {LABEL_RUN: spec.run_id, LABEL_ROLE: "worker", LABEL_INDEX: str(i), "orch.version": __version__}
        workers.append(
            WorkerPlan(
                index=i,
                service=f"worker-{i}",
                image=image,
                tf_config=tf_config(spec, i),
                env=env,
                labels=labels,
                shares_network=spec.network == "shared" and i > 0,
                host_network=spec.network == "host",
            )
        )
    project = f"orch-{spec.run_id}"
    text = render_compose(
        {
            "version": __version__,
            "run_id": spec.run_id,
            "project": project,
            "workers": workers,
            "user": user,
            "data_dir": str(data_dir),
            "run_dir": str(run_dir),
            "data_mount": contract.DATA_MOUNT,
            "out_mount": contract.OUT_MOUNT,
            "memory_mb": spec.memory_mb,
            "pids_limit": spec.pids_limit,
            "cpus": spec.cpus,
            "run_label": LABEL_RUN,
        }
    )
    return Plan(
        spec=spec,
        project=project,
        run_dir=run_dir,
        data_dir=data_dir,
        compose_file=run_dir / "compose.yml",
        compose_text=text,
        image=image,
        user=user,
        workers=tuple(workers),
    )
