"""N containers against the floor this machine allows, per framework, measured in one run.

Usage: python benchmarks/floor.py [--frameworks mpi mwms torch] [--workers 1 2 3 4 8 16] [--repeats 1]
       python benchmarks/floor.py --tiny      (CI: tiny synthetic data, MPI, 1 and 2 containers; checks it runs)

For every framework and N, side by side in one run, on seed 000's workload (the MLP, 60,000 MNIST images drawn,
38,400 to train, 5 epochs, global batch 96, so 2,000 steps at every N):

  T(N)        the slowest worker's train seconds of an N-container orch run;
  compute     one rank alone, at the per-rank batch (96 / N) on its shard (samples / N): the same 2,000 steps,
              pinned to the cores a rank gets in the N-rank run (its own share when N < cores, else one core),
              times the most ranks that share a core under orch's pinning (ceil(N / cores));
  transport   the all-reduce p50 of that framework's transport at N ranks and the gradients' size (80 KB, the
              MLP's), measured as `orch bench allreduce` measures it, times the steps;
  floor(N)    compute + transport, and T(N)/floor(N) beside T(N)/T(1).

And for 3 containers, where a run's wall time beyond training goes, from the run's own events: creating and
starting the containers, importing the framework, connecting and loading data, training, and writing the
results and tearing down; beside the start floor, N containers of the same image started at once that each
import what the framework's trainer cannot run without and exit (what no orch can avoid), reading the Python
environment from the image's layers and, as orch's runs do, from a volume. Between that floor and the trainer, the
start ladder: orch runs of N containers whose replicas run a probe in place of the trainer (benchmarks/probes/start),
which only imports the same modules, or imports them and joins the job's group with one all-reduce, and leaves as the
trainer leaves. The rungs apart say what orch's own run adds to the floor (network, volumes, launcher, teardown),
what joining the group adds to that, and what the trainer adds beyond both (its data, model, test and results).
Writes benchmarks/results/floor.json and floor.md, or into --out (not with --tiny).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import backends, bench, frameworks  # noqa: E402
from orchestrator.docker.engine import Engine  # noqa: E402
from orchestrator.experiments.floor import parameters  # noqa: E402
from orchestrator.images import venv_volume  # noqa: E402
from orchestrator.jobspec import make_spec, script_fields  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.plan import plan, rank_cores  # noqa: E402
from orchestrator.run.rundir import RunDir  # noqa: E402
from orchestrator.run.runner import apply, container_user  # noqa: E402
from orchestrator.run.stats import STATS_FILE, read_samples  # noqa: E402
from orchestrator.safetext import printable  # noqa: E402
from orchestrator.timestamps import parse_timestamp  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PROBE = ROOT / "benchmarks" / "probes" / "start" / "probe.py"
LADDER = ("import", "connect")  # the probe's modes
START_REPEATS = 5
WORKLOAD = {"dataset": "mnist", "samples": 60_000, "epochs": 5, "global_batch": 96, "model": "mlp"}
TINY = {"dataset": "synthetic", "samples": 6_000, "epochs": 2, "global_batch": 96, "model": "mlp"}
GRADIENTS = 4 * parameters("mlp")  # bytes: the MLP's gradients, in TensorFlow and in PyTorch
# Each framework: its spec fields, its package, and the modules its trainer cannot run a multi-worker job without
# (what the start floor imports): TensorFlow's trainers import tf_keras (Keras 2) beside TensorFlow, MPI's ranks
# mpi4py too; DDP's constructor reads torch._dynamo.utils.get_optimize_ddp_mode(), which imports torch._dynamo; JAX's
# trainer flax's linen and optax.
# Its all-reduce transport is the one the framework names for such a job (Framework.floor_transport), as an
# experiment's floor takes it.
FRAMEWORKS = {
    "mpi": ({"framework": "mpi"}, "tensorflow", "tensorflow, tf_keras, mpi4py"),
    "mwms": ({"framework": "tensorflow", "strategy": "auto"}, "tensorflow", "tensorflow, tf_keras"),
    "torch": ({"framework": "torch"}, "torch", "torch, torch.distributed, torch._dynamo"),
    "jax": ({"framework": "jax"}, "jax", "jax, optax, flax.linen"),
}
CORES = os.cpu_count() or 1


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(fields: dict, workers: int, runs: Path, host_cpus: int = CORES, sample: bool = False,
        venv: bool = True) -> dict:
    """One orch run, planned as `orch up` plans it but for ``host_cpus`` cores to share out (1: pinned to core 0).
    Its slowest worker's train seconds, its wall seconds and steps, its start-up stages from its events, and the
    CPU seconds orch itself used; with ``sample``, each container sampled each second as `orch up` does, and the
    largest memory a container used. Without ``venv``, the replicas read the image's Python environment from its
    layers, as before orch served it from a volume (images/venv_volume.py)."""
    spec = make_spec(**fields, workers=workers, run_id=f"floor-{int(time.time() * 1000) % 10**10}-{workers}")
    paths = Paths(runs=runs, cache=default_paths().cache)
    p = plan(spec, paths, user=container_user(), host_cpus=host_cpus)
    if not venv:
        p = dataclasses.replace(p, replicas=tuple(dataclasses.replace(r, mounts=tuple(m for m in r.mounts
                                                                                      if not m.volume))
                                                  for r in p.replicas))
        p = dataclasses.replace(p, artifact=backends.get(p.backend).render(p))
    first_container: list[float] = []

    def on_event(_key, _event) -> None:  # at a worker's first event, one container at least runs
        if not first_container:
            first_container.append(first_container_start(spec.run_id))

    orch_cpu = time.process_time()
    info = apply(p, paths=paths, stats_interval=1.0 if sample else None, on_event=on_event)
    orch_cpu = time.process_time() - orch_cpu
    if info.state != "succeeded":
        raise SystemExit(f"{spec.run_id} ({fields}, {workers} workers) {info.state}: {info.error}")
    rundir = RunDir.of(paths, spec.run_id)
    stages: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # the CPU seconds each worker's process had used as the stage began
    done: list[float] = []
    for _key, event in rundir.events([("worker", i) for i in range(workers)]).read():
        if getattr(event, "event", "") == "start":
            stages.setdefault(event.stage, []).append(event.time)
            if event.cpu_seconds is not None:
                cpu.setdefault(event.stage, []).append(event.cpu_seconds)
        elif getattr(event, "event", "") == "done":
            done.append(event.time)
    steps = (info.workers[0].get("steps_per_epoch") or 0) * spec.epochs
    results = [rundir.result(("worker", i)) for i in range(workers)]
    memory = max((row["mem_used_bytes"] for row in read_samples(rundir.path / STATS_FILE)), default=0)
    return {"train_seconds": info.train_seconds, "wall_seconds": info.wall_seconds, "started": info.started,
            "first_container": first_container[0] if first_container else None,
            "steps": steps, "stages": stages, "stage_cpu": cpu, "done": done, "accuracy": info.test_accuracy,
            "orch_cpu_seconds": orch_cpu,
            "container_memory_mb": memory / 2**20,
            "in_place": in_place(results, steps), "epochs_split": epochs_split(results), "ends": epoch_ends(results)}


def first_container_start(run_id: str) -> float | None:
    """When the engine started the run's first container (Unix seconds), or None if none has started."""
    return min((parse_timestamp(c.started_at) for c in Engine().containers(run_id) if c.started_at), default=None)


IN_PLACE = ("compute_seconds", "allreduce_wait_seconds", "allreduce_in_flight_seconds")


def in_place(results: list, steps: int) -> dict | None:
    """Milliseconds per step of what a trainer measures of its own steps, from each worker's result.json, where it
    does (PyTorch's and MPI's): its compute (the step less its wait for the all-reduce), that wait (the part
    PyTorch's backward did not hide; all of MPI's blocking call) and the all-reduce in flight (handed over to done,
    so with any wait for a peer still computing); each the median of the workers. None for a trainer that does
    not measure them, or a single worker."""
    epochs = [getattr(r, "epochs", None) or [] for r in results]  # each worker's result.json
    measured = all(w and all(k in e for e in w for k in IN_PLACE) for w in epochs)
    if len(epochs) < 2 or not steps or not measured:
        return None
    sums = [{k: sum(e[k] for e in w) for k in IN_PLACE} for w in epochs]
    return {k: statistics.median(s[k] for s in sums) / steps * 1000 for k in IN_PLACE}


SPLIT = ("steady_steps", "first_epoch_extra", "epoch_ends", "outside_epochs")


def epochs_split(results: list) -> dict | None:
    """Where a run's train seconds go, from each worker's result.json, the median of the workers: the training steps
    as the later epochs run them (``steady_steps``), what the first epoch's steps took beyond a later epoch's (the
    tracing of the step, the collectives' first connection), each epoch's end (validation, the metrics read across
    workers, the checkpoint and the ranks' wait for it) and what the train clock holds outside the epochs' own
    seconds (Keras' set-up in fit() before the first epoch). The four add up to the worker's train seconds. A
    step's time is the trainer's own where it measures it (PyTorch, MPI: compute and all-reduce), else the epoch's
    seconds less its end (Keras'). None without two epochs of figures."""
    parts = []
    for r in results:
        epochs = getattr(r, "epochs", None) or []
        if len(epochs) < 2 or not getattr(r, "train_seconds", None):
            return None
        steps = []
        for e in epochs:
            if "compute_seconds" in e and "allreduce_wait_seconds" in e:
                steps.append(e["compute_seconds"] + e["allreduce_wait_seconds"])
            elif all(k in e for k in ("seconds", "validation_seconds", "reduction_seconds", "checkpoint_seconds")):
                steps.append(e["seconds"] - e["validation_seconds"] - e["reduction_seconds"] - e["checkpoint_seconds"])
            else:
                return None
        first_extra = steps[0] - statistics.median(steps[1:])
        parts.append({"steady_steps": sum(steps) - first_extra, "first_epoch_extra": first_extra,
                      "epoch_ends": sum(e["seconds"] for e in epochs) - sum(steps),
                      "outside_epochs": r.train_seconds - sum(e["seconds"] for e in epochs)})
    return {k: statistics.median(p[k] for p in parts) for k in SPLIT} if parts else None


ENDS = ("validation_seconds", "reduction_seconds", "checkpoint_seconds")


def epoch_ends(results: list) -> dict | None:
    """What an epoch's end holds, seconds per epoch, the median of the workers: its validation, the metrics read
    across the workers and the checkpoint, where the trainer times each (Keras'); None where it does not."""
    parts = []
    for r in results:
        epochs = getattr(r, "epochs", None) or []
        if not epochs or not all(e.get(k) is not None for e in epochs for k in ENDS):
            return None
        parts.append({k: sum(e[k] for e in epochs) / len(epochs) for k in ENDS})
    return {k: statistics.median(p[k] for p in parts) for k in ENDS} if parts else None


def split(measured: dict) -> dict:
    """Where a run's wall time goes, from its events: each stage ends when the last worker leaves it.

    create: until the engine started the first container (Compose's network and containers); start: from then until
    the first worker began importing (the interpreter and orch's trainer; for MPI, Hydra's launch and MPI's own
    start); import; data (loading it, pinning the worker); rendezvous (meeting the group: the framework's runtime,
    the model where the framework makes it collectively, the first collectives' wait for the last worker);
    train and test; results and teardown. A run whose trainer marks no loading (older) has its data in
    rendezvous's place; one with no container start recorded has no create and start apart."""
    s, started = measured["stages"], measured["started"]
    workers = len(s.get("training", []))
    first = min(s.get("importing", [started]))
    connecting = max(s.get("connecting", [first]))
    loaded = len(s.get("loading", [])) == workers
    imported = max(s["loading"]) if loaded else connecting
    training = max(s.get("training", [connecting]))
    done = max(measured["done"] or [training])
    end = started + measured["wall_seconds"]
    container = measured.get("first_container")
    container = container if container is not None and started <= container <= first else None
    cpu = measured.get("stage_cpu") or {}
    whole = len(cpu.get("training", [])) == len(cpu.get("connecting", [])) == len(cpu.get("importing", [])) == workers
    whole_loading = whole and len(cpu.get("loading", [])) == workers
    cpu_imported = sum(cpu["loading"] if whole_loading else cpu["connecting"]) if whole else None
    return {"create_and_start": first - started, "import": imported - first, "connect_and_load": training - imported,
            "create": None if container is None else container - started,
            "start": None if container is None else first - container,
            "data": connecting - imported if loaded else None, "rendezvous": training - connecting if loaded else None,
            "train_and_test": done - training, "results_and_teardown": end - done,
            "beyond_train": measured["wall_seconds"] - measured["train_seconds"], "train": measured["train_seconds"],
            # Summed over the workers' processes: the CPU each had used on reaching a stage, so before importing
            # (the interpreter, orch's trainer and, for MPI, joining the MPI job), importing, and connecting and
            # loading the data (the data, the framework's runtime, the model, the first collective's wait), that
            # split in two where the trainer marks its loading.
            "cpu_before_import": sum(cpu["importing"]) if whole else None,
            "cpu_import": cpu_imported - sum(cpu["importing"]) if whole else None,
            "cpu_connect_and_load": sum(cpu["training"]) - cpu_imported if whole else None,
            "cpu_data": sum(cpu["connecting"]) - sum(cpu["loading"]) if whole_loading else None,
            "cpu_rendezvous": sum(cpu["training"]) - sum(cpu["connecting"]) if whole_loading else None,
            "cpu_to_train": sum(cpu["training"]) if whole else None}


def start_floor(image: str, module: str, n: int, volume: str = "") -> tuple[float, float]:
    """Seconds for ``n`` containers of ``image``, started at once, to each import ``module`` and be removed; and the
    CPU seconds their processes used, summed. With ``volume``, that volume holds the image's Python environment
    (images/venv_volume.py), mounted read-only over it as orch's Compose runs mount it."""
    errors: list[str] = []
    cpu: list[float] = []
    mount = ["-v", f"{volume}:{venv_volume.VENV}:ro"] if volume else []

    def one() -> None:
        proc = subprocess.run(["docker", "run", "--rm", "--network", "none", *mount, "--entrypoint", "python3", image,
                               "-c", f"import time, {module}; print(time.process_time())"],
                              capture_output=True, text=True, errors="replace")
        if proc.returncode:
            errors.append(printable(proc.stderr.strip()[-300:]))
        else:
            cpu.append(float(proc.stdout.split()[-1]))

    threads = [threading.Thread(target=one) for _ in range(n)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    if errors:
        raise SystemExit(f"the start floor's containers failed: {errors[0]}")
    return wall, sum(cpu)


def measure(name: str, workload: dict, counts: list[int], repeats: int, iterations: int, runs: Path,
            start_repeats: int = START_REPEATS) -> dict:
    fields, package, module = FRAMEWORKS[name]
    transport = frameworks.get(fields["framework"]).floor_transport(make_spec(**fields, workers=2, run_id="transport"))
    rows = []
    for n in counts:
        cores, share = rank_cores(n, CORES)
        solo_fields = {**workload, **fields, "samples": workload["samples"] // n,
                       "global_batch": workload["global_batch"] // n}
        together, alone = [], []
        for r in range(repeats):  # the N-rank run and its solo rank back to back, so a drift hits both
            together.append(run({**workload, **fields}, n, runs, sample=True))
            alone.append(run(solo_fields, 1, runs, host_cpus=cores))
            log(f"{name}, N={n}, repeat {r + 1}/{repeats}: T(N) {together[-1]['train_seconds']:.2f} s, one rank "
                f"at batch {solo_fields['global_batch']} on {cores} core(s) {alone[-1]['train_seconds']:.2f} s")
        steps = together[0]["steps"]
        p50_us = 0.0
        if n > 1:
            [row] = [r for r in bench.run([GRADIENTS], [n], [transport], iterations, max(5, iterations // 10),
                                          host=False, say=lambda line: log(f"  {line}")) if r.placement == "containers"]
            p50_us = row.p50_us or 0.0
        t_n = statistics.median(m["train_seconds"] for m in together)
        compute = statistics.median(m["train_seconds"] for m in alone) * share
        transport_s = p50_us * 1e-6 * steps
        rows.append({"workers": n, "train_seconds": t_n, "train_range": [min(m["train_seconds"] for m in together),
                                                                          max(m["train_seconds"] for m in together)],
                     "wall_seconds": statistics.median(m["wall_seconds"] for m in together), "steps": steps,
                     "solo_seconds": compute / share, "solo_batch": solo_fields["global_batch"], "solo_cores": cores,
                     "ranks_per_core": share, "compute_floor": compute, "allreduce_p50_us": p50_us,
                     "transport_floor": transport_s, "floor": compute + transport_s,
                     "accuracy": together[0]["accuracy"], "runs": together,
                     "container_memory_mb": max(m["container_memory_mb"] for m in together),
                     "in_place_ms": _medians([m.get("in_place") for m in together], IN_PLACE),
                     "epochs_split": _medians([m.get("epochs_split") for m in together], SPLIT, every=True),
                     "solo_epochs_split": _medians([m.get("epochs_split") for m in alone], SPLIT, every=True),
                     "ends": _medians([m.get("ends") for m in together], ENDS, every=True),
                     "solo_ends": _medians([m.get("ends") for m in alone], ENDS, every=True),
                     "orch_cpu_seconds": statistics.median(m["orch_cpu_seconds"] for m in together)})
    one = next((r["train_seconds"] for r in rows if r["workers"] == 1), None)
    for r in rows:
        r["vs_one"] = r["train_seconds"] / one if one else None
        r["vs_floor"] = r["train_seconds"] / r["floor"] if r["floor"] else None
    out = {"rows": rows}
    three = next((r for r in rows if r["workers"] == 3), None) or rows[-1]
    n = three["workers"]
    image = frameworks.get(fields["framework"]).main_image()
    volume = venv_volume.volume_name(image)
    venv_volume.ensure(Engine(), volume, image, runs, log)  # made by the runs already, unless the image changed
    # The start's floors, the ladder's rungs and the trainer's run at N take seconds each, and each varies by about
    # a second from run to run on this host: at least ``start_repeats`` of each, in turn, so that a drift hits
    # every rung alike. The split of the trainer's start-up is taken from these runs.
    floors, volume_floors, package_floors, trainer = [], [], [], []
    ladder: dict[str, list[float]] = {mode: [] for mode in LADDER}
    for r in range(max(repeats, start_repeats)):
        floors.append(start_floor(image, module, n))
        volume_floors.append(start_floor(image, module, n, volume))
        package_floors.append(start_floor(image, package, n, volume))
        for mode in LADDER:  # an orch run of the probe as the run's script (run() plans it as `orch up --script`)
            probe = script_fields({**workload, **fields, "script": str(PROBE), "script_args": (mode, name, module)})
            ladder[mode].append(run(probe, n, runs)["wall_seconds"])
        trainer.append(run({**workload, **fields}, n, runs))
        log(f"{name}, the start at N={n}, repeat {r + 1}: floor {volume_floors[-1][0]:.2f} s, orch importing "
            f"{ladder['import'][-1]:.2f} s, joining {ladder['connect'][-1]:.2f} s, the trainer's wall − train "
            f"{trainer[-1]['wall_seconds'] - trainer[-1]['train_seconds']:.2f} s")
    parts = [split(m) for m in trainer]
    out["overhead"] = {"workers": n, "image": image, "module": module, "package": package, "runs": len(trainer),
                       **{k: _median(p[k] for p in parts) for k in parts[0]},
                       "start_floor": statistics.median(w for w, _ in floors),
                       "start_floor_cpu": statistics.median(c for _, c in floors),
                       "start_floor_volume": statistics.median(w for w, _ in volume_floors),
                       "start_floor_volume_cpu": statistics.median(c for _, c in volume_floors),
                       "start_floor_package": statistics.median(w for w, _ in package_floors),
                       **{f"probe_{mode}": statistics.median(walls) for mode, walls in ladder.items()},
                       "ladder_runs": {"start_floor_volume": [w for w, _ in volume_floors], **ladder,
                                       "beyond_train": [p["beyond_train"] for p in parts]}}
    return out


def _medians(runs: list[dict | None], keys: tuple[str, ...], every: bool = False) -> dict | None:
    """Each of ``keys``' median over the repeats that measured it; None if none did (or, with ``every``, if one
    did not)."""
    known = [r for r in runs if r]
    if not known or (every and len(known) < len(runs)):
        return None
    return {k: statistics.median(r[k] for r in known) for k in keys}


def _median(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def markdown(report: dict) -> str:
    lines = ["# N containers against this machine's floor", "",
             f"`python benchmarks/floor.py`, {report['when']}, {CORES} cores, {report['repeats']} repeat(s) "
             f"(medians; the start's floors and ladder at least {report.get('start_repeats', report['repeats'])}). "
             f"Workload: "
             f"{json.dumps(report['workload'])}.", "",
             "T(N) is the slowest worker's train seconds. The compute floor is one rank alone at the per-rank batch "
             "on its shard (the same steps), pinned to the cores a rank gets, times the ranks that share a core; "
             "the transport floor is the framework's all-reduce p50 at N ranks for 80 KB times the steps.", "",
             "| framework | N | T(N) s | T(N)/T(1) | one rank s (batch, cores) | ranks per core | compute floor s | "
             "all-reduce p50 µs | transport floor s | floor s | T(N)/floor | wall − train s | largest container "
             "MiB | orch CPU s |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, result in report["frameworks"].items():
        for r in result["rows"]:
            vs_one = "—" if r["vs_one"] is None else f"{r['vs_one']:.2f}"  # no N = 1 in this run
            lines.append(f"| {name} | {r['workers']} | {r['train_seconds']:.2f} | {vs_one} | "
                         f"{r['solo_seconds']:.2f} ({r['solo_batch']}, {r['solo_cores']}) | {r['ranks_per_core']} | "
                         f"{r['compute_floor']:.2f} | {r['allreduce_p50_us']:.0f} | {r['transport_floor']:.2f} | "
                         f"{r['floor']:.2f} | {r['vs_floor']:.2f} | {r['wall_seconds'] - r['train_seconds']:.1f} | "
                         f"{r['container_memory_mb']:.0f} | {r['orch_cpu_seconds']:.1f} |")
    measured = [(name, r) for name, result in report["frameworks"].items() for r in result["rows"]
                if r.get("in_place_ms")]
    if measured:
        lines += ["", "Each step as the trainer measures it in place (PyTorch's and MPI's: its compute, its wait for "
                  "the all-reduce that PyTorch's backward did not hide or MPI's blocking call took, and the all-reduce "
                  "in flight, which holds any wait for a peer still computing), milliseconds per step, beside the "
                  "floors' per step:", "",
                  "| framework | N | T(N) per step | compute in place | all-reduce wait | all-reduce in flight | "
                  "compute floor per step | all-reduce p50 |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in measured:
            m = r["in_place_ms"]
            lines.append(f"| {name} | {r['workers']} | {r['train_seconds'] / r['steps'] * 1000:.2f} | "
                         f"{m['compute_seconds']:.2f} | {m['allreduce_wait_seconds']:.2f} | "
                         f"{m['allreduce_in_flight_seconds']:.2f} | {r['compute_floor'] / r['steps'] * 1000:.2f} | "
                         f"{r['allreduce_p50_us'] / 1000:.2f} |")
    split_rows = [(name, r) for name, result in report["frameworks"].items() for r in result["rows"]
                  if r.get("epochs_split") and r.get("solo_epochs_split")]
    if split_rows:
        lines += ["", "Where T(N) goes, from each worker's result.json (the median of the workers), beside the same "
                  "split of the floor: the training steps as the later epochs run them, against the solo rank's "
                  "steps times the ranks that share a core plus the transport floor; and the rest (the first "
                  "epoch's steps beyond a later epoch's, each epoch's end with its validation, metrics and "
                  "checkpoint, and what the train clock holds outside the epochs), against the solo rank's rest "
                  "times the ranks that share a core. Seconds:", "",
                  "| framework | N | T(N) | steps | their floor | steps / floor | first epoch's extra | epoch ends | "
                  "outside the epochs | the rest | its floor | rest / floor | T(N)/floor |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in split_rows:
            here, solo, share = r["epochs_split"], r["solo_epochs_split"], r["ranks_per_core"]
            steps_floor = solo["steady_steps"] * share + r["transport_floor"]
            rest = here["first_epoch_extra"] + here["epoch_ends"] + here["outside_epochs"]
            rest_floor = (solo["first_epoch_extra"] + solo["epoch_ends"] + solo["outside_epochs"]) * share
            rest_ratio = f"{rest / rest_floor:.2f}" if rest_floor > 0 else "—"
            lines.append(f"| {name} | {r['workers']} | {r['train_seconds']:.2f} | {here['steady_steps']:.2f} | "
                         f"{steps_floor:.2f} | {here['steady_steps'] / steps_floor:.2f} | "
                         f"{here['first_epoch_extra']:.2f} | {here['epoch_ends']:.2f} | {here['outside_epochs']:.2f} | "
                         f"{rest:.2f} | {rest_floor:.2f} | {rest_ratio} | "
                         f"{r['vs_floor']:.2f} |")
    ends = [(name, r) for name, result in report["frameworks"].items() for r in result["rows"]
            if r.get("ends") and r.get("solo_ends")]
    if ends:
        lines += ["", "An epoch's end, where the trainer times its parts (Keras'), seconds per epoch, the median of "
                  "the workers, beside the solo rank's: its validation on the worker's own weights, the metrics read "
                  "across the workers, and the checkpoint (with the workers' wait for it):", "",
                  "| framework | N | validation | metrics across workers | checkpoint | an epoch's end | the solo "
                  "rank's | its validation | its metrics | its checkpoint |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in ends:
            here, solo = r["ends"], r["solo_ends"]
            lines.append(f"| {name} | {r['workers']} | " + " | ".join(f"{here[k]:.3f}" for k in ENDS)
                         + f" | {sum(here.values()):.3f} | {sum(solo.values()):.3f} | "
                         + " | ".join(f"{solo[k]:.3f}" for k in ENDS) + " |")
    first = next(iter(report["frameworks"].values()))["overhead"]
    n = first["workers"]
    lines += ["", f"Where the wall time beyond training goes, {n} containers (seconds, the median of "
              f"{first.get('runs', 1)} runs of the trainer, in turn with the start ladder's rungs below, from the "
              "runs' own events; each stage ends when the last worker leaves it): create, until the engine started "
              "the first container; start, until the first worker began importing (the interpreter and orch's "
              "trainer; for MPI also Hydra's launch and MPI's start); import; data, the workers loading theirs; "
              "rendezvous, meeting the group (the framework's runtime, TensorFlow's model made across the workers, "
              "MPI's model built before its first collective, the wait for the last worker). The start floor is "
              f"{n} containers of the image "
              "started at once that each import what the framework's trainer cannot run without and exit ("
              + "; ".join(f"{name}: {r['overhead']['module']}" for name, r in report["frameworks"].items())
              + "), reading the Python environment from the image's layers, and from a volume as orch's runs do "
              "(images/venv_volume.py); the ratio is against the second. The last column imports the framework's "
              "package alone (from the volume), for comparison:", "",
              "| framework | create | start | import | data | rendezvous | train and test | results and "
              "teardown | wall − train | start floor, image's layers | start floor, volume | (wall − train) / start "
              "floor | the package alone |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, result in report["frameworks"].items():
        o = result["overhead"]
        alone = o.get("start_floor_package")
        lines.append(f"| {name} | {_pair(o, 'create', 'start', 'create_and_start')} | {o['import']:.2f} | "
                     f"{_pair(o, 'data', 'rendezvous', 'connect_and_load', reverse=True)} | "
                     f"{o['train_and_test']:.2f} | {o['results_and_teardown']:.2f} | {o['beyond_train']:.2f} | "
                     f"{o['start_floor']:.2f} | {o['start_floor_volume']:.2f} | "
                     f"{o['beyond_train'] / o['start_floor_volume']:.2f} | "
                     + ("—" if alone is None else f"{alone:.2f}") + " |")
    lines += ["", f"The start ladder, {n} containers, wall seconds: the start floor (from the volume, as above); an "
              "orch run whose replicas only import those modules (benchmarks/probes/start/probe.py as the run's "
              "script, in place of the trainer: the same containers, network and volumes, Hydra's launch for MPI, "
              "the same way to leave); one whose replicas also join the job's group as the framework does and "
              "all-reduce one number; and the trainer's run, wall − train (its data, model, test and results "
              "beside that), the four in turn in every repeat. Each rung's step says what it adds (medians; the "
              "next table has each rung's range over the repeats):", "",
              "| framework | start floor | orch, import | orch, import and join | the trainer, wall − train | "
              "orch's run adds | joining adds | the trainer adds | (wall − train) / orch, import and join |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, result in report["frameworks"].items():
        o = result["overhead"]
        if o.get("probe_connect") is None:
            lines.append(f"| {name} | — | — | — | — | — | — | — | — |")
            continue
        floor, alone, joined, trainer = (o["start_floor_volume"], o["probe_import"], o["probe_connect"],
                                         o["beyond_train"])
        lines.append(f"| {name} | {floor:.2f} | {alone:.2f} | {joined:.2f} | {trainer:.2f} | {alone - floor:.2f} | "
                     f"{joined - alone:.2f} | {trainer - joined:.2f} | {trainer / joined:.2f} |")
    ranged = [(name, result["overhead"]["ladder_runs"]) for name, result in report["frameworks"].items()
              if result["overhead"].get("ladder_runs")]
    if ranged:
        lines += ["", "| framework | start floor, range | orch, import, range | orch, import and join, range | the "
                  "trainer, wall − train, range |", "| --- | --- | --- | --- | --- |"]
        for name, walls in ranged:
            lines.append(f"| {name} | " + " | ".join(f"{min(walls[k]):.2f}–{max(walls[k]):.2f}" for k in
                                                     ("start_floor_volume", "import", "connect", "beyond_train"))
                         + " |")
    lines += ["", f"The CPU behind it: seconds of CPU the {n} workers' processes used until each began training, "
              f"summed, by stage (from the same events), beside the CPU of the start floor's {n} imports (from the "
              "volume); "
              f"divided by the {CORES} cores, the least wall time that CPU takes:", "",
              "| framework | before importing | importing | data | rendezvous | to training, all "
              f"| on {CORES} cores | start floor's imports | on {CORES} cores |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, result in report["frameworks"].items():
        o = result["overhead"]
        if o.get("cpu_to_train") is None or o.get("start_floor_volume_cpu") is None:
            lines.append(f"| {name} | — | — | — | — | — | — | — | — |")
            continue
        lines.append(f"| {name} | {o['cpu_before_import']:.2f} | {o['cpu_import']:.2f} | "
                     f"{_pair(o, 'cpu_data', 'cpu_rendezvous', 'cpu_connect_and_load', reverse=True)} | "
                     f"{o['cpu_to_train']:.2f} | {o['cpu_to_train'] / CORES:.2f} | "
                     f"{o['start_floor_volume_cpu']:.2f} | {o['start_floor_volume_cpu'] / CORES:.2f} |")
    return "\n".join(lines) + "\n"


def _pair(o: dict, first: str, second: str, both: str, reverse: bool = False) -> str:
    """Two cells of a split, or, for a run measured before the split existed, their sum in the cell that holds most
    of it (the first; with ``reverse``, the second) and "—" in the other."""
    if o.get(first) is not None and o.get(second) is not None:
        return f"{o[first]:.2f} | {o[second]:.2f}"
    summed = f"{o[both]:.2f} (with {(first if reverse else second).removeprefix('cpu_')})"
    return f"— | {summed}" if reverse else f"{summed} | —"


def _interrupted(_signum, _frame) -> None:
    raise KeyboardInterrupt  # orch's runner stops and removes the run's containers, then re-raises


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)  # a killed benchmark leaves no containers behind
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", choices=sorted(FRAMEWORKS), default=[f for f in FRAMEWORKS if f != "jax"],
                        help="Default: every framework but JAX, whose image is built on demand and whose run is its "
                             "own (benchmarks/results/floor-jax/, `--frameworks jax --workers 1 2 3 4 8 --out ...`).")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 3, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=300, help="Timed all-reduces per transport and N.")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="Folder for floor.json and floor.md (a partial run need not replace the full table).")
    args = parser.parse_args()
    if args.tiny:
        args.frameworks, args.workers, args.repeats, args.iterations = ["mpi"], [1, 2], 1, 20
    workload = TINY if args.tiny else WORKLOAD
    start_repeats = 1 if args.tiny else START_REPEATS
    report = {"workload": workload, "repeats": args.repeats, "start_repeats": start_repeats, "cores": CORES,
              "frameworks": {},
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="orch-floor-") as tmp:
        for name in args.frameworks:
            report["frameworks"][name] = measure(name, workload, sorted(set(args.workers)), args.repeats,
                                                 args.iterations, Path(tmp), start_repeats)
    text = markdown(report)
    print(text)
    if not args.tiny:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "floor.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (args.out / "floor.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
