"""orch: run and measure distributed training in containers.

The verbs are functions of keyword arguments (``orchestrator.api``): ``up``, ``run`` (a function as the job), ``start``
and ``submit`` (the same, returning a handle at once), ``render``, ``dry_run``, ``collect``, ``experiment``, ``ps`` and ``down``, plus ``job_spec`` and ``doctor``. They load on first use, since they
import engine clients. ``orchestrator.plan`` is the planning package; ``render`` returns a plan.
"""
from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any  # noqa: E402

from orchestrator.errors import FunctionFailed, InvalidSpec, OrchError, WorkerFailed  # noqa: E402
from orchestrator.jobspec import JobSpec, SpecFields, make_spec  # noqa: E402

if TYPE_CHECKING:  # what the lazy names below are, for a type checker; at run time they load on first use
    from orchestrator.api import (Collected, ExperimentRun, Run, RunResult, collect, down, dry_run, experiment,
                                  job_spec, ps, render, run, start, submit, up)
    from orchestrator.docker.doctor import doctor

__all__ = ["__version__", "OrchError", "InvalidSpec", "WorkerFailed", "FunctionFailed", "Run", "RunResult", "Collected",
           "ExperimentRun", "JobSpec", "SpecFields", "make_spec", "job_spec", "render", "dry_run", "up",
           "start", "submit", "run", "collect", "experiment", "ps", "down", "doctor"]

# name -> module that defines it; no name here is also a subpackage's, so each is always the function. ``run`` is
# the subpackage orchestrator.run, which is callable as api.run (run/__init__.py): a subpackage import would rebind it.
_LAZY = {"Run": "api", "RunResult": "api", "Collected": "api", "ExperimentRun": "api", "job_spec": "api",
         "render": "api", "dry_run": "api", "up": "api", "start": "api", "submit": "api", "collect": "api", "experiment": "api",
         "ps": "api", "down": "api", "doctor": "docker.doctor"}


def __getattr__(name: str) -> Any:
    if name == "run":
        import importlib

        return importlib.import_module(".run", __name__)
    if name not in _LAZY:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # later look-ups find the function itself
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
