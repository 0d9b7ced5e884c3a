"""orch: run and measure distributed training in containers."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import OrchError  # noqa: E402
from .spec import JobSpec, make_spec  # noqa: E402

__all__ = ["__version__", "OrchError", "JobSpec", "make_spec", "plan", "apply", "up", "down", "ps", "build", "doctor"]

# The verbs import engine clients; load them only when asked for.
_LAZY = {"plan": "plan", "apply": "runner", "up": "runner", "down": "runs", "ps": "runs", "build": "images",
         "doctor": "doctor"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
