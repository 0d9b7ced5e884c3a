"""floor.md: the table of a floor.py run (benchmarks/floor.py measures; this writes what it measured), each
framework's T(N) against its floor, the split of a step, the start and its ladder."""
from __future__ import annotations

import json
import os

CORES = os.cpu_count() or 1
ENDS = ("validation_seconds", "reduction_seconds", "checkpoint_seconds")  # what an epoch's end spends, apart


def _host(r: dict) -> str:
    """The host's floor and T(N) against it; dashes for a run from before floor.py measured it."""
    if r.get("host_floor") is None:
        return "— | —"
    return f"{r['host_floor']:.2f} | {r['vs_host_floor']:.2f}"


def markdown(report: dict) -> str:
    lines = ["# N containers against this machine's floor", "",
             f"`python benchmarks/floor.py`, {report['when']}, {CORES} cores, {report['repeats']} repeat(s) "
             + (f"(medians; the start's floors and ladder at least {report.get('start_repeats', report['repeats'])}). "
                if report.get("start_repeats", 1) else "(medians; without the start's floors and ladder). ")
             + f"Workload: {json.dumps(report['workload'])}.", "",
             "T(N) is the slowest worker's train seconds. The compute floor is one rank alone at the per-rank batch "
             "on its shard (the same steps), pinned to the cores a rank gets, times the ranks that share a core; "
             "the transport floor is the framework's all-reduce p50 at N ranks for 80 KB times the steps. The host's "
             "floor is the compute floor plus the cheapest all-reduce this host can do between containers (MPI's "
             "over shared memory) at N ranks, times the steps.", "",
             "| framework | N | T(N) s | T(N)/T(1) | one rank s (batch, cores) | ranks per core | compute floor s | "
             "all-reduce p50 µs | transport floor s | floor s | T(N)/floor | host's floor s | T(N)/host's floor | "
             "wall − train s | largest container MiB | orch CPU s |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: |"]
    for name, result in report["frameworks"].items():
        for r in result["rows"]:
            vs_one = "—" if r["vs_one"] is None else f"{r['vs_one']:.2f}"  # no N = 1 in this run
            lines.append(f"| {name} | {r['workers']} | {r['train_seconds']:.2f} | {vs_one} | "
                         f"{r['solo_seconds']:.2f} ({r['solo_batch']}, {r['solo_cores']}) | {r['ranks_per_core']} | "
                         f"{r['compute_floor']:.2f} | {r['allreduce_p50_us']:.0f} | {r['transport_floor']:.2f} | "
                         f"{r['floor']:.2f} | {r['vs_floor']:.2f} | {_host(r)} | "
                         f"{r['wall_seconds'] - r['train_seconds']:.1f} | "
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
    if not all("overhead" in result for result in report["frameworks"].values()):
        return "\n".join(lines) + "\n"  # a run without the start (--no-start)
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
