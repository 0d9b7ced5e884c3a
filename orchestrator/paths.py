"""Where orch finds its assets and keeps its caches and runs."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import OrchError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("results")  # collect's and experiments' default output root, relative to where orch runs


def asset_dir(name: str) -> Path:
    """A top-level asset folder of the orch checkout (``images``, ``compose-templates``)."""
    path = PROJECT_ROOT / name
    if not path.is_dir():
        raise OrchError(f"orch's {name}/ folder is missing at {path}; install orch from its checkout with `pip install -e .`")
    return path


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
