"""TensorBoard event files of a run, beside its other results: ``<results>/<run>/tensorboard/``.

`tensorboard --logdir results/` then lists every collected run (and every sweep's cells, under
``<experiment>/runs/``) by its folder, and overlays their curves. Written with tensorboardX, which needs no
TensorFlow on the host; the folder is rewritten whole each time, so collecting twice logs once.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.tracking.figures import RunFigures

FOLDER = "tensorboard"
EVENTS = "events.out.tfevents.orch"


def write(figures: RunFigures) -> Path:
    """Write the run's scalars (per epoch, per worker and the job's) and system metrics (per second since the
    first stats sample); the folder written."""
    from tensorboardX import SummaryWriter

    out = figures.folder / FOLDER
    staging = figures.folder / f".{FOLDER}.new"
    shutil.rmtree(staging, ignore_errors=True)
    start = figures.wall_start or 0.0
    writer = SummaryWriter(logdir=str(staging), flush_secs=3600)
    try:
        for point in figures.series:
            group = "epoch" if not point.name.startswith("system/") else ""
            tag = f"{group}/{point.name}" if group else point.name
            walltime = start + point.step if point.name.startswith("system/") and start else None
            writer.add_scalar(tag, point.value, global_step=point.step, walltime=walltime)
        for name, value in sorted(figures.scalars.items()):
            writer.add_scalar(f"run/{name}", value, global_step=0)
        writer.add_text("run/spec", "\n".join(f"    {k}: {v}" for k, v in sorted(figures.params.items())), 0)
    finally:
        writer.close()
    # One file of a stable name (TensorBoard reads any name holding "tfevents"): collecting again replaces it.
    for i, path in enumerate(sorted(staging.glob("events.out.tfevents.*"))):
        path.rename(staging / f"{EVENTS}{'.' + str(i) if i else ''}")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out
