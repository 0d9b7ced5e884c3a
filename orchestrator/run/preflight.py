"""What happens before a run's supervisor takes over: the checks (``preflight``, ``dry_run``) and the run's making
(``prepare``: data, images staged, the run directory, the script's snapshot, the record in ``starting``).

Everything here can fail on bad input, and does so before anything runs: the error reaches the command that started
the run as it is, and a run directory made here is removed again. What comes after is the supervisor's (runner.py).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable, Optional

from orchestrator import backends
from orchestrator.backends import Backend
from orchestrator.data import prepare as datasets
from orchestrator.errors import DiskFull, EngineUnreachable, InvalidSpec, OrchError
from orchestrator.paths import Paths, default_paths
from orchestrator.plan import SOURCE_DIR, Plan
from orchestrator.run import disk, scripts
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.run.snapshot import snapshot

Say = Callable[[str], None]


def _prepare_loaders(paths: Paths, folder: Path, say: Say) -> None:
    """The frameworks' data caches a script sees (data/loaders.py), prepared once. A host that cannot fetch their
    sources (no pip index, no apt-get) runs the script with empty caches, and says so: a script that loads its
    data otherwise needs none. Caches that were made and no longer match their record stop the run."""
    from orchestrator.data.loaders import KERAS_DIR, TORCHVISION_DIR

    if datasets.is_ready(paths.data, datasets.LOADERS):
        datasets.verify(paths.data, datasets.LOADERS)
        return
    try:
        datasets.prepare(paths.data, datasets.LOADERS, say)
    except datasets.DataError as exc:
        say(f"Keras' and torchvision's data caches could not be made ({exc.message}); a script's load_data() "
            "or download=True will find nothing offline")
        for part in (KERAS_DIR, TORCHVISION_DIR):
            (folder / part).mkdir(parents=True, exist_ok=True)


def preflight(p: Plan, backend: Backend, paths: Paths, say: Optional[Say] = None,
              dry_run: bool = False) -> Optional[scripts.Listing]:
    """What `up` checks before it changes anything, in the order it checks it: the run id is free, the script and
    the folder copied for it, the free space on the runs' disk, then the backend's own (the engine, its images, the
    limits it can give). Returns what the script's snapshot will take. With ``dry_run`` an engine that does not
    answer costs one line (``say``), not the check: what does not need the engine is still checked."""
    spec = p.spec
    if os.path.lexists(p.run_dir):  # RunDir.create claims the id with one mkdir, which this would fail
        raise InvalidSpec(f"run_id: {spec.run_id} is already used ({p.run_dir}); pick another or omit --run-id")
    listing = scripts.check(spec, guarded=(paths.runs, paths.results, paths.cache)) if spec.script else None
    free, floor = disk.free_below(paths.runs), disk.floor_bytes()
    if free is not None and free < floor:
        raise DiskFull(f"the disk that holds the runs has {free >> 20:,} MiB free, below orch's floor of {floor >> 20} "
                       "MiB (ORCH_DISK_FLOOR_MB), so the run would be stopped at once; free some space, or point "
                       "ORCH_RUNS_DIR at a larger disk")
    try:
        backend.preflight(p)
    except EngineUnreachable as exc:
        if not dry_run:
            raise
        (say or (lambda _msg: None))(f"could not check the images or the engine's limits: {exc.message}")
    return listing


def dry_run(p: Plan, backend: Optional[Backend] = None, paths: Optional[Paths] = None,
            say: Optional[Say] = None) -> Plan:
    """Check ``p`` as ``apply`` would (``preflight``) and return it, starting nothing and writing nothing: a data set
    not prepared yet, which ``apply`` would prepare, is said in a line."""
    backend = backend or backends.for_spec(p.spec)
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    preflight(p, backend, paths, say, dry_run=True)
    wanted: list[tuple[str, str]] = [(p.spec.dataset, f"the data set {p.spec.dataset}")]
    if p.loaders_dir is not None:
        wanted.append((datasets.LOADERS, "Keras' and torchvision's data caches for scripts"))
    for name, what in wanted:
        if name == datasets.GENERATED:
            continue
        if datasets.is_ready(paths.data, name):
            datasets.verify(paths.data, name)
        else:
            say(f"{what} not made yet; `orch up` makes them first, in {datasets.dataset_dir(paths.data, name)}")
    return p


def prepare(p: Plan, backend: Backend, paths: Paths, say: Say) -> tuple[RunDir, RunInfo]:
    """Check ``p`` (``preflight``), make its data and stage what its replicas need, claim its run directory, copy the
    script's folder into it, and record the run as ``starting``: all a supervisor needs to launch it. Nothing runs
    yet; on an error no half-made run directory is left."""
    spec = p.spec
    listing = preflight(p, backend, paths)
    datasets.prepare(paths.data, spec.dataset, say)
    if p.loaders_dir is not None:
        _prepare_loaders(paths, p.loaders_dir, say)
    backend.stage(p, say)
    run = RunDir(p.run_dir)
    run.create(p)
    source = None
    if listing is not None:  # the replicas see this copy, never the user's folder
        try:
            source = snapshot(listing, run.path / SOURCE_DIR)
        except (OSError, OrchError) as exc:
            shutil.rmtree(run.path, ignore_errors=True)  # ours, and nothing ran: no half-made run is left
            raise exc if isinstance(exc, OrchError) else OrchError(
                f"source: cannot copy {listing.folder} for the replicas: {exc.strerror or exc}") from None
        say(f"copied {source['files']} file(s), {source['bytes']} bytes, of {listing.folder} for the replicas")
        try:
            backend.stage_script(p, run.path / SOURCE_DIR, say)
        except BaseException:
            shutil.rmtree(run.path, ignore_errors=True)  # nothing ran: no half-made run is left
            raise
    info = RunInfo(run_id=spec.run_id, state=RunState.STARTING, spec=spec, started=time.time(), run_dir=str(run.path),
                   source=source)
    run.write_record(info)
    return run, info
