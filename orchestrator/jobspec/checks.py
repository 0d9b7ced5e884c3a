"""What a job spec must hold beyond each field's own bounds: the framework's shape and batch, the network, a script's
fields, and what orch's own trainer needs of its data (``trainer_fits``). ``JobSpec`` runs ``check_job`` once its fields
are valid; each problem is a ValueError naming its field."""
from __future__ import annotations

import re
from typing import Any

from orchestrator import contract, imageref
from orchestrator.frameworks.base import nearest_multiples
from orchestrator.jobspec.fields import SCRIPT_PATTERN


def check_job(spec: Any) -> None:
    """Raise ValueError, naming the field, where ``spec``'s fields do not fit together."""
    spec.framework.check(spec.workers, spec.global_batch)
    spec.framework.check_job(spec)  # before the generic checks, whose advice may not fit the framework
    expected = spec.framework.roles(spec.workers)
    if [(r.name, r.replicas) for r in spec.roles] != expected:
        shape = ", ".join(f"{n} × {r}" for n, r in expected)
        raise ValueError(f"roles: {spec.framework.name} with these options runs {shape}, got "
                         f"{', '.join(f'{r.name} × {r.replicas}' for r in spec.roles)}")
    if spec.network == "host" and not spec.expose_ports_on_host:
        raise ValueError("network: host exposes every worker's unauthenticated gRPC server on all of this host's "
                         "interfaces; pass --expose-ports-on-host to accept that, or use --network bridge or shared")
    if spec.script is None:
        trainer_fits(spec)
    if spec.image is not None:
        imageref.check(spec.image, "image")
    if spec.script is not None and not re.fullmatch(SCRIPT_PATTERN, spec.script):
        raise ValueError(f"script: must be a Python file ending in .py, e.g. train.py (got {spec.script[:80]!r})")
    if any("\x00" in arg or len(arg) > 4096 for arg in spec.script_args):
        raise ValueError("script_args: an argument holds a NUL byte or is longer than 4096 characters")
    if spec.source is not None and (spec.script is None or not re.fullmatch(r"/[^\x00-\x1f\x7f]*", spec.source)):
        raise ValueError("source: --source names the folder copied for --script; pass --script too"
                         if spec.script is None else f"source: {spec.source[:80]!r} is not an absolute path")
    if spec.script_args and spec.script is None:
        raise ValueError("script_args: arguments after `--` are for --script")
    if spec.procs_per_worker > 1:
        if spec.script is None:
            raise ValueError("procs_per_worker: orch's own trainer runs one rank per container; --procs-per-worker "
                             f"is for a --script's ranks (use --workers {spec.workers * spec.procs_per_worker})")
        if spec.framework.one_rank_per_container:
            raise ValueError(f"procs_per_worker: {spec.framework.one_rank_per_container}")
    spec.backend_options.check_job(spec)


def trainer_fits(spec: Any) -> None:
    """What orch's own trainer needs of the model, data and batch (a --script reads none of them)."""
    kind = contract.DATASET_KINDS[spec.dataset]
    if (spec.model == "text") != (kind == "text"):
        images = ", ".join(d for d, k in contract.DATASET_KINDS.items() if k == "image")
        texts = ", ".join(d for d, k in contract.DATASET_KINDS.items() if k == "text") or "none yet"
        raise ValueError(f"model: {spec.model} cannot train on {spec.dataset} ({kind}s); mlp and cnn train on "
                         f"images ({images}), text on reviews ({texts})")
    available = contract.DATASET_SIZES[spec.dataset]
    if spec.samples > available:
        raise ValueError(f"samples: {spec.dataset} has {available} training samples, got {spec.samples}")
    per_worker = spec.framework.per_worker_batch(spec.workers, spec.global_batch)
    if per_worker * spec.workers != spec.global_batch and per_worker != spec.global_batch:
        raise ValueError(f"global_batch: {spec.global_batch} is not divisible by {spec.workers} workers; use "
                         f"{nearest_multiples(spec.global_batch, spec.workers)}")
    train, val, test = contract.split_sizes(spec.samples)
    validators = spec.framework.validation_readers(spec.workers)
    for name, size, readers in (("training", train, spec.workers), ("validation", val, validators)):
        if size // readers < per_worker:
            need = -(-per_worker * readers * 100 // (64 if name == "training" else 16))
            what = (f"one global batch of {spec.global_batch}" if per_worker * readers == spec.global_batch
                    else f"a global batch of {spec.global_batch} for each of {readers} workers")
            raise ValueError(
                f"samples: {spec.samples} leave {size} {name} samples, fewer than {what}; use at least "
                f"{need} samples or a smaller batch"
            )
    if test < 1:
        raise ValueError(f"samples: {spec.samples} leave no test samples")
