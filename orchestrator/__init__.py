"""orch: run and measure distributed training in containers.

The verbs are functions of keyword arguments (``orchestrator.api``): ``up``, ``run`` (a function as the job),
``render``, ``dry_run``, ``collect``, ``experiment``, ``ps`` and ``down``, plus ``job_spec`` and ``doctor``. They load on first use, since they
import engine clients. ``orchestrator.plan`` is the planning package; ``render`` returns a plan.
"""
from __future__ import annotations

__version__ = "0.1.0"

import sys  # noqa: E402
import types  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from orchestrator.errors import OrchError  # noqa: E402
from orchestrator.jobspec import JobSpec, SpecFields, make_spec  # noqa: E402

if TYPE_CHECKING:  # what the lazy names below are, for a type checker; at run time they load on first use
    from orchestrator.api import collect, down, dry_run, experiment, job_spec, ps, render, run, up
    from orchestrator.docker.doctor import doctor

__all__ = ["__version__", "OrchError", "JobSpec", "SpecFields", "make_spec", "job_spec", "render", "dry_run", "up",
           "run", "collect", "experiment", "ps", "down", "doctor"]

# name -> module that defines it. Each is always the function: ``run`` is also a subpackage's name, which _Package
# keeps the import system from binding here.
_LAZY = {"job_spec": "api", "render": "api", "dry_run": "api", "up": "api", "run": "api", "collect": "api",
         "experiment": "api", "ps": "api", "down": "api", "doctor": "docker.doctor"}


class _Package(types.ModuleType):
    """The package, whose ``run`` is the function (``api.run``), not the subpackage ``orchestrator.run``: importing
    the subpackage binds it here as an attribute, which this refuses. The subpackage stays what ``from
    orchestrator.run import ...`` and ``sys.modules`` give."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "run" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
if isinstance(globals().get("run"), types.ModuleType):  # bound by an import above, before _Package was in place
    del globals()["run"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # later look-ups find the function itself
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
