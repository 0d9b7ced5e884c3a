"""orch killed at each of its write points, between a temporary file and its rename: every file it wrote
before stays whole, and `orch ps` then reports the run as lost. No Docker: a fake backend in a forked child."""
from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from orchestrator import safeio
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.run.rundir import RunDir, RunState
from orchestrator.run.runner import apply
from orchestrator.run.runs import ps
from tests.fakes import FakeBackend, FakeClock, trainer

# Renames of one run: compose.yml, plan.json, run.json (starting, its supervisor's, then running), replicas.json each
# time a replica's state changes (both running, worker-0 done, both done), the two saved logs, and run.json at the end;
# one more is a run that finished.
WRITES = 11


def _child(root: str, crash_at: int) -> None:
    """Run a 2-worker job on the fake backend; die like `kill -9` just before the ``crash_at``-th rename."""
    renames = {"n": 0}
    real = os.replace

    def replace(src, dst):
        renames["n"] += 1
        if renames["n"] == crash_at:
            os._exit(9)  # the temporary file is written and synced; the rename never happens
        real(src, dst)

    safeio.os.replace = replace
    paths = Paths(Path(root) / "runs", Path(root) / "cache", Path(root) / "results")
    clock = FakeClock()
    p = plan(make_spec(run_id="crash", workers=2, dataset="synthetic", samples=6000, epochs=2), paths)
    apply(p, backend=FakeBackend(clock, {0: trainer(), 1: trainer()}), paths=paths, poll=0.5, stats_interval=None,
          clock=clock)
    os._exit(0)


class _Gone(FakeBackend):
    """The engine after the crash: no replica of the run is left."""

    def __init__(self):
        super().__init__(FakeClock(), {})

    def states(self, run_id=None):
        return []


@pytest.mark.parametrize("crash_at", range(1, WRITES + 2))
def test_a_crash_at_any_write_leaves_every_earlier_file_whole(tmp_path, crash_at):
    child = multiprocessing.get_context("fork").Process(target=_child, args=(str(tmp_path), crash_at))
    child.start()
    child.join(60)
    assert child.exitcode == (9 if crash_at <= WRITES else 0)
    run_dir = tmp_path / "runs" / "crash"
    if not run_dir.exists():
        return
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.name.endswith(".tmp"):
            text = path.read_text()
            if path.suffix == ".json":
                json.loads(text)  # whole, never half-written
            elif path.name == "compose.yml":
                assert text.endswith('"crash"\n')
    info = RunDir(run_dir).record()
    if info is None:  # killed before the first record: the run never started
        assert crash_at <= 3
        return
    (listed,) = ps(paths=Paths(tmp_path / "runs", tmp_path / "cache"), backend=_Gone())
    expected = RunState.SUCCEEDED if child.exitcode == 0 else (info.state if info.state.is_terminal else RunState.LOST)
    assert listed.state == expected
