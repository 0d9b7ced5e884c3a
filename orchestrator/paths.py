"""Where orch finds its assets and keeps its caches and runs."""
from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchError

RESULTS = Path("results")  # collect's and experiments' default output root, relative to where orch runs


def resource(package: str, name: str) -> Path:
    """A file or folder that orch ships inside its package (templates, image recipes, the trainer's code), as a
    path on disk: image builds send these files to the engine, so orch must be installed as files, not zipped."""
    path = Path(str(importlib.resources.files(package).joinpath(name)))
    if not path.exists():
        raise OrchError(f"orch's {name} is missing from {package} ({path}); reinstall orch")
    return path


def trainer_dir() -> Path:
    """orch's trainer code, the ``orch_trainer`` package of every trainer image."""
    return resource("orchestrator", "trainer")


def recipe_dir(framework: str) -> Path:
    """The image recipe of ``framework`` (Dockerfile or install script, requirements and lock)."""
    return resource(f"orchestrator.frameworks.{framework}", "image")


@dataclass(frozen=True)
class Paths:
    """The host folders orch uses: runs, caches, and the root that collect and experiments write to."""

    runs: Path
    cache: Path
    results: Path = RESULTS

    @property
    def data(self) -> Path:
        return self.cache / "data"

    @property
    def wheelhouse(self) -> Path:
        return self.cache / "wheelhouse"


def default_paths() -> Paths:
    """Runs under ``$ORCH_RUNS_DIR`` (default ./runs); caches under ``$ORCH_CACHE_DIR`` (default ~/.cache/orch);
    results under ``$ORCH_RESULTS_DIR`` (default ./results)."""
    runs = Path(os.environ.get("ORCH_RUNS_DIR", "runs"))
    results = Path(os.environ.get("ORCH_RESULTS_DIR") or RESULTS)
    cache_root = os.environ.get("ORCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "orch"
    )
    return Paths(runs=runs.resolve(), cache=Path(cache_root).resolve(), results=results)
