"""orch: run and measure distributed TensorFlow training on Docker."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import OrchError  # noqa: E402
from .spec import JobSpec, make_spec  # noqa: E402

__all__ = ["__version__", "OrchError", "JobSpec", "make_spec", "plan", "up", "down", "ps", "build", "doctor"]


def __getattr__(name: str):
    # The verbs import Docker clients; load them only when asked for.
    if name == "plan":
        from .plan import plan

        return plan
    if name in ("up", "down", "ps"):
        from . import runs

        return getattr(runs, name)
    if name == "build":
        from .images import build

        return build
    if name == "doctor":
        from .doctor import doctor

        return doctor
    raise AttributeError(name)
