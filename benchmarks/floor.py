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
sys.path.insert(0, str(ROOT / "benchmarks"))  # floor_split beside it, also where a test loads this file by its path

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

from floor_split import IN_PLACE, SPLIT, _median, _medians, epoch_ends, epochs_split, in_place, split  # noqa: E402,F401
from floor_table import ENDS  # noqa: E402
from floor_table import markdown  # noqa: E402

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
    # The same trainers with their gradients over MPI's shared memory (--transport shm), mpi4py beside.
    "torch-shm": ({"framework": "torch", "transport": "shm"}, "torch", "torch, torch.distributed, torch._dynamo, mpi4py"),
    "jax-shm": ({"framework": "jax", "transport": "shm"}, "jax", "jax, optax, flax.linen, mpi4py"),
    # MPI with its ranks yielding in their wait where they outnumber the cores (orch's poll: transport.md says why).
    "mpi-yield": ({"framework": "mpi", "_env": {"ORCH_MPI_WAIT": "yield"}}, "tensorflow", "tensorflow, tf_keras, mpi4py"),
}
# The host's physical floor takes the cheapest all-reduce this host can do between containers: MPI's over shared
# memory, measured once per N in the run (and reused where a framework's own transport is it).
HOST_TRANSPORT = "mpi-shm"
_host_p50: dict[int, float] = {}
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
    fields = dict(fields)
    env = fields.pop("_env", {})  # variables for the replicas beside the spec's (a setting under measure)
    spec = make_spec(**fields, workers=workers, run_id=f"floor-{int(time.time() * 1000) % 10**10}-{workers}")
    paths = Paths(runs=runs, cache=default_paths().cache)
    p = plan(spec, paths, user=container_user(), host_cpus=host_cpus)
    if env:
        p = dataclasses.replace(p, replicas=tuple(dataclasses.replace(r, env={**r.env, **env}) for r in p.replicas))
        p = dataclasses.replace(p, artifact=backends.get(p.backend).render(p))
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


def allreduce_p50(transport: str, n: int, iterations: int) -> float:
    """The p50 of ``transport``'s all-reduce of the MLP's gradients between ``n`` containers, microseconds."""
    [row] = [r for r in bench.run([GRADIENTS], [n], [transport], iterations, max(5, iterations // 10),
                                  host=False, say=lambda line: log(f"  {line}")) if r.placement == "containers"]
    return row.p50_us or 0.0


def host_p50(n: int, iterations: int) -> float:
    """The host's cheapest all-reduce at ``n`` ranks (``HOST_TRANSPORT``), measured once per N in the run."""
    if n not in _host_p50:
        _host_p50[n] = allreduce_p50(HOST_TRANSPORT, n, iterations) if n > 1 else 0.0
    return _host_p50[n]


def measure(name: str, workload: dict, counts: list[int], repeats: int, iterations: int, runs: Path,
            start_repeats: int = START_REPEATS) -> dict:
    fields, package, module = FRAMEWORKS[name]
    spec_fields = {k: v for k, v in fields.items() if not k.startswith("_")}
    transport = frameworks.get(fields["framework"]).floor_transport(make_spec(**spec_fields, workers=2,
                                                                                run_id="transport"))
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
            p50_us = host_p50(n, iterations) if transport == HOST_TRANSPORT else allreduce_p50(transport, n, iterations)
        t_n = statistics.median(m["train_seconds"] for m in together)
        compute = statistics.median(m["train_seconds"] for m in alone) * share
        transport_s = p50_us * 1e-6 * steps
        rows.append({"workers": n, "train_seconds": t_n, "train_range": [min(m["train_seconds"] for m in together),
                                                                          max(m["train_seconds"] for m in together)],
                     "wall_seconds": statistics.median(m["wall_seconds"] for m in together), "steps": steps,
                     "solo_seconds": compute / share, "solo_batch": solo_fields["global_batch"], "solo_cores": cores,
                     "ranks_per_core": share, "compute_floor": compute, "allreduce_p50_us": p50_us,
                     "transport_floor": transport_s, "floor": compute + transport_s,
                     "host_allreduce_p50_us": host_p50(n, iterations),
                     "host_floor": compute + host_p50(n, iterations) * 1e-6 * steps,
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
        r["vs_host_floor"] = r["train_seconds"] / r["host_floor"] if r["host_floor"] else None
    out = {"rows": rows, "transport": transport}
    if not start_repeats:  # the start's floors and ladder left out (--no-start)
        return out
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
            probe = script_fields({**workload, **spec_fields, "script": str(PROBE), "script_args": (mode, name, module)})
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
    parser.add_argument("--no-start", action="store_true",
                        help="Leave out the start's floors and ladder at N = 3 (minutes per framework): T(N) against "
                             "the floors alone.")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="Folder for floor.json and floor.md (a partial run need not replace the full table).")
    args = parser.parse_args()
    if args.tiny:
        args.frameworks, args.workers, args.repeats, args.iterations = ["mpi"], [1, 2], 1, 20
    workload = TINY if args.tiny else WORKLOAD
    start_repeats = 0 if args.no_start else 1 if args.tiny else START_REPEATS
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
