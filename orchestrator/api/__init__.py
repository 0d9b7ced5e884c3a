"""orch as a library: the CLI's verbs as typed functions of keyword arguments (verbs.py), what ``collect`` returns
(collected.py), and the handle of a run started without waiting (handle.py: ``start``, ``submit``).

    import orchestrator as orch

    one = orch.up(workers=1, dataset="synthetic", samples=6000, epochs=2)
    three = orch.up(workers=3, dataset="synthetic", samples=6000, epochs=2)
    print(orch.collect(one.run_id, three.run_id).comparison)
"""
from __future__ import annotations

from orchestrator.api.collected import Collected, collect
from orchestrator.api.handle import Run, RunResult
from orchestrator.api.verbs import (ExperimentRun, down, dry_run, experiment, experiment_report, job_spec, ps, render,
                                    run, start, submit, up)

__all__ = ["Collected", "ExperimentRun", "Run", "RunResult", "collect", "down", "dry_run", "experiment",
           "experiment_report", "job_spec", "ps", "render", "run", "start", "submit", "up"]
