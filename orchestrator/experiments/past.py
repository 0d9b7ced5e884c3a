"""Past sweeps: the experiment folders under a results folder, listed and read back from their cells.json."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from orchestrator.errors import RunNotFound
from orchestrator.experiments.sweep import CELLS_FILE, load_cells


@dataclass(frozen=True)
class PastExperiment:
    """One sweep's folder and what its cells.json records."""

    name: str
    folder: Path
    cells: dict[str, Any]

    @property
    def succeeded(self) -> int:
        return sum(1 for c in self.cells.values() if isinstance(c, dict) and c.get("state") == "succeeded")

    @property
    def last_run(self) -> Optional[float]:
        times = [c.get("started") for c in self.cells.values() if isinstance(c, dict)]
        return max((t for t in times if isinstance(t, (int, float))), default=None)

    def report(self, name: str) -> Optional[Path]:
        path = self.folder / name
        return path if path.is_file() else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "folder": str(self.folder), "cells": len(self.cells),
                "succeeded": self.succeeded, "failed": len(self.cells) - self.succeeded, "last_run": self.last_run,
                "report_md": str(self.report("report.md") or ""), "report_html": str(self.report("report.html") or "")}


def experiments(root: Path) -> list[PastExperiment]:
    """Every folder directly under ``root`` that holds a cells.json, newest first."""
    if not root.is_dir():
        return []
    found = [PastExperiment(p.name, p, load_cells(p)) for p in sorted(root.iterdir())
             if p.is_dir() and not p.is_symlink() and (p / CELLS_FILE).is_file()]
    return sorted(found, key=lambda e: (e.last_run or 0, e.name), reverse=True)


def find(root: Path, name: str) -> PastExperiment:
    """The experiment ``name`` under ``root``; RunNotFound naming the ones there are."""
    for past in experiments(root):
        if past.name == name:
            return past
    there = ", ".join(e.name for e in experiments(root)[:20]) or "none yet"
    raise RunNotFound(f"no experiment {name!r} in {root} (there: {there}); `orch experiment list` lists them")
