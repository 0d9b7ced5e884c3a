"""Where a floor.py run's time goes, from what the run wrote: the trainer's own split of a step (``in_place``), of
its train seconds (``epochs_split``, ``epoch_ends``) and of its wall time (``split``), and the medians over repeats."""
from __future__ import annotations

import statistics

from floor_table import ENDS


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
