"""The floor this machine allows a cell of an experiment, measured beside it (``report: {floor: true}``).

For a cell of N containers, as `benchmarks/floor.py` measures it:

  compute    one rank alone at the per-rank batch (global batch / N) on its shard (samples / N), so the same steps,
             pinned to the cores a rank of the N-container run gets (``plan.rank_cores``), run right after the
             cell; times the most ranks that share a core under orch's pinning;
  transport  the all-reduce p50 of the transport that carries the cell's gradients (``Framework.floor_transport``),
             at N ranks and the gradients' size, measured as `orch bench allreduce` measures it, times the steps;
  floor      compute + transport: no orch on these cores can train the cell faster. The report shows T(N)/floor
             beside T(N)/T(1), and T(1)/floor(N) as the best speedup this machine allows.

MirroredStrategy's replicas in one container count as its ranks: the solo rank is one replica at the per-replica
batch, and as the replicas are threads of one process, not pinned, the compute floor is its time times the replicas
over the cores (at least 1); their reduction is in memory and has no transport floor. A cell of one rank and one
replica is its own floor: one rank alone at the whole batch, pinned as the cell's is, is the cell, so it is not run
again (a second run would measure only the host's noise).

The solo run is recorded in the cell's record (``record["floor"]``), the p50 once per transport, rank count and
size, after the cells. What cannot have a floor (a script of the user's, a parameter server, a swarm) says why.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from orchestrator import frameworks
from orchestrator.analysis.metrics import is_seconds
from orchestrator.data.prepare import DATASETS, dataset_dir
from orchestrator.docker.engines import DEFAULT as DEFAULT_ENGINE
from orchestrator.jobspec import JobSpec, make_spec
from orchestrator.paths import Paths
from orchestrator.plan import rank_cores
from orchestrator.safetext import one_line

ITERATIONS, WARMUP = 300, 30  # timed all-reduces for a transport floor, as benchmarks/floor.py times them
IMAGE_PIXELS = 784
MLP_UNITS = (25, 15, 10)  # the trainers' MLP (frameworks/tensorflow/trainer/model.py, torch/trainer/torch_loop.py)
CNN_PARAMETERS = 320 + 18_496 + 3_136 * 128 + 128 + 128 * 10 + 10  # both trainers' CNN: two convolutions, two dense
TEXT_EMBEDDING, TEXT_HIDDEN = 32, 32  # the TensorFlow trainer's text model


def parameters(model: str, vocabulary: int = 0) -> int:
    """The trainable parameters of ``model`` as orch's trainers build it (so its gradients' count)."""
    if model == "mlp":
        widths = (IMAGE_PIXELS, *MLP_UNITS)
        return sum(a * b + b for a, b in zip(widths, widths[1:]))
    if model == "cnn":
        return CNN_PARAMETERS
    if model == "text":
        return vocabulary * TEXT_EMBEDDING + TEXT_EMBEDDING * TEXT_HIDDEN + TEXT_HIDDEN + TEXT_HIDDEN * 2 + 2
    raise ValueError(f"unknown model {model!r}")


def gradient_bytes(spec: JobSpec, paths: Paths) -> int:
    """The bytes of ``spec``'s gradients (float32), all-reduced once a step."""
    vocabulary = 0
    if spec.model == "text":  # the prepared file's vocabulary, as the trainer reads it (trainer/data.py)
        import numpy as np

        with np.load(dataset_dir(paths.data, spec.dataset) / DATASETS[spec.dataset].file) as f:
            vocabulary = int(f["vocabulary_size"])
    return 4 * parameters(spec.model, vocabulary)


def why_none(spec: JobSpec) -> Optional[str]:
    """Why ``spec`` can have no floor beside it, or None if it can."""
    if spec.script is not None or spec.image:
        return "a script or image of the user's: orch does not know its model or its all-reduce"
    if spec.backend != "compose":
        return f"the {spec.backend} backend: the floor is measured on this host's cores"
    if spec.gpus and ranks(spec) > spec.workers:
        return "replicas on GPUs: the floor is measured on this host's cores"
    if spec.workers > 1 and frameworks.get(spec.framework.name).floor_transport(spec) is None:
        return f"{spec.framework.name} with strategy {spec.framework.resolved_strategy(spec.workers)} all-reduces " \
               "no gradients between containers"
    return None


def ranks(spec: JobSpec) -> int:
    """The ranks that share ``spec``'s work: its containers, times MirroredStrategy's replicas in each."""
    return spec.workers * int(getattr(spec.framework, "replicas", 1) or 1)


def _record(run_id: str, seconds: float, alone: JobSpec, cores: int, share: float,
            transport: Optional[str] = None, size: Optional[int] = None) -> dict[str, Any]:
    """A cell's floor record: its solo rank (``alone``, on ``cores``, taking ``seconds``) and the transport whose
    p50 ``transport_floors`` measures later."""
    return {"run_id": run_id, "solo_seconds": seconds, "solo_batch": alone.global_batch, "solo_samples": alone.samples,
            "solo_cores": cores, "ranks_per_core": share, "compute_floor": seconds * share, "transport": transport,
            "gradient_bytes": size, "allreduce_p50_us": None}


def itself(spec: JobSpec, train_seconds: float, host_cpus: Optional[int] = None) -> dict[str, Any]:
    """The floor record of a cell of one rank (``ranks(spec) == 1``): the cell itself, taking ``train_seconds``."""
    return {**_record(spec.run_id, train_seconds, spec, rank_cores(1, host_cpus or os.cpu_count() or 1)[0], 1),
            "itself": True}


def solo(fields: dict[str, Any], run_id: str, paths: Paths, run: Callable[..., Any],
         host_cpus: Optional[int] = None) -> dict[str, Any]:
    """Run the solo rank of the cell of ``fields`` (``run`` is ``start.up``) and return the cell's floor record,
    its transport p50 still to be measured (``transport_floors``). Raises what the run raises."""
    spec = make_spec(**fields, run_id=run_id)
    n, host = ranks(spec), host_cpus or os.cpu_count() or 1
    cores, per_core = rank_cores(n, host)
    share: float = per_core
    one = {"workers": 1, "samples": spec.samples // n, "global_batch": spec.global_batch // n}
    if spec.workers == 1 and n > 1:  # replicas: threads of one process, which the cores share out evenly at best
        one["replicas"] = 1
        share = max(1.0, n / host)
    alone = make_spec(**{**fields, **one}, run_id=run_id)
    info = run(alone, paths=paths, host_cpus=cores, stats_interval=None)
    if info.state != "succeeded" or not info.train_seconds:
        raise RuntimeError(f"its solo rank {info.state}: {info.error or 'no train time'}")
    transport = frameworks.get(spec.framework.name).floor_transport(spec) if spec.workers > 1 else None
    return _record(run_id, info.train_seconds, alone, cores, share, transport,
                   gradient_bytes(spec, paths) if transport else None)


def transport_floors(records: list[dict[str, Any]], paths: Paths, say: Callable[[str], None],
                     measure: Optional[Callable[..., list[Any]]] = None) -> None:
    """Measure the all-reduce p50 of every (transport, ranks, bytes) the ``records``' floors lack, once each, and
    fill each floor in (its transport floor and floor). ``measure`` is ``bench.run``."""
    if measure is None:
        from orchestrator import bench

        measure = bench.run
    # The all-reduce is measured on the engine the cells ran on: a cell's field, else Docker (``cells.expand``).
    wanted: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for record in records:
        floor = record.get("floor")
        if not isinstance(floor, dict) or "compute_floor" not in floor:
            continue
        if not _as_recorded(floor):  # cells.json edited by hand: no figure is made of it
            record["floor"] = {"error": "its record is not one orch wrote; run the sweep with --force"}
            continue
        if floor.get("transport") and floor.get("allreduce_p50_us") is None:
            workers = int(record["fields"].get("workers", 1))
            engine = str(record["fields"].get("engine") or DEFAULT_ENGINE)
            wanted.setdefault((engine, floor["transport"], workers, int(floor["gradient_bytes"])), []).append(floor)
        else:
            _complete(floor, record)
    for (engine, transport, workers, size), floors in sorted(wanted.items()):
        say(f"the transport floor: {transport}'s all-reduce of {size:,} bytes on {workers} ranks"
            + (f", on {engine}" if engine != DEFAULT_ENGINE else ""))
        try:
            rows = [r for r in measure([size], [workers], [transport], ITERATIONS, WARMUP, host=False, paths=paths,
                                       say=say, engine=engine) if r.placement == "containers"]
            p50 = rows[0].p50_us if rows else None
            if p50 is None:
                raise RuntimeError(rows[0].note if rows else "not measured")
        except Exception as exc:  # noqa: BLE001 - a floor is extra: the cells' figures stand without it
            note = one_line(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
            say(f"no transport floor for {transport} on {workers} ranks: {note}")
            for floor in floors:
                floor["error"] = f"the all-reduce was not measured: {note}"
            continue
        for floor in floors:
            floor["allreduce_p50_us"] = p50
            floor.pop("error", None)  # an earlier sweep's failed measurement, now made
    for record in records:
        floor = record.get("floor")
        if isinstance(floor, dict) and "compute_floor" in floor and "error" not in floor:
            _complete(floor, record)


def needed(record: dict[str, Any]) -> bool:
    """Whether a cell's record lacks its solo rank: never measured, or failed (not: cannot have one)."""
    floor = record.get("floor")
    return not isinstance(floor, dict) or ("compute_floor" not in floor and "none" not in floor)


def _as_recorded(floor: dict[str, Any]) -> bool:
    """Whether a floor record has the shape ``solo`` gives it."""
    from orchestrator import bench

    p50 = floor.get("allreduce_p50_us")
    transport = floor.get("transport")
    if transport is None:
        return is_seconds(floor.get("compute_floor")) and p50 is None
    size = floor.get("gradient_bytes")
    return (is_seconds(floor.get("compute_floor")) and transport in {t.name for t in bench.known_transports()}
            and isinstance(size, int) and not isinstance(size, bool) and 4 <= size <= 1 << 30
            and (p50 is None or is_seconds(p50)))


def _complete(floor: dict[str, Any], record: dict[str, Any]) -> None:
    """The floor's transport part and total, from its p50 and the cell's steps (its summary's)."""
    summary = record.get("summary") or {}
    steps = ((summary.get("workers") or [{}])[0].get("steps_per_epoch") or 0) * int(
        (summary.get("spec") or {}).get("epochs", 1))
    p50 = floor.get("allreduce_p50_us") or 0.0
    floor["steps"] = steps
    floor["transport_floor"] = p50 * 1e-6 * steps
    floor["floor"] = floor["compute_floor"] + floor["transport_floor"]

