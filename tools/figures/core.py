"""What every figure shares: reading a result file (``data``, which notes it for the check's message), printing
the block's output (``emit``), the formats of numbers and tables, and the plots, drawn or checked against their data."""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.analysis import machine as machines  # noqa: E402


READ: list[str] = []  # the result files the current block read, for the check's message
WRITE = True  # False while checking: plots are compared with their data, not drawn
PAGE = "README.md"  # the page whose block runs now, from the repository's root
TRACE = False  # True while only the files each figure reads are wanted: plots neither drawn nor checked

HEADLINE = "experiments/results/headline/cells.json"
HEADLINE_FILE = "experiments/headline.yaml"
FLOOR = "benchmarks/results/floor.json"
# JAX's floor.py run, its own: its image is built on demand (benchmarks/suite.py's floor-jax).
FLOOR_JAX = "benchmarks/results/floor-jax/floor.json"
# Each framework with its own transport and with MPI's shared memory, against the host's floor, in one run of its own.
FLOOR_TRANSPORT = "benchmarks/results/floor-transport/floor.json"
FRAMEWORK_TITLES = {"tensorflow": "TensorFlow, MultiWorkerMirrored", "mwms": "TensorFlow, MultiWorkerMirrored",
                    "mpi": "MPI (mpi4py), shared memory", "torch": "PyTorch DDP (gloo)",
                    "torch-shm": "PyTorch DDP, MPI's shared memory", "jax": "JAX (gloo)",
                    "jax-shm": "JAX, MPI's shared memory"}


class FigureError(Exception):
    """A figure cannot be drawn from its data, or a plot was drawn from other data than its file holds."""


def order(names: Iterable[str]) -> list[str]:
    """Framework names in the order the figures show them (FRAMEWORK_TITLES'), the unknown last."""
    known = list(FRAMEWORK_TITLES)
    return sorted(names, key=lambda n: known.index(n) if n in known else len(known))


# -- reading ---------------------------------------------------------------------------------------------
def data(rel: str) -> Any:
    """The committed JSON file ``rel`` (from the repository's root), noted as read by this block."""
    READ.append(rel)
    path = ROOT / rel
    if not path.is_file():
        raise FigureError(f"{rel} is missing: the figure is drawn from it (benchmarks/README.md says what writes it)")
    return json.loads(path.read_text())


def emit(text: str) -> None:
    """The block's output: printed, cog takes it (tools/docs_check.py runs cog with print output)."""
    print(text.rstrip("\n"))


# -- formatting ------------------------------------------------------------------------------------------
def num(value: Optional[float], spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted, or an em dash where there is none."""
    return "—" if value is None else f"{value:{spec}}{suffix}"


def span(values: Sequence[float], spec: str = ".2f", suffix: str = "") -> str:
    """The min–max of ``values``, or one value where they agree to the format."""
    low, high = num(min(values), spec), num(max(values), spec)
    return f"{low}{suffix}" if low == high else f"{low}–{high}{suffix}"


def median_range(values: Sequence[float], spec: str = ".2f", suffix: str = "") -> str:
    """The median, and the min–max in brackets where there are several values that differ."""
    if not values:
        return "—"
    middle = num(statistics.median(values), spec, suffix)
    return middle if len(values) == 1 or span(values, spec) == num(values[0], spec) else \
        f"{middle} ({span(values, spec, suffix)})"


def table(heads: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """A Markdown table; columns in ``right`` aligned right."""
    align = ["---:" if i in right else "---" for i in range(len(heads))]
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(records: Iterable[dict]) -> str:
    """The machine a set of cells was measured on, named as orch's reports name it."""
    found = {json.dumps(r["machine"], sort_keys=True) for r in records if isinstance(r.get("machine"), dict)}
    if len(found) != 1:
        raise FigureError(f"the cells were measured on {len(found)} machines; a figure names one")
    return machines.describe(json.loads(found.pop()))


# -- plots -------------------------------------------------------------------------------------------------
def _digest(series: Any) -> str:
    return hashlib.sha256(json.dumps(series, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _plot(rel: str, series: Any, draw: Callable[[Any], None], alt: str) -> None:
    """The plot ``rel`` of ``series``: drawn by ``draw(axes)`` when writing, with the digest of the series in the
    PNG; while checking, the PNG's digest must be the series' (the plot was drawn from this data)."""
    path = ROOT / rel
    digest = _digest(series)
    if TRACE:
        pass
    elif WRITE:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        try:
            draw(ax)
            fig.tight_layout()
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="png", dpi=110, metadata={"Software": None, "orch-figure-data": digest})
        finally:
            plt.close(fig)
    else:
        from PIL import Image

        if not path.is_file():
            raise FigureError(f"{rel} is missing; run `make figures`")
        with Image.open(path) as image:
            found = image.info.get("orch-figure-data")
        if found != digest:
            raise FigureError(f"{rel} was drawn from other data than {', '.join(READ)} holds; run `make figures`")
    emit(f"![{alt}]({link(rel)})")


def set_page(rel: str) -> None:
    """The page whose blocks run next (links are made relative to it)."""
    global PAGE
    PAGE = rel


def link(rel: str) -> str:
    """``rel`` (from the repository's root) as a link from the page whose block runs now."""
    return os.path.relpath(ROOT / rel, (ROOT / page()).parent)


def page() -> str:
    """The page whose block runs now, from the repository's root (set by tools/docs_check.py)."""
    return PAGE
